// The ping machine's transports (machine.h) for the layers whose receives
// are posted buffers and whose sends complete: rdm and fi. Their buffers
// are slots of one region; a layer supplies only a link E over its endpoint:
//   using Peer                             the layer's address of a peer
//   static constexpr bool kHello           the server learns its client from a kHello
//   absl::StatusOr<bool> PostRecv(uint8_t* buf, size_t len, uint32_t slot)
//   absl::StatusOr<bool> Send(const uint8_t* buf, size_t len, Peer to, uint32_t slot,
//                             bool more = false)   (more: kSendMore / FI_MORE)
//                                          false: refused for now (progress, then again)
//   absl::StatusOr<size_t> Poll(SlotCompletion<Peer>* out, size_t max)
//                                          a progress pass, then completions
// and for a client std::string Cannot(uint64_t size) const, std::string
// Hint() const and, with kHello, std::span<const uint8_t> address() const;
// for a kHello server absl::StatusOr<Peer> Hello(const uint8_t* addr,
// uint32_t len), the peer a hello names (inserted the first time).
#ifndef BYPASS_TOOLS_PINGPONG_SLOTS_H_
#define BYPASS_TOOLS_PINGPONG_SLOTS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/ping_wire.h"
#include "tools/pingpong/machine.h"
#include "tools/pingpong/raw.h"

namespace bypass::tools {

// A completed operation of a link: a send left, or a message arrived.
template <class Peer>
struct SlotCompletion {
  uint32_t slot = 0;
  size_t len = 0;  // bytes received (receives)
  Peer source{};   // the sender (receives, where the layer says)
};

// Receive buffers a server posts: the window, at most kRecvBudgetBytes of
// them, at least 2.
inline constexpr uint64_t kRecvBudgetBytes = 256ull << 20;
inline uint32_t ServerSlots(uint32_t window, uint64_t bytes) {
  const uint64_t fit = kRecvBudgetBytes / std::max<uint64_t>(bytes, 1);
  return static_cast<uint32_t>(std::max<uint64_t>(2, std::min<uint64_t>(window, fit)));
}

// How one side's buffers lie in its region (fi registers the region with its
// domain): slots of `bytes`; a client's are its window + 1 send buffers, then
// its reply buffer (also `bytes`), then the one buffer every kData goes from.
// Left uninitialised: pages are touched only by messages that fill them.
struct SlotLayout {
  size_t bytes = 0;  // the largest message the side sends or receives
  uint32_t slots = 0;
  size_t region_bytes = 0;

  static SlotLayout Client(const PingOptions& o, bool hello) {
    SlotLayout l;
    const size_t largest = PingPayloadBytes(o.MaxSize());
    l.bytes = std::max({o.latency ? largest : 0, kCtlBytes, hello ? kHelloBytes : 0});
    l.slots = std::max<uint32_t>(o.window, 1) + 1;
    l.region_bytes = l.bytes * (l.slots + 1) + (o.rate ? largest : 0);
    return l;
  }
  static SlotLayout Server(const PingOptions& o, bool hello) {
    SlotLayout l;
    l.bytes = std::max({PingPayloadBytes(o.MaxSize()), kCtlBytes, hello ? kHelloBytes : 0});
    l.slots = ServerSlots(std::max<uint32_t>(o.window, 4), l.bytes);
    l.region_bytes = l.bytes * l.slots;
    return l;
  }
};

// A server's transport over link E: receive slots, posted last-in first-out,
// each answered in place. Two stay posted while the client measures round
// trips, so they land in two warm buffers (a ping-pong application reuses
// its buffer; cycling through the window's would measure cache misses); all
// of them once it sends a kRateStart.
template <class E>
class SlotServer {
 public:
  using Peer = typename E::Peer;
  struct Msg {
    uint8_t* data;
    size_t len;
    uint32_t slot;
    Peer source;
  };
  static constexpr size_t kBurst = 64;
  static constexpr bool kHello = E::kHello;
  static constexpr uint64_t kFinLingerNs = 50'000'000;

  // REQUIRES: region holds layout.region_bytes and outlives the server.
  SlotServer(E& link, uint8_t* region, const SlotLayout& layout)
      : link_(link), region_(region), bytes_(layout.bytes), slots_(layout.slots),
        post_limit_(std::min<uint32_t>(2, layout.slots)), sending_(layout.slots, 0),
        replies_(layout.slots) {
    to_post_.reserve(slots_);
    for (uint32_t i = slots_; i > 0; --i) to_post_.push_back(i - 1);
  }

  absl::Status Flush() {
    while (!to_post_.empty() && posted_ < post_limit_) {
      const uint32_t i = to_post_.back();
      absl::StatusOr<bool> r = link_.PostRecv(buf(i), bytes_, i);
      if (!r.ok()) return r.status();
      if (!*r) break;
      to_post_.pop_back();
      ++posted_;
    }
    for (; queued_ != 0; head_ = (head_ + 1) % slots_, --queued_) {
      const Pending& p = replies_[head_];
      absl::StatusOr<bool> r = link_.Send(buf(p.slot), p.len, p.to, p.slot);
      if (!r.ok()) return r.status();
      if (!*r) break;
      sending_[p.slot] = 1;
    }
    return absl::OkStatus();
  }
  bool Idle() const { return queued_ == 0; }

