#include "driver/fault/fault_device.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bypass::driver::fault {
namespace {

constexpr uint32_t kEthHeader = 14;

}  // namespace

// ready_ is filled only when empty, and then by one step of RxBurst: at most
// every held packet (reorder and delay areas) plus an inner burst of kChunk
// and a duplicate of each.
FaultQueue::FaultQueue(QueuePair& inner, const FaultOptions& opts, uint64_t seed,
                       const Clock& clock)
    : inner_(inner),
      opts_(opts),
      clock_(clock),
      rng_(seed),
      ready_(opts.reorder_depth + opts.delay_slots + 2 * kChunk),
      delayed_(opts.delay_slots),
      link_(opts.rate_pps > 0 ? opts.queue : 1),
      reorder_(new Held[opts.reorder_depth]),
      to_free_(new Packet*[kChunk]) {}

FaultQueue::~FaultQueue() {
  while (!ready_.empty()) {
    Packet* p = ready_.Pop();
    inner_.FreeBulk({&p, 1});
  }
  while (!delayed_.empty()) {
    Packet* p = delayed_.Pop().pkt;
    inner_.FreeBulk({&p, 1});
  }
  while (!link_.empty()) {
    Packet* p = link_.Pop();
    inner_.FreeBulk({&p, 1});
  }
  for (size_t i = 0; i < reorder_count_; ++i) inner_.FreeBulk({&reorder_[i].pkt, 1});
}

QueueStats FaultQueue::stats() const {
  QueueStats s = inner_.stats();
  s.rx_packets = rx_packets_;
  s.rx_bytes = rx_bytes_;
  return s;
}

uint16_t FaultQueue::RxBurst(absl::Span<Packet*> out) {
  out = out.first(std::min<size_t>(out.size(), UINT16_MAX));  // the count is 16 bits
  size_t n = 0;
  const auto drain = [&] {
    while (n < out.size() && !ready_.empty()) {
      Packet* p = ready_.Pop();
      ++rx_packets_;
      rx_bytes_ += p->len;
      out[n++] = p;
    }
  };
  drain();  // what a full `out` left last time
  if (!ready_.empty()) return static_cast<uint16_t>(n);

  // The clock is read at most once per call.
  const bool timed = opts_.delay > 0 || !delayed_.empty() || opts_.rate_pps > 0;
  const uint64_t now = timed ? clock_.NowNs() : 0;
  while (!delayed_.empty() && delayed_.front().due_ns <= now) ready_.Push(delayed_.Pop().pkt);
  for (;;) {
    drain();
    // ready_ is empty here unless out is full: room for what one pull makes.
    if (n == out.size()) break;
    Packet* in[kChunk];
    const size_t want = std::min(kChunk, out.size() - n);
    const uint16_t got =
        opts_.rate_pps > 0 ? PullThroughLink(in, want, now) : inner_.RxBurst({in, want});
    if (got == 0) break;
    for (uint16_t i = 0; i < got; ++i) Process(in[i], now);
    if (to_free_count_ > 0) {
      inner_.FreeBulk({to_free_.get(), to_free_count_});
      to_free_count_ = 0;
    }
  }
  return static_cast<uint16_t>(n);
}

uint64_t FaultQueue::LinkDepartures(uint64_t now) const {
  // Packet k leaves at busy_since + k / rate: by `now`, floor(elapsed *
  // rate / 1e9) + 1 of them, computed per whole second and the rest so that
  // nothing overflows (rate_pps <= 1e9).
  constexpr uint64_t kSecond = 1'000'000'000;
  const uint64_t elapsed = now - link_busy_since_ns_;
  return elapsed / kSecond * opts_.rate_pps + elapsed % kSecond * opts_.rate_pps / kSecond + 1;
}

uint16_t FaultQueue::PullThroughLink(Packet** in, size_t max, uint64_t now) {
  // Everything waiting below arrives now; a few inner bursts at most per
  // call, so that a sender refilling the inner ring cannot keep us here.
  constexpr int kMaxPulls = 16;
  for (int pulls = 0; pulls < kMaxPulls; ++pulls) {
    Packet* arrived[kChunk];
    Packet* dropped[kChunk];
    size_t n_dropped = 0;
    const uint16_t got = inner_.RxBurst({arrived, kChunk});
    for (uint16_t i = 0; i < got; ++i) {
      if (link_.empty() && link_sent_ < LinkDepartures(now)) {
        // The link was idle: it starts sending now and saved no credit.
        link_busy_since_ns_ = now;
        link_sent_ = 0;
      }
      if (link_.full()) {
        ++counters_.queue_dropped;
        dropped[n_dropped++] = arrived[i];
        continue;
      }
      link_.Push(arrived[i]);
      counters_.queue_max = std::max<uint64_t>(counters_.queue_max, link_.size());
    }
    if (n_dropped > 0) inner_.FreeBulk({dropped, n_dropped});
    if (got < kChunk) break;
  }
  size_t n = 0;
  const uint64_t departures = link_.empty() ? 0 : LinkDepartures(now);
  while (n < max && !link_.empty() && link_sent_ < departures) {
    in[n++] = link_.Pop();
    ++link_sent_;
  }
  return static_cast<uint16_t>(n);
}

