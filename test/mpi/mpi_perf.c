/* Latency and bandwidth between ranks 0 and 1 (test/mpi/mpi_bench.sh), as
 * Open MPI's own OSU-style tests measure them:
 *   mpi_perf [LAT_BYTES [LAT_ITERS [BW_BYTES [BW_WINDOWS]]]]
 * latency: LAT_ITERS ping-pongs of LAT_BYTES after 10% warm-up; one-way
 * time = round trip / 2, the median of 5 rounds;
 * bandwidth: BW_WINDOWS windows of 16 nonblocking sends of BW_BYTES, each
 * window answered by a 4-byte message, after one window of warm-up.
 * Rank 0 prints one line: "latency_us=X bandwidth_mbs=Y p50_latency_us=Z
 * p50_bandwidth_mbs=W" (MB = 10^6 B): X and Y as above (the mean over a
 * round, as OSU's tests report), Z half the median of every timed round
 * trip of all rounds, W the median of the windows' rates. On a machine
 * shared with other work a round's mean is decided by how often the two
 * ranks were descheduled (one stall of a few milliseconds outweighs
 * thousands of sub-microsecond round trips), while the medians still tell
 * what one message costs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRounds = 5, kWindow = 16 };

static int rank;

static int Ascending(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The median of n values (sorted in place). */
static double Median(double* v, int n) {
  qsort(v, n, sizeof(double), Ascending);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Returns the median of kRounds round means; *p50 half the median of
 * every timed round trip. */
static double Latency(char* buf, int bytes, int iters, double* p50) {
  double rounds[kRounds];
  double* trips = malloc(sizeof(double) * kRounds * iters);
  if (trips == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int r = 0; r < kRounds; ++r) {
    const int warm = iters / 10;
    double t0 = 0, last = 0;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) t0 = last = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
      }
      if (i >= warm) {
        const double now = MPI_Wtime();
        trips[r * iters + i - warm] = now - last;
        last = now;
      }
    }
    rounds[r] = (last - t0) / iters / 2 * 1e6;
  }
  *p50 = Median(trips, kRounds * iters) / 2 * 1e6;
  free(trips);
  return Median(rounds, kRounds);
}

static void Window(char* buf, int bytes) {
  MPI_Request req[kWindow];
  int ack = 0;
  for (int w = 0; w < kWindow; ++w) {
    if (rank == 0) {
      MPI_Isend(buf + (size_t)w * bytes, bytes, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
    } else {
      MPI_Irecv(buf + (size_t)w * bytes, bytes, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
    }
  }
  MPI_Waitall(kWindow, req, MPI_STATUSES_IGNORE);
  if (rank == 0) {
    MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
  }
}

/* Returns the mean rate over all windows; *p50 the median window's. */
static double Bandwidth(char* buf, int bytes, int windows, double* p50) {
  double* rates = malloc(sizeof(double) * windows);
  if (rates == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  Window(buf, bytes);
  const double t0 = MPI_Wtime();
  double last = t0;
  for (int i = 0; i < windows; ++i) {
    Window(buf, bytes);
    const double now = MPI_Wtime();
    rates[i] = (double)bytes * kWindow / (now - last) / 1e6;
    last = now;
  }
  *p50 = Median(rates, windows);
  free(rates);
  return (double)bytes * kWindow * windows / (last - t0) / 1e6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_perf runs on 2 ranks, not %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int lat_bytes = argc > 1 ? atoi(argv[1]) : 8;
  const int lat_iters = argc > 2 ? atoi(argv[2]) : 10000;
  const int bw_bytes = argc > 3 ? atoi(argv[3]) : 1 << 20;
  const int bw_windows = argc > 4 ? atoi(argv[4]) : 20;
  const size_t room = (size_t)bw_bytes * kWindow > (size_t)lat_bytes ? (size_t)bw_bytes * kWindow
                                                                      : (size_t)lat_bytes;
  char* buf = malloc(room);
  if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  memset(buf, 1, room);
  double lat_p50, bw_p50;
  const double lat = Latency(buf, lat_bytes, lat_iters, &lat_p50);
  MPI_Barrier(MPI_COMM_WORLD);
  const double bw = Bandwidth(buf, bw_bytes, bw_windows, &bw_p50);
  if (rank == 0) {
    printf("latency_us=%.3f bandwidth_mbs=%.1f p50_latency_us=%.3f p50_bandwidth_mbs=%.1f\n", lat,
           bw, lat_p50, bw_p50);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
