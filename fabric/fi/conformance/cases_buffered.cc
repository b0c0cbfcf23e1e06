// Issue 20 parts 6 and 11, and FI_TRIGGER on fi_atomicmsg: buffered
// receives (fi_msg(3) "Buffered Receives"; the FI_BUFFERED_RECV mode bit of
// fi_getinfo(3); FI_CLAIM, FI_DISCARD, FI_MORE of fi_cq(3);
// FI_OPT_BUFFERED_LIMIT of fi_endpoint(3)), FI_MSG_PREFIX on FI_EP_DGRAM,
// fi_hmem_override_ops (fi_domain(3) fi_set_ops) and fi_mr_regattr's iface
// (fi_mr(3)). References: tcp;ofi_rxm for buffered receives (the provider
// of Debian's libfabric 1.17 that offers FI_BUFFERED_RECV), udp for
// FI_MSG_PREFIX (no provider of it offers the mode on FI_EP_DGRAM: the row
// says so), shm for the HMEM rows, sockets for the triggered atomic.
#include <rdma/fi_atomic.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_trigger.h>

#include <atomic>
#include <cstring>
#include <string>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr char kUdp[] = "udp";
constexpr char kSockets[] = "sockets";

fi_info* BufferedHints(Ctx& c, uint64_t caps = FI_MSG) {
  fi_info* h = c.Hints(caps);
  h->mode = FI_BUFFERED_RECV;
  return h;
}

// Sends `msg` from p.a untagged (or tagged with `tag`).
void Send(Ctx& c, Pair& p, const std::string& msg, bool tagged = false, uint64_t tag = 0) {
  char* out = c.Buf(msg.size());
  std::memcpy(out, msg.data(), msg.size());
  c.Post("send", [&] {
    return tagged ? fi_tsend(p.a.ep, out, msg.size(), nullptr, p.a_to_b, tag, nullptr)
                  : fi_send(p.a.ep, out, msg.size(), nullptr, p.a_to_b, nullptr);
  });
}

void WaitSend(Ctx& c, Pair& p) {
  const Completion s = c.Wait(p.a.tx, "send completion");
  CHECK(!s.error, "the send failed: " << Err(-s.err.err));
}

// The same, waiting for the send's completion.
void SendAndWait(Ctx& c, Pair& p, const std::string& msg, bool tagged = false,
                 uint64_t tag = 0) {
  Send(c, p, msg, tagged, tag);
  WaitSend(c, p);
}

// The notification of a buffered receive at p.b.
fi_cq_tagged_entry Notification(Ctx& c, Pair& p) {
  const Completion n = c.Wait(p.b.rx, "buffered receive notification");
  CHECK(!n.error, "an error entry instead of a notification: " << Err(-n.err.err));
  CHECK(n.entry.op_context != nullptr, "the notification has no struct fi_recv_context");
  const auto* rc = static_cast<const fi_recv_context*>(n.entry.op_context);
  CHECK(rc->ep == p.b.ep && rc->context == nullptr,
        "fi_recv_context is {" << rc->ep << ", " << rc->context << "}, want {the endpoint, NULL}");
  return n.entry;
}

ssize_t Claim(fid_ep* ep, void* rc, char* buf, size_t len, uint64_t flags, bool tagged) {
  iovec iov{buf, len};
  const size_t n = buf != nullptr ? 1 : 0;
  if (tagged) {
    const fi_msg_tagged m{&iov, nullptr, n, FI_ADDR_UNSPEC, 0, 0, rc, 0};
    return fi_trecvmsg(ep, &m, flags);
  }
  const fi_msg m{&iov, nullptr, n, FI_ADDR_UNSPEC, rc, 0};
  return fi_recvmsg(ep, &m, flags);
}

}  // namespace

// fi_getinfo(3) FI_BUFFERED_RECV: a mode bit, so an entry carries it only
// for hints that set it.
CONFORMANCE_CASE(buffered_getinfo_mode, kTcp) {
  fi_info* plain = c.Info(c.Hints());
  CHECK(!(plain->mode & FI_BUFFERED_RECV), "FI_BUFFERED_RECV offered to hints without it");
  fi_info* i = c.Info(BufferedHints(c));
  CHECK(i->mode & FI_BUFFERED_RECV, "hints with FI_BUFFERED_RECV: the entry has mode 0x"
                                        << std::hex << i->mode);
}

