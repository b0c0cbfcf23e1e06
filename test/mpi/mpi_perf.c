/* Latency and bandwidth between ranks 0 and 1 (test/mpi/mpi_bench.sh), as
 * Open MPI's own OSU-style tests measure them:
 *   mpi_perf [LAT_BYTES [LAT_ITERS [BW_BYTES [BW_WINDOWS]]]]
 * latency: LAT_ITERS ping-pongs of LAT_BYTES after 10% warm-up; one-way
 * time = round trip / 2, the median of 5 rounds;
 * bandwidth: BW_WINDOWS windows of 16 nonblocking sends of BW_BYTES, each
 * window answered by a 4-byte message, after one window of warm-up.
 * Rank 0 prints one line: "latency_us=X bandwidth_mbs=Y" (MB = 10^6 B). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRounds = 5, kWindow = 16 };

static int rank;

static double Latency(char* buf, int bytes, int iters) {
  double rounds[kRounds];
  for (int r = 0; r < kRounds; ++r) {
    const int warm = iters / 10;
    double t0 = 0;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
      }
    }
    rounds[r] = (MPI_Wtime() - t0) / iters / 2 * 1e6;
  }
  /* The median of kRounds. */
  for (int i = 0; i < kRounds; ++i)
    for (int j = i + 1; j < kRounds; ++j)
      if (rounds[j] < rounds[i]) {
        const double t = rounds[i];
        rounds[i] = rounds[j];
        rounds[j] = t;
      }
  return rounds[kRounds / 2];
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

static double Bandwidth(char* buf, int bytes, int windows) {
  Window(buf, bytes);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < windows; ++i) Window(buf, bytes);
  return (double)bytes * kWindow * windows / (MPI_Wtime() - t0) / 1e6;
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
  const double lat = Latency(buf, lat_bytes, lat_iters);
  MPI_Barrier(MPI_COMM_WORLD);
  const double bw = Bandwidth(buf, bw_bytes, bw_windows);
  if (rank == 0) printf("latency_us=%.3f bandwidth_mbs=%.1f\n", lat, bw);
  free(buf);
  MPI_Finalize();
  return 0;
}
