// Collective latency on one host, default domain: fi_allreduce (FI_SUM of
// uint64) of 8 B and 1 MiB among 2, 4 and 8 processes, against a baseline
// measured in the same run among the same processes: a point-to-point round
// trip (tagged send and receive) of the same size between members 0 and 1
// while the others wait. Prints the median of a few rounds of each and
// the ratio allreduce / round trip.
//
//   bazel run -c opt //fabric/fi:fi_coll_bench [-- --rounds=5]
#include <rdma/fi_collective.h>
#include <rdma/fi_tagged.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fabric/fi/fi_coll_util.h"

namespace {

using bypass::fi::coll_testing::Member;
using bypass::fi::coll_testing::RunMembers;
using bypass::fi::coll_testing::Wait;

struct Sizes {
  size_t bytes;
  int iters;
};
constexpr Sizes kSizes[] = {{8, 400}, {1 << 20, 10}};

// Results, written by member 0 (MAP_SHARED: it is a child process).
struct Results {
  double allreduce_us[2];
  double round_trip_us[2];
};

double Now() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Barrier(Member& m) {
  m.Run("fi_barrier", &m, [&] { return fi_barrier(m.ep, m.coll, &m); });
}

// The mean latency of iters allreduces of `bytes`.
double Allreduce(Member& m, size_t bytes, int iters) {
  const size_t count = bytes / sizeof(uint64_t);
  std::vector<uint64_t> in(count, m.rank + 1), out(count);
  Barrier(m);
  const double t0 = Now();
  for (int i = 0; i < iters; ++i) {
    m.Run("fi_allreduce", &out, [&] {
      return fi_allreduce(m.ep, in.data(), count, nullptr, out.data(), nullptr, m.coll, FI_UINT64,
                          FI_SUM, 0, &out);
    });
  }
  const double us = (Now() - t0) / iters;
  const uint64_t want = static_cast<uint64_t>(m.n) * (m.n + 1) / 2;
  if (out[0] != want || out[count - 1] != want) {
    std::fprintf(stderr, "member %d: allreduce gave %llu, want %llu\n", m.rank,
                 static_cast<unsigned long long>(out[0]), static_cast<unsigned long long>(want));
    std::_Exit(4);
  }
  return us;
}

// The mean round trip of `bytes` between members 0 and 1 (others wait).
double RoundTrip(Member& m, size_t bytes, int iters) {
  std::vector<uint8_t> buf(bytes, static_cast<uint8_t>(m.rank));
  Barrier(m);
  const double t0 = Now();
  if (m.rank <= 1) {
    const fi_addr_t other = m.addrs[1 - m.rank];
    for (int i = 0; i < iters; ++i) {
      for (int leg = 0; leg < 2; ++leg) {
        if ((leg == 0) == (m.rank == 0)) {
          m.Run("fi_tsend", &buf, [&] {
            return fi_tsend(m.ep, buf.data(), bytes, nullptr, other, 1, &buf);
          });
        } else {
          m.Run("fi_trecv", &buf, [&] {
            return fi_trecv(m.ep, buf.data(), bytes, nullptr, other, 1, 0, &buf);
          });
        }
      }
    }
  }
  const double us = (Now() - t0) / iters;
  Barrier(m);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--rounds=%d", &rounds) == 1 && rounds > 0) continue;
    std::fprintf(stderr, "usage: %s [--rounds=N]\n", argv[0]);
    return 2;
  }
  void* mem = mmap(nullptr, sizeof(Results), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* res = static_cast<Results*>(mem);
  std::printf("%-8s %-8s %14s %16s %8s\n", "members", "size", "allreduce_us", "round_trip_us",
              "ratio");
  std::fflush(stdout);  // before fork: the members would print it again
  for (int n : {2, 4, 8}) {
    const int failed = RunMembers(n, Wait::kPoll, [&](Member& m) {
      for (int s = 0; s < 2; ++s) {
        std::vector<double> ar, rt;
        (void)Allreduce(m, kSizes[s].bytes, 2);  // warm up: peers met, buffers touched
        for (int r = 0; r < rounds; ++r) {
          ar.push_back(Allreduce(m, kSizes[s].bytes, kSizes[s].iters));
          rt.push_back(RoundTrip(m, kSizes[s].bytes, kSizes[s].iters));
        }
        if (m.rank == 0) {
          res->allreduce_us[s] = Median(ar);
          res->round_trip_us[s] = Median(rt);
        }
      }
      return 0;
    });
    if (failed != 0) return 1;
    for (int s = 0; s < 2; ++s) {
      std::printf("%-8d %-8s %14.1f %16.1f %8.2f\n", n, s == 0 ? "8B" : "1MiB", res->allreduce_us[s],
                  res->round_trip_us[s], res->allreduce_us[s] / res->round_trip_us[s]);
    }
    std::fflush(stdout);
  }
  return 0;
}
