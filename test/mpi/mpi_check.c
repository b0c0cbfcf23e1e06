/* Open MPI over bypass (test/mpi/mpi_local_test.sh, mpi_netns_test.sh):
 * the paths of Open MPI's OFI MTL an MPI program takes, each checking the
 * values it moved.
 *   mpi_check [DELAY_S [MESSAGES [MAX_BYTES]]]
 * 1. ping-pong between rank 0 and every other rank, 0 B to MAX_BYTES;
 * 2. bandwidth: windows of nonblocking sends between pairs of ranks;
 * 3. collectives (Bcast, Reduce, Allreduce, Allgather, Alltoall, Scatter,
 *    Gather, Barrier) at 1, 1,000 and 262,144 ints (1 MiB) and more;
 * 4. MPI_ANY_SOURCE and MPI_ANY_TAG receives, the status and the order of
 *    each source's messages checked; a receive for one tag passing others;
 * 5. MPI_Iprobe and MPI_Mprobe/MPI_Mrecv with the count;
 * 6. MPI_Cancel of a receive nobody matches;
 * 7. one-sided (--mca osc pt2pt): MPI_Put, MPI_Accumulate, MPI_Get within
 *    fences, then under MPI_Win_lock/unlock (exclusive and shared);
 * 8. a receiver that computes for DELAY_S seconds while the others each
 *    send it MESSAGES small messages (every send must complete). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void* Alloc(size_t n) {
  void* p = malloc(n ? n : 1);
  CHECK(p != NULL, "out of memory (%zu bytes)", n);
  return p;
}

/* The byte at offset i of a message that SEED names. */
static unsigned char Pattern(unsigned seed, size_t i) {
  return (unsigned char)(seed * 131u + i * 7u + (i >> 8) * 13u);
}

static void Fill(unsigned char* buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) buf[i] = Pattern(seed, i);
}

static void Verify(const unsigned char* buf, size_t n, unsigned seed, const char* what) {
  for (size_t i = 0; i < n; ++i)
    CHECK(buf[i] == Pattern(seed, i), "%s: %zu bytes, byte %zu is %u, want %u", what, n, i,
          buf[i], Pattern(seed, i));
}