// fi_msg(3): a message with no posted receive is reported with op_context
// a struct fi_recv_context {ep, NULL}, buf the provider's buffer, len its
// size; FI_CLAIM with that context copies it into the application's
// buffer: a receive completion with FI_CLAIM and the context set in the
// fi_recv_context.
CONFORMANCE_CASE(buffered_notify_and_claim, kTcp) {
  fi_info* i = c.Info(BufferedHints(c));
  if (!(i->mode & FI_BUFFERED_RECV)) Refuse("FI_BUFFERED_RECV not offered");
  Pair p = c.PairFrom(i);
  const std::string msg = "a buffered message";
  SendAndWait(c, p, msg);
  const fi_cq_tagged_entry n = Notification(c, p);
  CHECK(n.len == msg.size(), "notification len " << n.len << ", want " << msg.size());
  CHECK(n.buf != nullptr && std::memcmp(n.buf, msg.data(), msg.size()) == 0,
        "the notification's buf does not hold the message");
  CHECK((n.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG) && !(n.flags & FI_MORE),
        "notification flags 0x" << std::hex << n.flags);
  auto* rc = static_cast<fi_recv_context*>(n.op_context);
  int mine = 0;
  rc->context = &mine;
  char* in = c.Buf(64);
  c.Post("fi_recvmsg FI_CLAIM", [&] { return Claim(p.b.ep, rc, in, 64, FI_CLAIM, false); });
  const Completion r = c.Wait(p.b.rx, "claim completion");
  CHECK(!r.error, "the claim failed: " << Err(-r.err.err));
  CHECK(r.entry.op_context == &mine, "the claim's op_context is not fi_recv_context.context");
  CHECK(r.entry.flags & FI_CLAIM, "the claim's completion lacks FI_CLAIM");
  CHECK(std::string(in, msg.size()) == msg, "the claimed bytes differ");
}

// fi_msg(3): FI_DISCARD frees the buffered message (its buffers and length
// ignored); a discard is not a receive, and nothing of it is reported.
CONFORMANCE_CASE(buffered_discard, kTcp) {
  fi_info* i = c.Info(BufferedHints(c, FI_TAGGED));
  if (!(i->mode & FI_BUFFERED_RECV)) Refuse("FI_BUFFERED_RECV not offered");
  Pair p = c.PairFrom(i);
  SendAndWait(c, p, "first", true, 7);
  const fi_cq_tagged_entry n = Notification(c, p);
  CHECK(n.tag == 7 && (n.flags & FI_TAGGED), "the notification of a tagged message lacks its tag");
  c.Post("fi_trecvmsg FI_DISCARD",
         [&] { return Claim(p.b.ep, n.op_context, nullptr, 0, FI_DISCARD, true); });
  SendAndWait(c, p, "second", true, 8);
  const fi_cq_tagged_entry n2 = Notification(c, p);
  CHECK(n2.tag == 8 && n2.len == 6, "after a discard, the next notification is tag " << n2.tag);
  c.Post("fi_trecvmsg FI_DISCARD",
         [&] { return Claim(p.b.ep, n2.op_context, nullptr, 0, FI_DISCARD, true); });
  Completion extra;
  CHECK(!c.Poll(p.b.rx, &extra, 200), "a discard was reported");
}

