/* Open MPI over bypass on one host (fabric/fi/mpi_local_test.sh): the
 * paths of Open MPI's OFI MTL an MPI program takes, each checked.
 *   mpi_check DELAY_S MESSAGES
 * 1. MPI_ANY_SOURCE receives, the source reported;
 * 2. MPI_Iprobe and MPI_Mprobe/MPI_Mrecv with the count;
 * 3. MPI_Cancel of a receive nobody matches;
 * 4. one-sided (--mca osc pt2pt): MPI_Put, MPI_Accumulate, MPI_Get;
 * 5. a receiver that computes for DELAY_S seconds while the others each
 *    send it MESSAGES small messages (every send must complete). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int rank, size;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "rank %d: ", rank);                        \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                              \
    }                                                            \
  } while (0)

static void AnySource(void) {
  if (rank != 0) {
    int v = rank * 10;
    MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    return;
  }
  int seen = 0;
  for (int i = 1; i < size; ++i) {
    int v;
    MPI_Status st;
    MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st);
    CHECK(v == st.MPI_SOURCE * 10, "MPI_ANY_SOURCE: %d from rank %d", v, st.MPI_SOURCE);
    seen |= 1 << st.MPI_SOURCE;
  }
  CHECK(seen == (1 << size) - 2, "MPI_ANY_SOURCE: ranks seen 0x%x", seen);
}

static void Probes(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  const int n = 1000 + rank;
  int* out = malloc(n * sizeof(int));
  for (int i = 0; i < n; ++i) out[i] = rank + i;
  MPI_Request r;
  MPI_Isend(out, n, MPI_INT, peer, 9, MPI_COMM_WORLD, &r);
  int flag = 0, count = 0;
  MPI_Status st;
  while (!flag) MPI_Iprobe(peer, 9, MPI_COMM_WORLD, &flag, &st);
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(count == 1000 + peer, "MPI_Iprobe: count %d, want %d", count, 1000 + peer);
  MPI_Message m;
  MPI_Mprobe(peer, 9, MPI_COMM_WORLD, &m, &st);
  int* in = malloc(count * sizeof(int));
  MPI_Mrecv(in, count, MPI_INT, &m, &st);
  for (int i = 0; i < count; ++i) CHECK(in[i] == peer + i, "MPI_Mrecv: element %d", i);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  free(out);
  free(in);
}

static void Cancel(void) {
  int v, cancelled = 0;
  MPI_Request r;
  MPI_Status st;
  MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &r);
  MPI_Cancel(&r);
  MPI_Wait(&r, &st);
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled, "MPI_Cancel: the receive was not cancelled");
}

static void OneSided(void) {
  int* base;
  MPI_Win win;
  MPI_Win_allocate(sizeof(int) * size, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  for (int i = 0; i < size; ++i) base[i] = -1;
  MPI_Win_fence(0, win);
  for (int t = 0; t < size; ++t) MPI_Put(&rank, 1, MPI_INT, t, rank, 1, MPI_INT, win);
  MPI_Win_fence(0, win);
  for (int i = 0; i < size; ++i) CHECK(base[i] == i, "MPI_Put: slot %d holds %d", i, base[i]);
  /* The fence also opened the next epoch: no rank accumulates into a slot
   * before every rank has read its window. */
  MPI_Barrier(MPI_COMM_WORLD);
  int one = 1, got = 0;
  MPI_Accumulate(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_SUM, win);
  MPI_Win_fence(0, win);
  MPI_Get(&got, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
  MPI_Win_fence(0, win);
  CHECK(got == size, "MPI_Accumulate then MPI_Get: %d, want %d", got, size);
  MPI_Win_free(&win);
}

static void LateReceiver(int delay, int messages) {
  if (rank == 0) {
    sleep(delay);
    for (int i = 0; i < messages * (size - 1); ++i) {
      int v;
      MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  } else {
    for (int i = 0; i < messages; ++i) MPI_Send(&i, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int delay = argc > 1 ? atoi(argv[1]) : 0;
  const int messages = argc > 2 ? atoi(argv[2]) : 1000;
  AnySource();
  MPI_Barrier(MPI_COMM_WORLD);
  Probes();
  MPI_Barrier(MPI_COMM_WORLD);
  Cancel();
  MPI_Barrier(MPI_COMM_WORLD);
  OneSided();
  MPI_Barrier(MPI_COMM_WORLD);
  LateReceiver(delay, messages);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
