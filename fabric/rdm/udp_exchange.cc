#include "fabric/rdm/udp_exchange.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/clock.h"

namespace bypass::rdm::udp_exchange {
namespace {

constexpr uint64_t kDeadlineNs = 120'000'000'000;
constexpr size_t kSizes[] = {1, 7, 64, 100, 1000, 1400, 1473, 4000, 8972, 9000, 16384,
                             30000, 47000, 65536};

// Message i of `side` (the last, kMessages, is the big one).
size_t SizeOf(int side, int i) {
  if (i == kMessages) return kBigMessage;
  return kSizes[(i * 5 + side * 3) % std::size(kSizes)];
}
uint8_t ByteOf(int side, int i, size_t k) {
  return static_cast<uint8_t>((side + 1) * 131 + i * 17 + k * 7 + (k >> 8));
}
void* Ctx(intptr_t v) { return reinterpret_cast<void*>(v); }

}  // namespace

absl::StatusOr<std::unique_ptr<Side>> Side::Create(
    const std::string& uri, uint16_t udp_port, int side,
    const std::function<void(EndpointConfig*)>& configure) {
  std::unique_ptr<Side> s(new Side());
  s->side_ = side;
  absl::StatusOr<std::unique_ptr<driver::Device>> dev = driver::OpenDevice(uri);
  if (!dev.ok()) return dev.status();
  s->dev_ = *std::move(dev);
  s->port_ = std::make_unique<Port>(s->dev_->queue(0), s->dev_->info());
  EndpointConfig c;
  c.udp_port = udp_port;
  c.max_posted_recvs = kMessages + 1;
  // A loaded machine (tests beside this one on two cores) can starve the
  // kernel's delivery for a while: only a real hang (kDeadlineNs) fails.
  c.peer_timeout_ns = kDeadlineNs;
  c.rnr_give_up_ns = kDeadlineNs;
  if (configure) configure(&c);
  absl::StatusOr<std::unique_ptr<Endpoint>> ep =
      Endpoint::Create(*s->port_, driver::SteadyClock::Get(), c);
  if (!ep.ok()) return ep.status();
  s->ep_ = *std::move(ep);
  s->out_.resize(kMessages + 1);
  s->in_.resize(kMessages + 1);
  for (int i = 0; i <= kMessages; ++i) {
    s->out_[i].resize(SizeOf(side, i));
    for (size_t k = 0; k < s->out_[i].size(); ++k) s->out_[i][k] = ByteOf(side, i, k);
    s->in_[i].assign(SizeOf(1 - side, i) + 1, 0xee);  // one byte to spare: no overrun
  }
  return s;
}

Side::~Side() {
  ep_.reset();  // before its port and device
  port_.reset();
}

Address Side::address() const {
  Address a = ep_->address();
  a.mac = driver::MacAddress{};
  a.incarnation = 0;
  return a;
}

absl::Status Side::Connect(const Address& other) {
  absl::StatusOr<PeerId> peer = ep_->InsertPeer(other);
  if (!peer.ok()) return peer.status();
  peer_ = *peer;
  // Every receive up front: messages arrive in order, so receive i gets
  // message i.
  for (int i = 0; i <= kMessages; ++i) {
    const RecvRequest r{.buf = in_[i].data(), .len = in_[i].size(), .context = Ctx(i + 1)};
    if (ep_->PostRecv(r) != Result::kOk) return absl::InternalError("PostRecv refused");
  }
  return absl::OkStatus();
}

absl::Status Side::Step() {
  while (sent_ <= kMessages) {
    const SendRequest r{.dest = peer_, .buf = out_[sent_].data(), .len = out_[sent_].size(),
                        .context = Ctx(-(sent_ + 1))};
    if (ep_->Send(r) != Result::kOk) break;
    ++sent_;
  }
  ep_->Progress();
  ErrorCompletion err;
  if (ep_->PollErrors({&err, 1}) > 0) {
    return absl::InternalError(absl::StrCat("side ", side_, ": error completion: ", err.err, " ",
                                            err.message));
  }
  Completion comps[64];
  const size_t n = ep_->PollCompletions(comps);
  for (size_t k = 0; k < n; ++k) {
    const intptr_t v = reinterpret_cast<intptr_t>(comps[k].context);
    if (v < 0) {
      ++send_done_;
      continue;
    }
    const int i = static_cast<int>(v - 1);
    const size_t want = SizeOf(1 - side_, i);
    if (i != recv_done_) {
      return absl::DataLossError(absl::StrCat("side ", side_, ": message ", i,
                                              " completed before message ", recv_done_));
    }
    if (comps[k].len != want) {
      return absl::DataLossError(absl::StrCat("side ", side_, ": message ", i, ": ", comps[k].len,
                                              " bytes, not ", want));
    }
    for (size_t b = 0; b < want; ++b) {
      if (in_[i][b] != ByteOf(1 - side_, i, b)) {
        return absl::DataLossError(
            absl::StrCat("side ", side_, ": message ", i, ": byte ", b, " differs"));
      }
    }
    if (in_[i][want] != 0xee) {
      return absl::DataLossError(absl::StrCat("side ", side_, ": message ", i, ": overrun"));
    }
    ++recv_done_;
  }
  return absl::OkStatus();
}

std::string Side::Report() const {
  return absl::StrCat("side ", side_, " (", dev_->info().uri, "): sent ", send_done_,
                      " received ", recv_done_, " of ", kMessages + 1, "; ",
                      ep_->counters().ToString());
}

absl::Status RunBoth(Side& a, Side& b) {
  const uint64_t start = driver::SteadyClock::Get().NowNs();
  while (!a.Done() || !b.Done()) {
    if (absl::Status s = a.Step(); !s.ok()) return s;
    if (absl::Status s = b.Step(); !s.ok()) return s;
    if (driver::SteadyClock::Get().NowNs() - start > kDeadlineNs) {
      return absl::DeadlineExceededError(absl::StrCat("unfinished: ", a.Report(), " | ", b.Report()));
    }
  }
  return absl::OkStatus();
}

}  // namespace bypass::rdm::udp_exchange