static void PingPong(size_t max_bytes) {
  unsigned char* buf = Alloc(max_bytes);
  for (int peer = 1; peer < size; ++peer) {
    if (rank != 0 && rank != peer) continue;
    for (size_t n = 0; n <= max_bytes; n = n ? n * 4 : 1) {
      const unsigned ping = (unsigned)(n + peer), pong = ping + 1;
      MPI_Status st;
      int count;
      for (int iter = 0; iter < 3; ++iter) {
        if (rank == 0) {
          Fill(buf, n, ping + iter);
          MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
          memset(buf, 0, n);
          MPI_Recv(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &st);
          MPI_Get_count(&st, MPI_BYTE, &count);
          CHECK((size_t)count == n, "ping-pong: %d bytes back, want %zu", count, n);
          Verify(buf, n, pong + iter, "ping-pong reply");
        } else {
          MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &st);
          MPI_Get_count(&st, MPI_BYTE, &count);
          CHECK((size_t)count == n, "ping-pong: %d bytes, want %zu", count, n);
          Verify(buf, n, ping + iter, "ping-pong");
          Fill(buf, n, pong + iter);
          MPI_Send(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
      }
    }
  }
  free(buf);
}

/* Pairs (0,1), (2,3), ...: the even rank sends WINDOW messages at once,
 * the odd one has them all posted; each buffer carries its own pattern. */
static void Bandwidth(size_t max_bytes) {
  enum { kWindow = 16 };
  const int peer = rank ^ 1;
  if (peer >= size) return;
  const size_t sizes[] = {8, 65536, max_bytes};
  for (int s = 0; s < 3; ++s) {
    const size_t n = sizes[s];
    unsigned char* buf = Alloc(n * kWindow);
    MPI_Request req[kWindow];
    for (int round = 0; round < 2; ++round) {
      for (int w = 0; w < kWindow; ++w) {
        unsigned char* b = buf + n * w;
        if (rank & 1) {
          memset(b, 0, n);
          MPI_Irecv(b, (int)n, MPI_BYTE, peer, 20 + w, MPI_COMM_WORLD, &req[w]);
        } else {
          Fill(b, n, (unsigned)(w * 1000 + round + n));
          MPI_Isend(b, (int)n, MPI_BYTE, peer, 20 + w, MPI_COMM_WORLD, &req[w]);
        }
      }
      MPI_Waitall(kWindow, req, MPI_STATUSES_IGNORE);
      if (rank & 1)
        for (int w = 0; w < kWindow; ++w)
          Verify(buf + n * w, n, (unsigned)(w * 1000 + round + n), "bandwidth window");
    }
    free(buf);
  }
}

static void Collectives(size_t max_bytes) {
  const int counts[] = {1, 1000, (int)(max_bytes / sizeof(int)), (int)(max_bytes / sizeof(int)) + 3};
  for (int c = 0; c < 4; ++c) {
    const int n = counts[c];
    const int root = c % size;
    int* a = Alloc(sizeof(int) * (size_t)n * size);
    int* b = Alloc(sizeof(int) * (size_t)n * size);

    for (int i = 0; i < n; ++i) a[i] = rank == root ? i * 3 + root : -1;
    MPI_Bcast(a, n, MPI_INT, root, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) CHECK(a[i] == i * 3 + root, "MPI_Bcast(%d): [%d] = %d", n, i, a[i]);

    for (int i = 0; i < n; ++i) a[i] = rank + i;
    const int rank_sum = size * (size - 1) / 2;
    MPI_Reduce(a, b, n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
    if (rank == root)
      for (int i = 0; i < n; ++i)
        CHECK(b[i] == rank_sum + size * i, "MPI_Reduce(%d): [%d] = %d", n, i, b[i]);
    MPI_Allreduce(a, b, n, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i)
      CHECK(b[i] == size - 1 + i, "MPI_Allreduce(MAX, %d): [%d] = %d", n, i, b[i]);
    MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i)
      CHECK(a[i] == rank_sum + size * i, "MPI_Allreduce(SUM, %d): [%d] = %d", n, i, a[i]);

    for (int i = 0; i < n; ++i) a[i] = rank * 7 + i;
    MPI_Allgather(a, n, MPI_INT, b, n, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; ++r)
      for (int i = 0; i < n; ++i)
        CHECK(b[(size_t)r * n + i] == r * 7 + i, "MPI_Allgather(%d): rank %d [%d]", n, r, i);

    /* Block r of a goes to rank r; block r of b came from rank r. */
    for (int r = 0; r < size; ++r)
      for (int i = 0; i < n; ++i) a[(size_t)r * n + i] = rank * 100000 + r * 1000 + (i & 511);
    MPI_Alltoall(a, n, MPI_INT, b, n, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; ++r)
      for (int i = 0; i < n; ++i)
        CHECK(b[(size_t)r * n + i] == r * 100000 + rank * 1000 + (i & 511),
              "MPI_Alltoall(%d): from rank %d [%d] = %d", n, r, i, b[(size_t)r * n + i]);

    if (rank == root)
      for (int r = 0; r < size; ++r)
        for (int i = 0; i < n; ++i) a[(size_t)r * n + i] = r * 11 + i;
    MPI_Scatter(a, n, MPI_INT, b, n, MPI_INT, root, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) CHECK(b[i] == rank * 11 + i, "MPI_Scatter(%d): [%d] = %d", n, i, b[i]);
    for (int i = 0; i < n; ++i) b[i] = rank * 13 - i;
    MPI_Gather(b, n, MPI_INT, a, n, MPI_INT, root, MPI_COMM_WORLD);
    if (rank == root)
      for (int r = 0; r < size; ++r)
        for (int i = 0; i < n; ++i)
          CHECK(a[(size_t)r * n + i] == r * 13 - i, "MPI_Gather(%d): rank %d [%d]", n, r, i);

    free(a);
    free(b);
  }
  /* No rank leaves a barrier before the last one entered it (ranks enter
   * at staggered times; CLOCK_MONOTONIC is one clock for the whole host,
   * and every configuration here runs on one host). */
  for (int round = 0; round < 3; ++round) {
    usleep((useconds_t)(((rank + round) % size) * 20000));
    const double enter = Now();
    MPI_Barrier(MPI_COMM_WORLD);
    const double leave = Now();
    double last = 0;
    MPI_Allreduce(&enter, &last, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(leave >= last, "MPI_Barrier: left at %.6f before the last rank entered at %.6f", leave,
          last);
  }
}

/* Every other rank sends kMessages messages with tags rank*100+i; rank 0
 * takes them all with MPI_ANY_SOURCE and MPI_ANY_TAG: the status names the
 * sender and tag the payload says, and each sender's messages come in the
 * order sent (MPI's non-overtaking rule). Then each sender sends tag
 * 5000+r and 6000+r, and a receive for 6000+r from any source passes the
 * earlier 5000+r. */
static void AnySourceAnyTag(void) {
  enum { kMessages = 50 };
  if (rank != 0) {
    for (int i = 0; i < kMessages; ++i) {
      int v[2] = {rank, i};
      MPI_Send(v, 2, MPI_INT, 0, rank * 100 + i, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int v[2] = {rank, -1};
    MPI_Send(v, 2, MPI_INT, 0, 5000 + rank, MPI_COMM_WORLD);
    MPI_Send(v, 2, MPI_INT, 0, 6000 + rank, MPI_COMM_WORLD);
    return;
  }
  int next[64] = {0};
  for (int k = 0; k < kMessages * (size - 1); ++k) {
    int v[2];
    MPI_Status st;
    MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    CHECK(v[0] == st.MPI_SOURCE && st.MPI_TAG == v[0] * 100 + v[1],
          "MPI_ANY_SOURCE/ANY_TAG: payload (%d, %d), status source %d tag %d", v[0], v[1],
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK(v[1] == next[v[0]], "rank %d's message %d came before its message %d", v[0], v[1],
          next[v[0]]);
    ++next[v[0]];
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int r = 1; r < size; ++r) {
    int v[2];
    MPI_Status st;
    MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, 6000 + r, MPI_COMM_WORLD, &st);
    CHECK(st.MPI_SOURCE == r && v[0] == r, "tag %d: from rank %d", 6000 + r, st.MPI_SOURCE);
    MPI_Recv(v, 2, MPI_INT, r, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    CHECK(st.MPI_TAG == 5000 + r, "rank %d's last message has tag %d", r, st.MPI_TAG);
  }
}

static void Probes(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  const int n = 1000 + rank;
  int* out = Alloc(n * sizeof(int));
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
  int* in = Alloc(count * sizeof(int));
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

static void OneSidedFence(void) {
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

/* Passive target: a window of N ints per rank plus a counter. Each rank,
 * under an exclusive lock on every target, writes its block; under a
 * shared lock it adds to the counters; then reads everything back. An
 * exclusive get-increment-put of rank 0's slot N+1 checks exclusion. */
static void OneSidedLock(size_t max_bytes) {
  const int n = (int)(max_bytes / sizeof(int) / 4 + 1);
  const int slots = n * size + 2;
  int* base;
  MPI_Win win;
  MPI_Win_allocate(sizeof(int) * (MPI_Aint)slots, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                   &base, &win);
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
  for (int i = 0; i < slots; ++i) base[i] = 0;
  MPI_Win_unlock(rank, win);
  MPI_Barrier(MPI_COMM_WORLD);

  int* mine = Alloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; ++i) mine[i] = rank * 1000003 + i;
  for (int t = 0; t < size; ++t) {
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
    MPI_Put(mine, n, MPI_INT, t, (MPI_Aint)rank * n, n, MPI_INT, win);
    MPI_Win_unlock(t, win);
    MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
    int add = rank + 1;
    MPI_Accumulate(&add, 1, MPI_INT, t, (MPI_Aint)n * size, 1, MPI_INT, MPI_SUM, win);
    MPI_Win_unlock(t, win);
  }
  for (int k = 0; k < 10; ++k) {
    int v = -1;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Get(&v, 1, MPI_INT, 0, (MPI_Aint)n * size + 1, 1, MPI_INT, win);
    MPI_Win_flush(0, win);
    ++v;
    MPI_Put(&v, 1, MPI_INT, 0, (MPI_Aint)n * size + 1, 1, MPI_INT, win);
    MPI_Win_unlock(0, win);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  int* back = Alloc(sizeof(int) * (size_t)slots);
  const int t = (rank + 1) % size;
  MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
  MPI_Get(back, slots, MPI_INT, t, 0, slots, MPI_INT, win);
  MPI_Win_unlock(t, win);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < n; ++i)
      CHECK(back[(size_t)r * n + i] == r * 1000003 + i,
            "lock/MPI_Put/MPI_Get: rank %d's slot %d of rank %d holds %d", r, i, t,
            back[(size_t)r * n + i]);
  CHECK(back[(size_t)n * size] == size * (size + 1) / 2,
        "lock/MPI_Accumulate: rank %d's counter is %d, want %d", t, back[(size_t)n * size],
        size * (size + 1) / 2);
  if (t == 0)
    CHECK(back[(size_t)n * size + 1] == 10 * size,
          "exclusive lock: %d increments of %d survived", back[(size_t)n * size + 1], 10 * size);
  MPI_Win_free(&win);
  free(mine);
  free(back);
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

static void Step(const char* name, double* t0) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const double t = MPI_Wtime();
    printf("  %-22s ok (%.2f s)\n", name, t - *t0);
    fflush(stdout);
    *t0 = t;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size <= 64, "at most 64 ranks");
  const int delay = argc > 1 ? atoi(argv[1]) : 0;
  const int messages = argc > 2 ? atoi(argv[2]) : 1000;
  const size_t max_bytes = argc > 3 ? (size_t)atol(argv[3]) : (size_t)1 << 20;
  double t0 = MPI_Wtime();
  PingPong(max_bytes);
  Step("ping-pong", &t0);
  Bandwidth(max_bytes);
  Step("bandwidth", &t0);
  Collectives(max_bytes);
  Step("collectives", &t0);
  AnySourceAnyTag();
  Step("any source, any tag", &t0);
  Probes();
  Step("probes", &t0);
  Cancel();
  Step("cancel", &t0);
  OneSidedFence();
  Step("one-sided, fence", &t0);
  OneSidedLock(max_bytes);
  Step("one-sided, lock", &t0);
  LateReceiver(delay, messages);
  Step("late receiver", &t0);
  if (rank == 0) printf("all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