void FaultQueue::Process(Packet* p, uint64_t now) {
  ++counters_.seen;
  if (rng_.Chance(opts_.drop)) {
    ++counters_.dropped;
    to_free_[to_free_count_++] = p;
    return;
  }
  Packet* copy = rng_.Chance(opts_.dup) ? Duplicate(*p) : nullptr;
  if (rng_.Chance(opts_.corrupt) && Corrupt(p)) ++counters_.corrupted;
  if (rng_.Chance(opts_.delay)) {
    if (delayed_.full()) {
      ++counters_.evicted;
      ready_.Push(delayed_.Pop().pkt);
    }
    delayed_.Push({p, now + opts_.delay_ns});
    ++counters_.delayed;
  } else if (rng_.Chance(opts_.reorder)) {
    if (reorder_count_ == opts_.reorder_depth) {
      ++counters_.evicted;
      ReleaseOldestReordered();
    }
    reorder_[reorder_count_++] = {p, 1 + rng_.Below(opts_.reorder_depth)};
    ++counters_.reordered;
  } else {
    Emit(p);
  }
  if (copy != nullptr) Emit(copy);
}

Packet* FaultQueue::Duplicate(const Packet& p) {
  Packet* c = nullptr;
  if (inner_.PoolAvailable() == 0 || !inner_.AllocBulk({&c, 1})) {
    ++counters_.dup_no_buffer;
    return nullptr;
  }
  std::memcpy(c->data, p.data, p.len);
  c->len = p.len;
  c->rx_queue = p.rx_queue;
  c->ol_flags = p.ol_flags;
  ++counters_.duplicated;
  return c;
}

bool FaultQueue::Corrupt(Packet* p) {
  if (p->len <= kEthHeader) return false;
  const uint32_t span = p->len - kEthHeader;
  const uint32_t count = 1 + rng_.Below(std::min(opts_.corrupt_bytes, span));
  uint32_t picked[64];  // corrupt_bytes <= 64 (ValidateFaultOptions)
  for (uint32_t i = 0; i < count; ++i) {
    // Distinct offsets, so no flip undoes another: count <= span, so this ends.
    uint32_t off;
    do {
      off = rng_.Below(span);
    } while (std::find(picked, picked + i, off) != picked + i);
    picked[i] = off;
    p->data[kEthHeader + off] ^= static_cast<uint8_t>(1 + rng_.Below(255));
  }
  // A NIC that verified the checksums would not have passed these.
  p->ol_flags &= static_cast<uint16_t>(~(kRxIpChecksumGood | kRxL4ChecksumGood | kRxIntact));
  return true;
}

void FaultQueue::Emit(Packet* p) {
  ready_.Push(p);
  // Each emitted packet is one "later packet" for every held one; those
  // whose wait ends follow it, oldest first.
  size_t kept = 0;
  for (size_t i = 0; i < reorder_count_; ++i) {
    if (--reorder_[i].left == 0) {
      ready_.Push(reorder_[i].pkt);
    } else {
      reorder_[kept++] = reorder_[i];
    }
  }
  reorder_count_ = kept;
}

void FaultQueue::ReleaseOldestReordered() {
  ready_.Push(reorder_[0].pkt);
  std::move(&reorder_[1], &reorder_[reorder_count_], &reorder_[0]);
  --reorder_count_;
}

absl::StatusOr<std::unique_ptr<FaultDevice>> FaultDevice::Create(std::unique_ptr<Device> inner,
                                                                 const FaultOptions& opts,
                                                                 const Clock& clock) {
  if (inner == nullptr) return absl::InvalidArgumentError("FaultDevice: no inner device");
  if (absl::Status s = ValidateFaultOptions(opts); !s.ok()) return s;
  return std::unique_ptr<FaultDevice>(new FaultDevice(std::move(inner), opts, clock));
}

FaultDevice::FaultDevice(std::unique_ptr<Device> inner, const FaultOptions& opts,
                         const Clock& clock)
    : inner_(std::move(inner)), opts_(opts), info_(inner_->info()) {
  info_.lossless = false;
  // Corrupted frames lose kRxIntact (Corrupt), so peers are told to send
  // us checksums whenever we may corrupt.
  info_.integrity = info_.integrity && opts.corrupt == 0;
  // Each queue gets its own stream: the seed mixed with the queue number.
  uint64_t state = opts.seed;
  for (uint16_t q = 0; q < inner_->info().num_queues; ++q) {
    queues_.push_back(
        std::make_unique<FaultQueue>(inner_->queue(q), opts, SplitMix64(&state), clock));
  }
}

FaultDevice::~FaultDevice() {
  queues_.clear();  // free held packets while the inner device still exists
}

FaultCounters FaultDevice::counters() const {
  FaultCounters sum;
  for (const auto& q : queues_) sum += q->counters();
  return sum;
}

absl::StatusOr<std::unique_ptr<Device>> WrapWithFaults(std::unique_ptr<Device> inner,
                                                       std::string_view spec,
                                                       const Clock& clock) {
  absl::StatusOr<FaultOptions> opts = ParseFaultSpec(spec);
  if (!opts.ok()) return opts.status();
  absl::StatusOr<std::unique_ptr<FaultDevice>> dev =
      FaultDevice::Create(std::move(inner), *opts, clock);
  if (!dev.ok()) return dev.status();
  return std::unique_ptr<Device>(*std::move(dev));
}

void FaultQueue::AppendCounters(NamedCounters* out) const {
  const FaultCounters& c = counters_;
  AppendNamed(out, "fault_", {{"seen", c.seen},
                              {"dropped", c.dropped},
                              {"duplicated", c.duplicated},
                              {"reordered", c.reordered},
                              {"delayed", c.delayed},
                              {"corrupted", c.corrupted},
                              {"evicted", c.evicted},
                              {"dup_no_buffer", c.dup_no_buffer},
                              {"queue_dropped", c.queue_dropped},
                              {"queue_max", c.queue_max}});
  inner_.AppendCounters(out);
}

}  // namespace bypass::driver::fault
