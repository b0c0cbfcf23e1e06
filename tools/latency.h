// Round-trip samples and their percentiles, printed for people or as JSON.
#ifndef BYPASS_TOOLS_LATENCY_H_
#define BYPASS_TOOLS_LATENCY_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace bypass::tools {

// Percentiles of a set of nanosecond samples.
struct Percentiles {
  uint64_t p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;

  // Sorts `samples` in place. Nearest-rank percentiles.
  static Percentiles Of(std::vector<uint64_t>& samples) {
    Percentiles p;
    if (samples.empty()) return p;
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) {
      size_t i = static_cast<size_t>(q * static_cast<double>(samples.size()));
      return samples[std::min(i, samples.size() - 1)];
    };
    p.p50 = at(0.50);
    p.p90 = at(0.90);
    p.p99 = at(0.99);
    p.p999 = at(0.999);
    p.max = samples.back();
    return p;
  }
};

// The result of one ping-pong or rate run, in the shape every tool prints.
struct RunResult {
  std::string layer;
  std::string device;
  std::string mode = "latency";  // or "rate"
  uint64_t size = 0;
  uint64_t iters = 0;
  Percentiles rtt_ns;
  double msgs_per_sec = 0;
  uint64_t resent = 0;    // pings sent again after no reply in time
  std::string extra_json;  // ,"key":value pairs a layer adds (counters)
  std::string extra_text;  // lines a layer adds for people
};

inline std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

inline void PrintJson(const RunResult& r, std::FILE* f = stdout) {
  std::fprintf(f, "{\"layer\":\"%s\",\"device\":\"%s\",\"mode\":\"%s\",\"size\":%llu,\"iters\":%llu,",
               JsonEscape(r.layer).c_str(), JsonEscape(r.device).c_str(), r.mode.c_str(),
               static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iters));
  if (r.mode == "latency") {  // rate mode measures no round trips
    std::fprintf(f, "\"rtt_ns\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p999\":%llu,\"max\":%llu},",
                 static_cast<unsigned long long>(r.rtt_ns.p50),
                 static_cast<unsigned long long>(r.rtt_ns.p90),
                 static_cast<unsigned long long>(r.rtt_ns.p99),
                 static_cast<unsigned long long>(r.rtt_ns.p999),
                 static_cast<unsigned long long>(r.rtt_ns.max));
  }
  std::fprintf(f, "\"msgs_per_sec\":%.0f,\"resent\":%llu%s}\n", r.msgs_per_sec,
               static_cast<unsigned long long>(r.resent), r.extra_json.c_str());
}

inline void PrintText(const RunResult& r, std::FILE* f = stdout) {
  std::fprintf(f, "layer %s, device %s, %llu B messages, %llu iterations\n", r.layer.c_str(),
               r.device.c_str(), static_cast<unsigned long long>(r.size),
               static_cast<unsigned long long>(r.iters));
  if (r.mode == "latency") {
    auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
    std::fprintf(f, "round trip  p50 %.3f us  p90 %.3f us  p99 %.3f us  p99.9 %.3f us  max %.3f us\n",
                 us(r.rtt_ns.p50), us(r.rtt_ns.p90), us(r.rtt_ns.p99), us(r.rtt_ns.p999),
                 us(r.rtt_ns.max));
    std::fprintf(f, "rate        %.3f M round trips/s\n", r.msgs_per_sec / 1e6);
  } else {
    std::fprintf(f, "rate        %.3f M messages/s one way\n", r.msgs_per_sec / 1e6);
  }
  if (r.resent != 0) {
    std::fprintf(f, "resent      %llu pings got no reply within 200 ms and were sent again\n",
                 static_cast<unsigned long long>(r.resent));
  }
  std::fputs(r.extra_text.c_str(), f);
}

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_LATENCY_H_
