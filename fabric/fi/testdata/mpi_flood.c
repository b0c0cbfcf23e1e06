/* A many-to-one flood whose receiver is busy before it posts (issue 21):
 * every rank but 0 sends MESSAGES small messages to rank 0 as fast as it
 * can, while rank 0 computes for BUSY_MS milliseconds before it posts a
 * single receive. MPI requires every send to complete however late the
 * receiver comes; rank 0 then checks that every message arrived, in order
 * per sender, with the payload it was sent with.
 *
 *   mpi_flood BUSY_MS MESSAGES
 *
 * Prints "flood passed: N senders x M messages, busy B ms, drained in D ms,
 * peak RSS R MiB" on rank 0 (R: its VmHWM, what buffering the flood cost
 * it); exits non-zero (MPI_Abort) on the first wrong message. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { kWords = 4, kTag = 7 };

static double NowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* What sender s puts in its message i: every word depends on both. */
static uint64_t Word(int s, int i, int w) {
  return ((uint64_t)s << 48) ^ ((uint64_t)i << 8) ^ (uint64_t)(w * 0x9e3779b9u);
}

/* The process's peak resident memory in MiB (VmHWM), or -1. */
static long PeakRssMiB(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  }
  fclose(f);
  return kib < 0 ? -1 : kib / 1024;
}

/* Computes (no MPI call, so no progress) for ms milliseconds. */
static volatile uint64_t sink;
static void Busy(int ms) {
  const double end = NowMs() + ms;
  uint64_t x = 1;
  while (NowMs() < end) {
    for (int k = 0; k < 10000; ++k) x = x * 6364136223846793005u + 1442695040888963407u;
  }
  sink = x;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int busy_ms = argc > 1 ? atoi(argv[1]) : 1000;
  const int messages = argc > 2 ? atoi(argv[2]) : 20000;
  uint64_t buf[kWords];
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) {
    for (int i = 0; i < messages; ++i) {
      for (int w = 0; w < kWords; ++w) buf[w] = Word(rank, i, w);
      MPI_Send(buf, kWords, MPI_UINT64_T, 0, kTag, MPI_COMM_WORLD);
    }
  } else {
    Busy(busy_ms);
    const double start = NowMs();
    int* next = calloc((size_t)size, sizeof(int));
    for (long n = 0; n < (long)messages * (size - 1); ++n) {
      MPI_Status st;
      MPI_Recv(buf, kWords, MPI_UINT64_T, MPI_ANY_SOURCE, kTag, MPI_COMM_WORLD, &st);
      const int s = st.MPI_SOURCE;
      int count;
      MPI_Get_count(&st, MPI_UINT64_T, &count);
      int ok = s > 0 && s < size && count == kWords && next[s] < messages;
      for (int w = 0; ok && w < kWords; ++w) ok = buf[w] == Word(s, next[s], w);
      if (!ok) {
        fprintf(stderr, "rank 0: message %ld from rank %d (count %d) is not message %d of it\n",
                n, s, count, s > 0 && s < size ? next[s] : -1);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      ++next[s];
    }
    printf("flood passed: %d senders x %d messages, busy %d ms, drained in %.0f ms, "
           "peak RSS %ld MiB\n",
           size - 1, messages, busy_ms, NowMs() - start, PeakRssMiB());
    free(next);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
