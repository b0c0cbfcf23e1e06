// Round-trip samples and their percentiles, and the results every tool
// prints, for people or as JSON (the schemas are in tools/README.md).
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
  double mean = 0;

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
    long double sum = 0;
    for (uint64_t s : samples) sum += static_cast<long double>(s);
    p.mean = static_cast<double>(sum / static_cast<long double>(samples.size()));
    return p;
  }
};

// One size of a one-way rate run (pingpong --mode=rate, bw).
struct RateResult {
  uint64_t size = 0;       // payload bytes asked for
  uint64_t wire_bytes = 0;  // bytes each message carried: max(size, 16), the ping header
  uint32_t window = 0;     // messages outstanding (raw: frames per burst)
  uint64_t sent = 0;       // measured messages sent
  uint64_t msgs = 0;       // of those, received (counted by the server)
  double seconds = 0;      // the server's first to last arrival
  double msg_rate = 0;     // msgs / seconds
  double mbytes_per_s = 0;  // msgs * wire_bytes / seconds / 1e6
  std::string skipped;     // non-empty: why this size was not run
};

// One size of a latency run: round trips with one message in flight.
struct LatencyResult {
  uint64_t size = 0;              // payload bytes asked for
  uint64_t iters = 0;             // measured round trips
  Percentiles rtt_ns;
  std::vector<uint64_t> samples;  // every measured round trip, sorted
  double msgs_per_sec = 0;        // round trips per second
  std::string skipped;            // non-empty: why this size was not run
};

// What one pingpong run measured, in the shape every tool prints: a
// latency result per size, then a rate result per size (either may be
// empty).
struct RunResult {
  std::string layer;
  std::string provider;  // fi: the libfabric provider; empty otherwise
  std::string device;
  std::vector<LatencyResult> latencies;
  std::vector<RateResult> rates;
  uint64_t resent = 0;      // pings sent again after no reply in time
  std::string extra_json;   // ,"key":value pairs a layer adds (counters of the whole run)
  std::string extra_text;   // lines a layer adds for people
};

inline std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// "null" for an empty string, else the quoted string.
inline std::string JsonStringOrNull(const std::string& s) {
  if (s.empty()) return "null";
  std::string out(1, '"');  // not "\"" + ...: GCC 12 -O3 warns falsely (-Wrestrict) on that
  out.append(JsonEscape(s)).push_back('"');
  return out;
}

// pingpong's JSON: one line, one object, per size and mode (latencies
// first). Schema: tools/README.md.
inline void PrintJson(const RunResult& r, std::FILE* f = stdout) {
  using ull = unsigned long long;
  auto head = [&](const char* mode, uint64_t size, uint64_t iters) {
    std::fprintf(f,
                 "{\"tool\":\"pingpong\",\"layer\":\"%s\",\"provider\":%s,\"device\":\"%s\","
                 "\"mode\":\"%s\",\"size\":%llu,\"iters\":%llu,",
                 JsonEscape(r.layer).c_str(), JsonStringOrNull(r.provider).c_str(),
                 JsonEscape(r.device).c_str(), mode, static_cast<ull>(size), static_cast<ull>(iters));
  };
  auto tail = [&](double rate, const std::string& skipped) {
    std::fprintf(f, "\"msg_rate\":%.0f,\"msgs_per_sec\":%.0f,\"resent\":%llu", rate, rate,
                 static_cast<ull>(r.resent));
    if (!skipped.empty()) std::fprintf(f, ",\"skipped\":\"%s\"", JsonEscape(skipped).c_str());
    std::fprintf(f, "%s}\n", r.extra_json.c_str());
  };
  for (const LatencyResult& l : r.latencies) {
    head("latency", l.size, l.iters);
    if (l.skipped.empty()) {
      const Percentiles& p = l.rtt_ns;
      std::fprintf(f, "\"rtt_ns\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p999\":%llu,\"max\":%llu},",
                   static_cast<ull>(p.p50), static_cast<ull>(p.p90), static_cast<ull>(p.p99),
                   static_cast<ull>(p.p999), static_cast<ull>(p.max));
      std::fprintf(f,
                   "\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu,\"p999_ns\":%llu,\"max_ns\":%llu,"
                   "\"mean_ns\":%.1f,",
                   static_cast<ull>(p.p50), static_cast<ull>(p.p90), static_cast<ull>(p.p99),
                   static_cast<ull>(p.p999), static_cast<ull>(p.max), p.mean);
    } else {
      std::fprintf(f,
                   "\"p50_ns\":null,\"p90_ns\":null,\"p99_ns\":null,\"p999_ns\":null,\"max_ns\":null,"
                   "\"mean_ns\":null,");
    }
    tail(l.msgs_per_sec, l.skipped);
  }
  for (const RateResult& x : r.rates) {  // rate mode measures no round trips
    head("rate", x.size, x.sent);
    std::fprintf(f,
                 "\"p50_ns\":null,\"p90_ns\":null,\"p99_ns\":null,\"p999_ns\":null,\"max_ns\":null,"
                 "\"mean_ns\":null,\"window\":%u,\"seconds\":%.6f,\"mbytes_per_s\":%.3f,"
                 "\"received\":%llu,\"sent\":%llu,",
                 x.window, x.seconds, x.mbytes_per_s, static_cast<ull>(x.msgs), static_cast<ull>(x.sent));
    tail(x.msg_rate, x.skipped);
  }
}

inline void PrintText(const RunResult& r, std::FILE* f = stdout) {
  using ull = unsigned long long;
  std::fprintf(f, "layer %s%s%s, device %s\n", r.layer.c_str(), r.provider.empty() ? "" : ", provider ",
               r.provider.c_str(), r.device.c_str());
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  for (const LatencyResult& l : r.latencies) {
    if (!l.skipped.empty()) {
      std::fprintf(f, "%llu B: skipped: %s\n", static_cast<ull>(l.size), l.skipped.c_str());
      continue;
    }
    std::fprintf(f, "%llu B, %llu round trips\n", static_cast<ull>(l.size), static_cast<ull>(l.iters));
    std::fprintf(f, "  round trip  p50 %.3f us  p90 %.3f us  p99 %.3f us  p99.9 %.3f us  max %.3f us  mean %.3f us\n",
                 us(l.rtt_ns.p50), us(l.rtt_ns.p90), us(l.rtt_ns.p99), us(l.rtt_ns.p999),
                 us(l.rtt_ns.max), l.rtt_ns.mean / 1000.0);
    std::fprintf(f, "  rate        %.3f M round trips/s\n", l.msgs_per_sec / 1e6);
  }
  for (const RateResult& x : r.rates) {
    if (!x.skipped.empty()) {
      std::fprintf(f, "%llu B one way: skipped: %s\n", static_cast<ull>(x.size), x.skipped.c_str());
      continue;
    }
    std::fprintf(f, "%llu B one way, window %u: %.3f M messages/s, %.1f MB/s; received %llu of %llu\n",
                 static_cast<ull>(x.size), x.window, x.msg_rate / 1e6, x.mbytes_per_s,
                 static_cast<ull>(x.msgs), static_cast<ull>(x.sent));
  }
  if (r.resent != 0) {
    std::fprintf(f, "resent      %llu pings got no reply within 200 ms and were sent again\n",
                 static_cast<ull>(r.resent));
  }
  std::fputs(r.extra_text.c_str(), f);
}

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_LATENCY_H_