// fi_msg(3), fi_cq(3) FI_MORE: a message larger than FI_OPT_BUFFERED_LIMIT
// is notified with FI_MORE, buf holding at least FI_OPT_BUFFERED_MIN
// bytes; FI_CLAIM retrieves the whole message.
CONFORMANCE_CASE(buffered_more_above_limit, kTcp) {
  fi_info* i = c.Info(BufferedHints(c));
  if (!(i->mode & FI_BUFFERED_RECV)) Refuse("FI_BUFFERED_RECV not offered");
  fid_fabric* fabric = c.Fabric(i);
  Pair p;
  p.a = c.OpenEp(c.Domain(fabric, i), i);
  fid_domain* db = c.Domain(fabric, i);
  fid_ep* raw = nullptr;
  CHECK_RET(fi_endpoint(db, i, &raw, nullptr), 0);
  c.Own(&raw->fid);
  size_t limit = 256, min = 0, len = sizeof min;
  CHECK_RET(fi_setopt(&raw->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, sizeof limit), 0);
  CHECK_RET(fi_getopt(&raw->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_MIN, &min, &len), 0);
  EpOpts opts;
  opts.opened = raw;
  p.b = c.OpenEp(db, i, opts);
  p.a_to_b = c.Insert(p.a.av, p.b.name);
  p.b_to_a = c.Insert(p.b.av, p.a.name);
  std::string big(100'000, 0);
  for (size_t k = 0; k < big.size(); ++k) big[k] = static_cast<char>('a' + k % 26);
  // A large send may complete only once the receiver claimed it (rxm's
  // rendezvous does): its completion is awaited last.
  Send(c, p, big);
  const fi_cq_tagged_entry n = Notification(c, p);
  CHECK(n.flags & FI_MORE, "a message above FI_OPT_BUFFERED_LIMIT without FI_MORE");
  CHECK(n.len == big.size(), "notification len " << n.len << ", want the message's " << big.size());
  const size_t shown = std::min(min, big.size());
  CHECK(std::memcmp(n.buf, big.data(), shown) == 0, "buf does not start with the message");
  char* in = c.Buf(big.size());
  c.Post("fi_recvmsg FI_CLAIM",
         [&] { return Claim(p.b.ep, n.op_context, in, big.size(), FI_CLAIM, false); });
  const Completion r = c.Wait(p.b.rx, "claim completion");
  CHECK(!r.error && r.entry.len == big.size(), "the claim completed with len " << r.entry.len);
  CHECK(std::memcmp(in, big.data(), big.size()) == 0, "the claimed bytes differ");
  WaitSend(c, p);
}

// fi_getinfo(3) FI_MSG_PREFIX, fi_msg(3) NOTES, fi_cq(3) len: with the mode
// on FI_EP_DGRAM, msg_prefix_size (a multiple of 8) bytes of every send and
// receive buffer are the provider's; the payload follows, and a receive's
// len counts the prefix.
CONFORMANCE_CASE(msg_prefix_dgram, kUdp) {
  fi_info* h = c.Hints();
  h->ep_attr->type = FI_EP_DGRAM;
  h->mode = FI_MSG_PREFIX;
  fi_info* i = c.Info(h);
  if (!(i->mode & FI_MSG_PREFIX)) Refuse("FI_MSG_PREFIX not asked of the application");
  const size_t prefix = i->ep_attr->msg_prefix_size;
  CHECK(prefix > 0 && prefix % 8 == 0, "msg_prefix_size " << prefix);
  Pair p = c.PairFrom(i);
  const std::string payload = "past the prefix";
  char* in = c.Buf(prefix + 64, 'x');
  c.Post("fi_recv", [&] {
    return fi_recv(p.b.ep, in, prefix + 64, nullptr, FI_ADDR_UNSPEC, nullptr);
  });
  char* out = c.Buf(prefix + payload.size(), '#');
  std::memcpy(out + prefix, payload.data(), payload.size());
  c.Post("fi_send", [&] {
    return fi_send(p.a.ep, out, prefix + payload.size(), nullptr, p.a_to_b, nullptr);
  });
  const Completion r = c.Wait(p.b.rx, "datagram");
  CHECK(!r.error, "the receive failed: " << Err(-r.err.err));
  CHECK(r.entry.len == prefix + payload.size(),
        "len " << r.entry.len << ", want the payload and the prefix, " << prefix + payload.size());
  CHECK(std::string(in + prefix, payload.size()) == payload, "the payload is not after the prefix");
}

namespace {

std::atomic<size_t> g_to_bytes{0}, g_from_bytes{0};

// Walks `size` bytes of iov from `offset`, calling copy(base, done, n) for
// each piece; the bytes walked.
template <class F>
size_t WalkIov(const iovec* iov, size_t count, uint64_t offset, size_t size, F copy) {
  size_t done = 0, skip = offset;
  for (size_t k = 0; k < count && done < size; ++k) {
    if (skip >= iov[k].iov_len) {
      skip -= iov[k].iov_len;
      continue;
    }
    const size_t n = std::min(iov[k].iov_len - skip, size - done);
    copy(static_cast<char*>(iov[k].iov_base) + skip, done, n);
    done += n;
    skip = 0;
  }
  return done;
}

ssize_t CopyFrom(void* dest, size_t size, fi_hmem_iface, uint64_t, const iovec* iov, size_t count,
                 uint64_t offset) {
  const size_t done = WalkIov(iov, count, offset, size, [&](char* p, size_t at, size_t n) {
    std::memcpy(static_cast<char*>(dest) + at, p, n);
  });
  g_from_bytes += done;
  return static_cast<ssize_t>(done);
}

ssize_t CopyTo(fi_hmem_iface, uint64_t, const iovec* iov, size_t count, uint64_t offset,
               const void* src, size_t size) {
  const size_t done = WalkIov(iov, count, offset, size, [&](char* p, size_t at, size_t n) {
    std::memcpy(p, static_cast<const char*>(src) + at, n);
  });
  g_to_bytes += done;
  return static_cast<ssize_t>(done);
}

}  // namespace

// fi_domain(3) FI_SET_OPS_HMEM_OVERRIDE: "the memory movement functions a
// provider should use when accessing a user buffer". With them set on
// both domains, a message's bytes leave the sender's buffer through
// copy_from_hmem_iov and reach the receiver's through copy_to_hmem_iov.
CONFORMANCE_CASE(hmem_override_copies, kShm) {
  Pair p = c.OpenPair(c.Hints());
  fi_hmem_override_ops ops{sizeof(fi_hmem_override_ops), CopyFrom, CopyTo};
  for (fid_domain* d : {p.a.domain, p.b.domain}) {
    const int r = fi_set_ops(&d->fid, FI_SET_OPS_HMEM_OVERRIDE, 0, &ops, nullptr);
    if (r == -FI_ENOSYS) Refuse("fi_set_ops(FI_SET_OPS_HMEM_OVERRIDE): -FI_ENOSYS");
    CHECK_RET(r, 0);
  }
  g_to_bytes = g_from_bytes = 0;
  const size_t n = 5000;
  char* out = c.Buf(n, 'h');
  char* in = c.Buf(n);
  c.Post("fi_recv", [&] { return fi_recv(p.b.ep, in, n, nullptr, FI_ADDR_UNSPEC, nullptr); });
  c.Post("fi_send", [&] { return fi_send(p.a.ep, out, n, nullptr, p.a_to_b, nullptr); });
  const Completion r = c.Wait(p.b.rx, "receive");
  CHECK(!r.error && std::memcmp(in, out, n) == 0, "the message did not arrive intact");
  c.Wait(p.a.tx, "send");
  CHECK(g_from_bytes.load() >= n, "copy_from_hmem_iov moved " << g_from_bytes.load() << " bytes of "
                                                              << n << " sent");
  CHECK(g_to_bytes.load() >= n, "copy_to_hmem_iov moved " << g_to_bytes.load() << " bytes of " << n
                                                          << " received");
}

// fi_mr(3) iface: FI_HMEM_SYSTEM named explicitly registers host memory; a
// device interface on a provider without FI_HMEM (fi_getinfo refuses it
// here: caps_hmem) is refused, never read as host memory.
CONFORMANCE_CASE(hmem_mr_iface, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_domain* d = c.Domain(c.Fabric(i), i);
  char* buf = c.Buf(64);
  iovec mem{buf, 64};
  fi_mr_attr attr{};
  attr.mr_iov = &mem;
  attr.iov_count = 1;
  attr.access = FI_SEND | FI_RECV;
  attr.iface = FI_HMEM_SYSTEM;
  attr.requested_key = 1;
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_regattr(d, &attr, 0, &mr), 0);
  CHECK_RET(c.Close(&mr->fid), 0);
  attr.iface = FI_HMEM_CUDA;
  attr.requested_key = 2;
  const int r = fi_mr_regattr(d, &attr, 0, &mr);
  CHECK(r == -FI_EOPNOTSUPP || r == -FI_ENOSYS, "FI_HMEM_CUDA on a machine without it: " << Err(r));
}