  absl::StatusOr<size_t> Poll(Msg* out) {
    absl::StatusOr<size_t> n = link_.Poll(done_, kBurst);
    if (!n.ok()) return n.status();
    size_t k = 0;
    for (size_t j = 0; j < *n; ++j) {
      const SlotCompletion<Peer>& c = done_[j];
      if (c.slot >= slots_) continue;
      if (sending_[c.slot] != 0) {
        sending_[c.slot] = 0;
        to_post_.push_back(c.slot);  // the reply left: the buffer receives again
        continue;
      }
      --posted_;
      out[k++] = Msg{buf(c.slot), c.len, c.slot, c.source};
    }
    return k;
  }
  void Release(Msg& m) { to_post_.push_back(m.slot); }
  // Each slot is queued at most once, so the ring of `slots` never overflows.
  void Reply(Msg& m) { replies_[(head_ + queued_++) % slots_] = Pending{m.slot, m.len, m.source}; }
  void OpenWindow() { post_limit_ = slots_; }
  absl::Status AcceptHello(Msg& m, const uint8_t* addr, uint32_t len) {
    absl::StatusOr<Peer> p = link_.Hello(addr, len);
    if (!p.ok()) return p.status();
    m.source = *p;
    return absl::OkStatus();
  }

 private:
  struct Pending {
    uint32_t slot = 0;
    size_t len = 0;
    Peer to{};
  };
  uint8_t* buf(uint32_t i) const { return region_ + size_t{i} * bytes_; }

  E& link_;
  uint8_t* const region_;
  const size_t bytes_;
  const uint32_t slots_;
  uint32_t posted_ = 0;
  uint32_t post_limit_;
  std::vector<uint32_t> to_post_;  // a stack: the warmest buffer goes first
  std::vector<uint8_t> sending_;   // the slot is out as a reply, not a receive
  std::vector<Pending> replies_;   // a ring: head_, then queued_ more
  size_t head_ = 0, queued_ = 0;
  SlotCompletion<Peer> done_[kBurst];
};

// A client's transport over link E: window + 1 send slots, each free again
// when its send completes, one reply buffer, and the data buffer every kData
// goes from (the server counts data, it does not verify it), written once a
// size.
template <class E>
class SlotClient {
 public:
  static constexpr bool kReliable = true;
  static constexpr bool kHello = E::kHello;
  static constexpr size_t kBurst = 1;  // the one reply

  // REQUIRES: region holds layout.region_bytes and outlives the client.
  SlotClient(E& link, uint8_t* region, const SlotLayout& layout, typename E::Peer server,
             uint32_t window, uint64_t max_inflight_bytes)
      : link_(link), region_(region), bytes_(layout.bytes), nslots_(layout.slots),
        server_(server), window_(window), max_inflight_bytes_(max_inflight_bytes) {
    free_.reserve(nslots_);
    for (uint32_t i = 0; i < nslots_; ++i) free_.push_back(i);
  }

  std::string Cannot(uint64_t size) const { return link_.Cannot(size); }
  std::string Hint() const { return link_.Hint(); }
  std::span<const uint8_t> address() const { return link_.address(); }
  uint32_t window() const { return window_; }
  uint64_t max_inflight_bytes() const { return max_inflight_bytes_; }
  uint32_t InFlight() const { return nslots_ - static_cast<uint32_t>(free_.size()); }

  absl::Status Progress() {
    absl::StatusOr<size_t> n = link_.Poll(done_, kPollMax);
    if (!n.ok()) return n.status();
    for (size_t k = 0; k < *n; ++k) {
      const uint32_t slot = done_[k].slot;
      if (slot == nslots_) {
        got_reply_ = true;
        reply_len_ = done_[k].len;
      } else if (slot < nslots_) {
        free_.push_back(slot);
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<bool> ArmReply() {
    got_reply_ = false;
    return link_.PostRecv(buf(nslots_), bytes_, nslots_);
  }
  uint8_t* Buffer(size_t /*len*/) {
    if (!Take()) return nullptr;
    next_ = buf(slot_);
    return next_;
  }
  bool Data(uint64_t size, uint64_t /*seq*/) {
    if (!Take()) return false;
    uint8_t* data = buf(nslots_ + 1);
    if (written_ != size) {
      WritePing(data, size, 0, PingKind::kData);
      written_ = size;
    }
    next_ = data;
    return true;
  }
  absl::StatusOr<bool> Send(size_t len, bool more) {
    return link_.Send(next_, len, server_, slot_, more);
  }
  void Flush() {}
  absl::StatusOr<size_t> Poll(Received* out) {
    if (!got_reply_) {
      if (absl::Status s = Progress(); !s.ok()) return s;
      if (!got_reply_) return 0;
    }
    got_reply_ = false;
    out[0] = Received{buf(nslots_), reply_len_};
    return 1;
  }
  void Release() {}

 private:
  static constexpr size_t kPollMax = 64;

  uint8_t* buf(uint32_t i) const { return region_ + size_t{i} * bytes_; }
  // The next send's slot: a free one.
  bool Take() {
    if (free_.empty()) return false;
    slot_ = free_.back();
    free_.pop_back();
    return true;
  }

  E& link_;
  uint8_t* const region_;
  const size_t bytes_;
  const uint32_t nslots_;  // send slots; the reply's is nslots_
  const typename E::Peer server_;
  const uint32_t window_;
  const uint64_t max_inflight_bytes_;
  std::vector<uint32_t> free_;  // a stack of free send slots
  uint32_t slot_ = 0;           // the next send's
  uint8_t* next_ = nullptr;     // what it sends
  uint64_t written_ = ~uint64_t{0};  // the size the data buffer holds
  bool got_reply_ = false;
  size_t reply_len_ = 0;
  SlotCompletion<typename E::Peer> done_[kPollMax];
};

}  // namespace bypass::tools

#endif  // BYPASS_TOOLS_PINGPONG_SLOTS_H_
