#include "driver/testing/conformance_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace bypass::driver::testing {
namespace {

void Put64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}
uint8_t PatternByte(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i); }

}  // namespace

UdpFlow FlowBetween(const Device& from, const Device& to, uint16_t dst_port) {
  UdpFlow flow;
  flow.src_mac = from.info().mac;
  flow.dst_mac = to.info().mac;
  flow.src_ip = from.info().ipv4;
  flow.dst_ip = to.info().ipv4;
  flow.src_port = static_cast<uint16_t>(dst_port + 1);
  flow.dst_port = dst_port;
  return flow;
}

bool WriteTestFrame(Packet* p, const UdpFlow& flow, uint64_t seq, size_t payload_len) {
  if (payload_len < kMinPayload || kUdpFrameHeaderBytes + payload_len > p->capacity) return false;
  uint8_t* payload = p->data + kUdpFrameHeaderBytes;
  payload[0] = kTestMagic >> 24;
  payload[1] = (kTestMagic >> 16) & 0xff;
  payload[2] = (kTestMagic >> 8) & 0xff;
  payload[3] = kTestMagic & 0xff;
  Put64(payload + 4, seq);
  for (size_t i = 12; i < payload_len; ++i) payload[i] = PatternByte(seq, i);
  p->len = static_cast<uint32_t>(
      WriteUdpHeaders(flow, payload_len, {p->data, p->capacity}, UdpChecksumFill::kCompute));
  return p->len != 0;
}

std::optional<uint64_t> TestFrameSeq(const Packet* p) {
  std::optional<ParsedUdpFrame> parsed = ParseUdpFrame({p->data, p->len});
  if (!parsed || parsed->payload.size() < kMinPayload) return std::nullopt;
  const uint8_t* payload = parsed->payload.data();
  const uint32_t magic = uint32_t{payload[0]} << 24 | uint32_t{payload[1]} << 16 |
                         uint32_t{payload[2]} << 8 | payload[3];
  if (magic != kTestMagic) return std::nullopt;
  const uint64_t seq = Get64(payload + 4);
  for (size_t i = 12; i < parsed->payload.size(); ++i) {
    if (payload[i] != PatternByte(seq, i)) return std::nullopt;
  }
  return seq;
}

bool Pump::SendAll(QueuePair& q, absl::Span<Packet* const> pkts) {
  size_t sent = 0;
  for (uint64_t i = 0; i < budget_ && sent < pkts.size(); ++i) {
    sent += q.TxBurst(pkts.subspan(sent));
  }
  if (sent < pkts.size()) {
    q.FreeBulk(pkts.subspan(sent));
    return false;
  }
  return true;
}

size_t Pump::KeepOurs(QueuePair& q, Packet** pkts, size_t n) {
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (TestFrameSeq(pkts[i]).has_value()) {
      pkts[kept++] = pkts[i];
    } else {
      ++foreign_;
      q.FreeBulk({&pkts[i], 1});
    }
  }
  return kept;
}

std::vector<Packet*> Pump::Receive(QueuePair& q, size_t n) {
  std::vector<Packet*> out;
  Packet* burst[32];
  for (uint64_t i = 0; i < budget_ && out.size() < n; ++i) {
    const size_t want = std::min<size_t>(32, n - out.size());
    const size_t got = KeepOurs(q, burst, q.RxBurst({burst, want}));
    out.insert(out.end(), burst, burst + got);
  }
  return out;
}

size_t Pump::Consume(QueuePair& q, size_t n, absl::FunctionRef<void(const Packet&)> fn) {
  size_t done = 0;
  Packet* burst[32];
  for (uint64_t i = 0; i < budget_ && done < n; ++i) {
    const size_t want = std::min<size_t>(32, n - done);
    const size_t got = KeepOurs(q, burst, q.RxBurst({burst, want}));
    for (size_t k = 0; k < got; ++k) fn(*burst[k]);
    q.FreeBulk({burst, got});
    done += got;
  }
  return done;
}

size_t Pump::PollOnce(QueuePair& q, absl::Span<Packet*> scratch) {
  const size_t got = KeepOurs(q, scratch.data(), q.RxBurst(scratch));
  q.FreeBulk(scratch.first(got));
  return got;
}

size_t Pump::PollOurs(QueuePair& q, absl::Span<Packet*> scratch) {
  size_t ours = 0;
  const uint64_t polls = std::min<uint64_t>(budget_, 10'000);
  for (uint64_t i = 0; i < polls; ++i) ours += PollOnce(q, scratch);
  return ours;
}

std::string LocalIp(int host) {
  const unsigned pid = static_cast<unsigned>(getpid());
  return absl::StrCat("127.", (pid >> 8) & 0xff, ".", pid & 0xff, ".", host);
}

}  // namespace bypass::driver::testing
