#include "fabric/rdm/test_util.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/loopback/loopback_device.h"
#include "driver/uri.h"
#include "gtest/gtest.h"

namespace bypass::rdm::testing {

uint16_t TapQueue::RxBurst(absl::Span<driver::Packet*> out) {
  const uint16_t n = inner_.RxBurst(out);
  if (strip_same_host_) {
    for (uint16_t i = 0; i < n; ++i) out[i]->ol_flags &= static_cast<uint16_t>(~driver::kRxSameHost);
  }
  if (!filter_ && !rewrite_) return n;
  uint16_t kept = 0;
  for (uint16_t i = 0; i < n; ++i) {
    driver::Packet* p = out[i];
    wire::View v;
    const bool intact = (p->ol_flags & driver::kRxIntact) != 0;
    const bool ok = wire::Parse({p->data, p->len}, &v, intact) == wire::ParseStatus::kOk;
    if (!filter_ || filter_(ok ? &v : nullptr)) {
      const bool rebuildable = ok && (v.common.type == wire::PacketType::kData ||
                                      v.common.type == wire::PacketType::kRma ||
                                      v.common.type == wire::PacketType::kAck);
      if (rebuildable && rewrite_ && rewrite_(&v)) {
        // The payload is copied out first: the rebuilt frame overwrites it.
        const std::vector<uint8_t> payload(v.payload.begin(), v.payload.end());
        if (v.common.type == wire::PacketType::kData) {
          p->len = static_cast<uint32_t>(
              wire::BuildData(v.flow, v.common, v.msg, payload, {p->data, p->capacity}));
        } else if (v.common.type == wire::PacketType::kRma) {
          p->len = static_cast<uint32_t>(
              wire::BuildRma(v.flow, v.common, v.rma, payload, {p->data, p->capacity}));
        } else {
          p->len =
              static_cast<uint32_t>(wire::BuildAck(v.flow, v.common, v.ack, {p->data, p->capacity}));
        }
      }
      out[kept++] = p;
    } else {
      ++dropped_;
      inner_.FreeBulk({&p, 1});
    }
  }
  return kept;
}

std::string UniqueSegment() {
  static std::atomic<int> n{0};
  return absl::StrCat("rdm-", n.fetch_add(1));
}

Net::Net(const NetOptions& opts) : opts_(opts) {
  const std::string segment = UniqueSegment();
  for (int i = 0; i < opts.nodes; ++i) {
    auto node = std::make_unique<Node>();
    driver::DeviceOptions dopts;
    dopts.mtu = opts.mtu;
    dopts.ring_size = opts.ring_size;
    absl::StatusOr<driver::DeviceUri> uri = driver::DeviceUri::Parse("loopback:" + segment + opts.device_keys);
    absl::StatusOr<std::unique_ptr<driver::loopback::LoopbackDevice>> lb =
        driver::loopback::Open(*uri, dopts);
    EXPECT_TRUE(lb.ok()) << lb.status();
    driver::fault::FaultOptions f = opts.faults;
    f.seed = opts.faults.seed * 1000 + i;
    if (opts.configure_faults) opts.configure_faults(i, &f);
    absl::StatusOr<std::unique_ptr<driver::fault::FaultDevice>> dev =
        driver::fault::FaultDevice::Create(*std::move(lb), f, clock_);
    EXPECT_TRUE(dev.ok()) << dev.status();
    node->dev = *std::move(dev);
    node->tap = std::make_unique<TapQueue>(node->dev->queue(0));
    node->port = std::make_unique<Port>(*node->tap, node->dev->info());
    nodes_.push_back(std::move(node));
  }
  for (int i = 0; i < opts.nodes; ++i) MakeEndpoint(i);
}

Net::~Net() {
  for (auto& n : nodes_) n->ep.reset();
}

void Net::MakeEndpoint(int i) {
  Node& n = *nodes_[i];
  EndpointConfig c = opts_.config;
  c.udp_port = static_cast<uint16_t>(5000 + i);
  c.random_seed =
      uint64_t{opts_.faults.seed} * 7919 + static_cast<uint64_t>(i) * 131 + n.generation * 17;
  c.incarnation = 0x10000000u * static_cast<uint32_t>(i + 1) + 0x100u * (n.generation + 1) +
                  static_cast<uint32_t>(opts_.faults.seed & 0xff);
  ++n.generation;
  if (opts_.configure) opts_.configure(i, &c);
  absl::StatusOr<std::unique_ptr<Endpoint>> ep = Endpoint::Create(*n.port, clock_, c);
  ASSERT_TRUE(ep.ok()) << ep.status();
  n.ep = *std::move(ep);
}

PeerId Net::Peer(int i, int j) {
  absl::StatusOr<PeerId> id = ep(i).InsertPeer(ep(j).address());
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : PeerId{};
}

void Net::Step() {
  for (auto& n : nodes_) {
    if (n->ep) n->ep->Progress();
  }
  clock_.Advance(opts_.tick_ns);
}

bool Net::RunUntil(const std::function<bool()>& done, uint64_t max_steps) {
  for (uint64_t s = 0; s < max_steps; ++s) {
    if (done()) return true;
    Step();
  }
  return done();
}

void Net::Kill(int i) { nodes_[i]->ep.reset(); }

void Net::Revive(int i) { MakeEndpoint(i); }

void FillPattern(uint64_t id, absl::Span<uint8_t> buf) {
  uint64_t x = id * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < buf.size(); ++i) {
    if (i % 8 == 0) x = x * 6364136223846793005ull + 1442695040888963407ull;
    buf[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
  }
}

int64_t CheckPattern(uint64_t id, absl::Span<const uint8_t> buf) {
  std::vector<uint8_t> want(buf.size());
  FillPattern(id, absl::MakeSpan(want));
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] != want[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t TransferAndVerify(Net& net, int a, int b, const std::vector<size_t>& sizes,
                          uint64_t max_steps) {
  std::vector<std::vector<uint8_t>> out(sizes.size()), in(sizes.size());
  const PeerId to_b = net.Peer(a, b);
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    FillPattern(i, absl::MakeSpan(out[i]));
    in[i].assign(sizes[i], 0xee);
    EXPECT_EQ(net.ep(b).PostRecv({.buf = in[i].data(), .len = in[i].size(), .context = &in[i]}),
              Result::kOk);
  }
  size_t posted = 0;
  std::vector<Completion> sent, got;
  std::vector<ErrorCompletion> errs;
  uint64_t steps = 0;
  for (; steps < max_steps; ++steps) {
    while (posted < out.size() && net.ep(a).Send({.dest = to_b,
                                                  .buf = out[posted].data(),
                                                  .len = out[posted].size(),
                                                  .context = &out[posted]}) == Result::kOk) {
      ++posted;
    }
    Drain(net.ep(a), &sent, &errs);
    Drain(net.ep(b), &got, &errs);
    if (!errs.empty() || (sent.size() == sizes.size() && got.size() == sizes.size())) break;
    net.Step();
  }
  for (const ErrorCompletion& e : errs) ADD_FAILURE() << "error completion: " << e.message;
  EXPECT_EQ(sent.size(), sizes.size()) << "sender: " << net.ep(a).counters().ToString()
                                       << "\nreceiver: " << net.ep(b).counters().ToString();
  EXPECT_EQ(got.size(), sizes.size());
  for (size_t i = 0; i < got.size() && i < sizes.size(); ++i) {
    EXPECT_EQ(got[i].context, &in[i]) << "message " << i << " out of order";
    EXPECT_EQ(got[i].len, sizes[i]) << "message " << i;
    EXPECT_EQ(CheckPattern(i, in[i]), -1) << "message " << i << " damaged";
  }
  if (sent.size() != sizes.size() || got.size() != sizes.size() || !errs.empty()) return -1;
  return static_cast<int64_t>(steps);
}

bool RunTransfer(Net& net, Transfer& t, size_t sends, size_t recvs, uint64_t steps) {
  return net.RunUntil(
      [&] {
        Drain(net.ep(0), &t.sent, &t.send_err);
        Drain(net.ep(1), &t.got, &t.recv_err);
        return t.Done(sends, recvs);
      },
      steps);
}

void SendIntoShorterReceive(Net& net, size_t send_len, size_t recv_len, bool posted_first,
                            Transfer& t) {
  const PeerId to_b = net.Peer(0, 1);
  std::vector<uint8_t> out(send_len), in(recv_len, 0xee);
  FillPattern(3, absl::MakeSpan(out));
  const auto post = [&] {
    ASSERT_EQ(net.ep(1).PostRecv({.buf = in.data(), .len = in.size()}), Result::kOk);
  };
  if (posted_first) post();
  ASSERT_EQ(net.ep(0).Send({.dest = to_b, .buf = out.data(), .len = out.size()}), Result::kOk);
  for (int i = 0; i < 2000; ++i) net.Step();
  if (!posted_first) post();
  ASSERT_TRUE(RunTransfer(net, t, 1, 1));
  ASSERT_EQ(t.sent.size(), 1u) << "the sender's side completes normally";
  ASSERT_EQ(t.recv_err.size(), 1u);
  EXPECT_EQ(t.recv_err[0].err, EMSGSIZE);
  EXPECT_EQ(t.recv_err[0].olen, out.size() - in.size());
  EXPECT_EQ(t.recv_err[0].op.len, in.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
  EXPECT_EQ(net.ep(1).counters().truncated, 1u);
}

void Drain(Endpoint& ep, std::vector<Completion>* ok, std::vector<ErrorCompletion>* err) {
  Completion c[64];
  while (size_t n = ep.PollCompletions(c)) {
    if (ok != nullptr) ok->insert(ok->end(), c, c + n);
  }
  ErrorCompletion e[16];
  while (size_t n = ep.PollErrors(e)) {
    if (err != nullptr) err->insert(err->end(), e, e + n);
  }
}

}  // namespace bypass::rdm::testing