// fi_trigger(3) with fi_atomicmsg (fi_atomic(3) FI_TRIGGER... via the
// triggered context): the atomic is held below the threshold and runs when
// the counter reaches it, completing with its triggered context.
CONFORMANCE_CASE(trigger_atomicmsg, kSockets) {
  Pair p = c.OpenPair(c.Hints(FI_ATOMIC | FI_TRIGGER));
  fid_cntr* cntr = c.Cntr(p.a.domain);
  char* target = c.Buf(8);
  fid_mr* mr = nullptr;
  CHECK_RET(fi_mr_reg(p.b.domain, target, 8, FI_REMOTE_WRITE, 0, 3, 0, &mr, nullptr), 0);
  c.Own(&mr->fid);
  uint64_t* one = reinterpret_cast<uint64_t*>(c.Buf(8));
  *one = 1;
  fi_ioc ioc{one, 1};
  fi_rma_ioc rma{RmaAddr(p.b.info, target), 1, fi_mr_key(mr)};
  fi_triggered_context t{};
  t.event_type = FI_TRIGGER_THRESHOLD;
  t.trigger.threshold.cntr = cntr;
  t.trigger.threshold.threshold = 1;
  fi_msg_atomic m{&ioc, nullptr, 1, p.a_to_b, &rma, 1, FI_UINT64, FI_SUM, &t, 0};
  CHECK_RET(fi_atomicmsg(p.a.ep, &m, FI_TRIGGER | FI_COMPLETION), 0);
  Completion early;
  CHECK(!c.Poll(p.a.tx, &early, 200), "the triggered atomic completed below its threshold");
  uint64_t v = 0;
  std::memcpy(&v, target, 8);
  CHECK(v == 0, "the target changed below the threshold");
  CHECK_RET(fi_cntr_add(cntr, 1), 0);
  const Completion done = c.Wait(p.a.tx, "triggered atomic");
  CHECK(!done.error, "the triggered atomic failed: " << Err(-done.err.err));
  CHECK(done.entry.op_context == &t, "op_context is not the triggered context");
  std::memcpy(&v, target, 8);
  CHECK(v == 1, "the target holds " << v << " after the triggered FI_SUM of 1");
}

}  // namespace bypass::fi::conformance
