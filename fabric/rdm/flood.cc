#include "fabric/rdm/flood.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fabric/rdm/rdm.h"
#include "fabric/rdm/test_util.h"

namespace bypass::rdm::testing {
namespace {

// Node 0 receives; nodes 1..senders send. A message's first 8 bytes are its
// id (sender * kIdsPerSender + index), the rest that id's pattern.
constexpr uint64_t kIdsPerSender = 1'000'000;

}  // namespace

FloodResult RunFlood(const FloodOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  FloodResult r;
  const size_t total = static_cast<size_t>(o.senders) * o.messages;
  NetOptions n;
  n.nodes = o.senders + 1;
  n.tick_ns = o.tick_ns;
  n.faults.drop = o.drop;
  n.faults.seed = o.seed;
  n.config.congestion_control = o.congestion_control;
  n.configure = [&](int node, EndpointConfig* c) {
    if (node == 0) c->max_posted_recvs = static_cast<uint32_t>(total);
  };
  n.configure_faults = [&](int node, driver::fault::FaultOptions* f) {
    if (node != 0) return;
    f->rate_pps = o.rate_pps;
    f->queue = o.queue;
  };
  Net net(n);

  std::vector<std::vector<uint8_t>> in(total, std::vector<uint8_t>(o.message_bytes));
  for (auto& b : in) {
    if (net.ep(0).PostRecv({.buf = b.data(), .len = b.size(), .context = &b}) != Result::kOk) {
      r.error = "posting a receive failed";
      return r;
    }
  }
  std::vector<std::vector<std::vector<uint8_t>>> out(o.senders + 1);
  std::vector<PeerId> to_receiver(o.senders + 1);
  std::vector<int> posted(o.senders + 1, 0), sent(o.senders + 1, 0);
  for (int s = 1; s <= o.senders; ++s) {
    to_receiver[s] = net.Peer(s, 0);
    net.Peer(0, s);  // in the receiver's address vector too: it learns only max_peers / 4
    for (int i = 0; i < o.messages; ++i) {
      std::vector<uint8_t> m(o.message_bytes);
      const uint64_t id = s * kIdsPerSender + i;
      std::memcpy(m.data(), &id, sizeof(id));
      FillPattern(id, absl::MakeSpan(m).subspan(sizeof(id)));
      out[s].push_back(std::move(m));
    }
  }
  std::vector<int> next_index(o.senders + 1, 0);
  size_t received = 0, sends_done = 0;
  std::vector<Completion> ok;
  std::vector<ErrorCompletion> err;
  const auto fail = [&](std::string why) {
    if (r.error.empty()) r.error = std::move(why);
  };
  for (; r.steps < o.max_steps; ++r.steps) {
    for (int s = 1; s <= o.senders; ++s) {
      while (posted[s] < o.messages &&
             net.ep(s).Send({.dest = to_receiver[s], .buf = out[s][posted[s]].data(),
                             .len = o.message_bytes}) == Result::kOk) {
        ++posted[s];
      }
      ok.clear();
      Drain(net.ep(s), &ok, &err);
      sends_done += ok.size();
    }
    ok.clear();
    Drain(net.ep(0), &ok, &err);
    for (const Completion& c : ok) {
      ++received;
      const auto* buf = static_cast<const std::vector<uint8_t>*>(c.context);
      uint64_t id;
      std::memcpy(&id, buf->data(), sizeof(id));
      const uint64_t s = id / kIdsPerSender, i = id % kIdsPerSender;
      if (s < 1 || s > static_cast<uint64_t>(o.senders) || c.len != o.message_bytes) {
        fail(absl::StrCat("a message that was never sent: id ", id, " len ", c.len));
      } else if (i != static_cast<uint64_t>(next_index[s])) {
        fail(absl::StrCat("sender ", s, ": message ", i, " arrived, expected ",
                          next_index[s], " (a duplicate, a loss or out of order)"));
      } else if (CheckPattern(id, absl::MakeSpan(*buf).subspan(sizeof(id))) != -1) {
        fail(absl::StrCat("sender ", s, " message ", i, " damaged"));
      } else {
        ++next_index[s];
      }
    }
    for (const ErrorCompletion& e : err) fail(absl::StrCat("an operation failed: ", e.message));
    err.clear();
    if (!r.error.empty() || (received >= total && sends_done >= total)) break;
    net.Step();
  }
  r.finished = received == total && sends_done == total;
  r.exactly_once = r.finished && r.error.empty();
  if (!r.finished) fail(absl::StrCat(received, " of ", total, " received and ", sends_done,
                                     " sends done after ", r.steps, " steps"));
  r.delivered_packets = net.ep(0).counters().rx_data_packets;
  for (int s = 1; s <= o.senders; ++s) {
    const Counters& c = net.ep(s).counters();
    r.data_packets_sent += c.tx_data_packets;
    r.retransmits += c.retransmits_fast + c.retransmits_timeout;
    r.rto_expirations += c.rto_expirations;
    r.cwnd_reductions += c.cwnd_reductions;
  }
  r.queue_dropped = net.device(0).counters().queue_dropped;
  r.queue_max = net.device(0).counters().queue_max;
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace bypass::rdm::testing
