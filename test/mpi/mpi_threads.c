/* Open MPI with MPI_THREAD_MULTIPLE over bypass: THREADS threads per rank,
 * each on a communicator of its own (so the OFI MTL's thread grouping, with
 * scalable endpoints, gives each its own transmit and receive context),
 * exchange tagged messages with the partner rank (rank ^ 1) at once: a
 * ping-pong, then a window of nonblocking sends and receives of sizes from
 * 8 B to 256 KiB, then an allreduce; every value is checked. Prints "all
 * thread checks passed on N ranks" on rank 0. Usage: mpi_threads [ITERS]. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define WINDOW 16

static int rank, size, iters = 200;
static MPI_Comm comms[THREADS];
static int failures[THREADS];

static void fill(unsigned char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 131u + i * 7u);
}

static int check(const unsigned char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(seed * 131u + i * 7u)) return 0;
  return 1;
}

static void *worker(void *arg) {
  const int t = (int)(long)arg;
  MPI_Comm comm = comms[t];
  const int peer = rank ^ 1;
  const int even = (rank % 2) == 0;
  /* Ping-pong: the seed says which thread and iteration the value is from. */
  for (int i = 0; i < iters; i++) {
    unsigned v = (unsigned)(t * 1000003 + i), got = 0;
    if (even) {
      MPI_Send(&v, 1, MPI_UNSIGNED, peer, t, comm);
      MPI_Recv(&got, 1, MPI_UNSIGNED, peer, t, comm, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(&got, 1, MPI_UNSIGNED, peer, t, comm, MPI_STATUS_IGNORE);
      MPI_Send(&got, 1, MPI_UNSIGNED, peer, t, comm);
    }
    if (got != v && even) failures[t]++;
  }
  /* Windows of nonblocking transfers both ways, sizes 8 B to 256 KiB. */
  static const size_t sizes[] = {8, 4096, 65536, 262144};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    const size_t n = sizes[s];
    unsigned char *tx = malloc(n * WINDOW), *rx = malloc(n * WINDOW);
    MPI_Request req[2 * WINDOW];
    for (int w = 0; w < WINDOW; w++) {
      fill(tx + w * n, n, (unsigned)(rank * 7919 + t * 97 + w));
      memset(rx + w * n, 0, n);
      MPI_Irecv(rx + w * n, (int)n, MPI_BYTE, peer, 100 + w, comm, &req[w]);
    }
    for (int w = 0; w < WINDOW; w++)
      MPI_Isend(tx + w * n, (int)n, MPI_BYTE, peer, 100 + w, comm, &req[WINDOW + w]);
    MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
    for (int w = 0; w < WINDOW; w++)
      if (!check(rx + w * n, n, (unsigned)(peer * 7919 + t * 97 + w))) failures[t]++;
    free(tx);
    free(rx);
  }
  /* A collective on each thread's communicator, all at once. */
  long mine = rank + 1 + t, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
  if (sum != (long)size * (size + 1) / 2 + (long)size * t) failures[t]++;
  return NULL;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1) iters = atoi(argv[1]);
  if (provided != MPI_THREAD_MULTIPLE || size % 2 != 0) {
    if (rank == 0)
      fprintf(stderr, "mpi_threads: needs MPI_THREAD_MULTIPLE (got %d) and an even number of ranks (%d)\n",
              provided, size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int t = 0; t < THREADS; t++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(long)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  int bad = 0, all = 0;
  for (int t = 0; t < THREADS; t++) bad += failures[t];
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int t = 0; t < THREADS; t++) MPI_Comm_free(&comms[t]);
  if (rank == 0) {
    if (all == 0)
      printf("all thread checks passed on %d ranks (%d threads each)\n", size, THREADS);
    else
      printf("mpi_threads: %d checks failed\n", all);
  }
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
