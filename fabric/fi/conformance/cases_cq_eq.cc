// fi_cq(3) and fi_eq(3): formats, readfrom, readerr and its err_data rules
// (including err_data_size 0 and api < 1.5), strerror, selective
// completion, one completion per operation, delivery complete; EQ write,
// read, peek and readerr.
#include <netinet/in.h>

#include <cstring>
#include <map>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

constexpr uint64_t kTag = 0x1234;
constexpr uint64_t kData = 0xfeed;

size_t EntrySize(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
      return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
      return sizeof(fi_cq_data_entry);
    default:
      return sizeof(fi_cq_tagged_entry);
  }
}

// Two receives complete in `format`, read two at a time into an array of
// that format's entries: each entry sits at its own stride with its fields.
void FormatCase(Ctx& c, fi_cq_format format) {
  fi_info* h = c.Hints(FI_MSG | FI_TAGGED);
  h->domain_attr->cq_data_size = 4;
  EpOpts o;
  o.format = format;
  Pair p = c.OpenPair(h, o);
  CHECK(p.a.info->domain_attr->cq_data_size >= 4, "cq_data_size is " << p.a.info->domain_attr->cq_data_size);
  static char in[2][16];
  static char out[2][8] = {"one", "two"};
  int ctx[2];
  for (int i = 0; i < 2; ++i) {
    CHECK_RET(fi_trecv(p.b.ep, in[i], sizeof in[i], nullptr, FI_ADDR_UNSPEC, kTag, 0, &ctx[i]), 0);
  }
  for (int i = 0; i < 2; ++i) {
    c.Post("fi_tsenddata",
           [&] { return fi_tsenddata(p.a.ep, out[i], sizeof out[i], nullptr, kData + i, p.a_to_b, kTag, nullptr); });
  }
  const size_t size = EntrySize(format);
  std::vector<char> entries(2 * size + 64, '\x5a');
  size_t got = 0;
  for (int pass = 0; got < 2; ++pass) {
    const ssize_t n = fi_cq_read(p.b.rx, entries.data() + got * size, 2 - got);
    if (n > 0) got += n;
    CHECK(n > 0 || n == -FI_EAGAIN, "fi_cq_read returned " << Err(n));
    CHECK(pass < 10000000, "hang: the two receives do not complete");
    c.Progress();
  }
  CHECK(entries[2 * size] == '\x5a', "fi_cq_read wrote past two entries of format " << format);
  for (int i = 0; i < 2; ++i) {
    fi_cq_tagged_entry e{};
    std::memcpy(&e, entries.data() + i * size, size);
    const int k = e.op_context == &ctx[0] ? 0 : e.op_context == &ctx[1] ? 1 : -1;
    CHECK(k >= 0, "entry " << i << "'s op_context is not a receive's context (format " << format << ")");
    if (format == FI_CQ_FORMAT_CONTEXT) continue;
    CHECK((e.flags & FI_RECV) && (e.flags & FI_TAGGED), "entry " << i << "'s flags 0x" << std::hex << e.flags);
    CHECK(e.len == 8, "entry " << i << "'s len is " << e.len);
    if (format == FI_CQ_FORMAT_MSG) continue;
    CHECK(e.flags & FI_REMOTE_CQ_DATA, "entry " << i << " lacks FI_REMOTE_CQ_DATA");
    CHECK(e.buf == in[k] || e.buf == nullptr, "entry " << i << "'s buf is not the receive buffer");
    CHECK(e.data == kData + (std::memcmp(in[k], "one", 4) == 0 ? 0 : 1), "entry " << i << "'s data " << e.data);
    if (format == FI_CQ_FORMAT_DATA) continue;
    CHECK(e.tag == kTag, "entry " << i << "'s tag is 0x" << std::hex << e.tag);
  }
}

// A posted receive, then cancelled: its error completion waits in rx.
void CancelledRecv(Ep& e, void* ctx) {
  static char buf[64];
  CHECK_RET(fi_recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, ctx), 0);
  CHECK_RET(fi_cancel(&e.ep->fid, ctx), 0);
}

// Progresses until rx answers -FI_EAVAIL, then reads the error with `err`.
void ReadErr(Ctx& c, fid_cq* rx, fi_cq_err_entry* err) {
  Completion none;
  for (int pass = 0;; ++pass) {
    fi_cq_tagged_entry e;
    const ssize_t n = fi_cq_read(rx, &e, 1);
    if (n == -FI_EAVAIL) break;
    CHECK(n == -FI_EAGAIN, "fi_cq_read answered " << Err(n) << " while an error was due");
    CHECK(pass < 10000000, "hang: no error completion (-FI_EAVAIL)");
    c.Progress();
  }
  CHECK_RET(fi_cq_readerr(rx, err, 0), 1);
}

// The receive-truncation error with err_data given as `user`/`size`.
fi_cq_err_entry TruncErr(Ctx& c, Pair& p, void* user, size_t size) {
  static char small[4];
  static char big[64] = "truncated";
  static int rctx;
  CHECK_RET(fi_recv(p.b.ep, small, sizeof small, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
  c.Post("fi_send", [&] { return fi_send(p.a.ep, big, sizeof big, nullptr, p.a_to_b, nullptr); });
  fi_cq_err_entry err{};
  err.err_data = user;
  err.err_data_size = size;
  ReadErr(c, p.b.rx, &err);
  CHECK(err.op_context == &rctx, "the error's op_context is not the receive's");
  return err;
}

}  // namespace

CONFORMANCE_CASE(cq_format_context, kShm) { FormatCase(c, FI_CQ_FORMAT_CONTEXT); }
CONFORMANCE_CASE(cq_format_msg, kShm) { FormatCase(c, FI_CQ_FORMAT_MSG); }
CONFORMANCE_CASE(cq_format_data, kShm) { FormatCase(c, FI_CQ_FORMAT_DATA); }
CONFORMANCE_CASE(cq_format_tagged, kShm) { FormatCase(c, FI_CQ_FORMAT_TAGGED); }

// With FI_SOURCE, fi_cq_readfrom answers the sender's fi_addr.
CONFORMANCE_CASE(cq_readfrom_source, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_MSG | FI_SOURCE));
  static char in[8], out[8] = "src";
  CHECK_RET(fi_recv(p.b.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_send", [&] { return fi_send(p.a.ep, out, sizeof out, nullptr, p.a_to_b, nullptr); });
  const Completion r = c.Wait(p.b.rx, "the receive", /*readfrom=*/true);
  CHECK(!r.error, "the receive failed");
  CHECK(r.src == p.b_to_a, "fi_cq_readfrom answers " << r.src << ", the sender is " << p.b_to_a);
}

// "If FI_SOURCE is specified without FI_SOURCE_ERR, source addresses which
// cannot be mapped ... will be reported as FI_ADDR_NOTAVAIL".
CONFORMANCE_CASE(cq_readfrom_unknown_source, kShm) {
  fi_info* h = c.Hints(FI_MSG | FI_SOURCE);
  Pair p = c.OpenPair(h);
  // A third endpoint b has never inserted.
  fid_domain* d = c.Domain(c.Fabric(p.a.info), p.a.info);
  Ep stranger = c.OpenEp(d, p.a.info);
  const fi_addr_t to_b = c.Insert(stranger.av, p.b.name);
  static char in[8], out[8] = "who";
  CHECK_RET(fi_recv(p.b.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("fi_send", [&] { return fi_send(stranger.ep, out, sizeof out, nullptr, to_b, nullptr); });
  const Completion r = c.Wait(p.b.rx, "the receive", /*readfrom=*/true);
  CHECK(!r.error, "the receive failed: " << Err(-r.err.err));
  CHECK(r.src == FI_ADDR_NOTAVAIL, "fi_cq_readfrom answers " << r.src << " for a sender not in the AV");
}

// FI_SOURCE_ERR (fi_getinfo(3), fi_cq(3) FI_EADDRNOTAVAIL): a message from
// a sender not in the AV is an error entry with the completion's fields and
// the sender's address as err_data; inserted into the AV, that address is
// the source of the sender's next message.
CONFORMANCE_CASE(cq_source_err_unknown_sender, kShm) {
  fi_info* h = c.Hints(FI_MSG | FI_SOURCE | FI_SOURCE_ERR);
  Pair p = c.OpenPair(h);
  CHECK(p.b.info->caps & FI_SOURCE_ERR, "fi_getinfo dropped FI_SOURCE_ERR");
  fid_domain* d = c.Domain(c.Fabric(p.a.info), p.a.info);
  Ep stranger = c.OpenEp(d, p.a.info);
  const fi_addr_t to_b = c.Insert(stranger.av, p.b.name);
  static char in[2][8], out[8] = "who";
  static int ctx[2];
  for (int i = 0; i < 2; ++i) {
    CHECK_RET(fi_recv(p.b.ep, in[i], sizeof in[i], nullptr, FI_ADDR_UNSPEC, &ctx[i]), 0);
  }
  c.Post("fi_send", [&] { return fi_send(stranger.ep, out, sizeof out, nullptr, to_b, nullptr); });
  const Completion r = c.Wait(p.b.rx, "the receive", /*readfrom=*/true);
  CHECK(r.error, "the message of a sender not in the AV completed without an error entry");
  CHECK(r.err.err == FI_EADDRNOTAVAIL, "err is " << Err(-r.err.err) << ", not FI_EADDRNOTAVAIL");
  CHECK(r.err.op_context == &ctx[0], "op_context is not the receive's");
  CHECK((r.err.flags & FI_RECV) && r.err.len == sizeof out, "flags or len of the completion lost");
  CHECK(std::strcmp(in[0], "who") == 0, "the data did not land");
  CHECK(r.err.err_data != nullptr && r.err.err_data_size > 0, "no source address in err_data");
  std::vector<char> addr(static_cast<const char*>(r.err.err_data),
                         static_cast<const char*>(r.err.err_data) + r.err.err_data_size);
  fi_addr_t back = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_insert(p.b.av, addr.data(), 1, &back, 0, nullptr), 1);
  c.Post("fi_send", [&] { return fi_send(stranger.ep, out, sizeof out, nullptr, to_b, nullptr); });
  const Completion again = c.Wait(p.b.rx, "the second receive", /*readfrom=*/true);
  CHECK(!again.error, "the second message failed: " << Err(-again.err.err));
  CHECK(again.src == back, "the source is " << again.src << ", not the inserted " << back);
}

// A cancelled receive: fi_cq_read answers -FI_EAVAIL, fi_cq_readerr the
// entry (FI_ECANCELED, its op_context, FI_RECV), then nothing is left.
CONFORMANCE_CASE(cq_readerr_cancel, kShm) {
  Pair p = c.OpenPair(c.Hints());
  int ctx;
  CancelledRecv(p.b, &ctx);
  fi_cq_err_entry err{};
  ReadErr(c, p.b.rx, &err);
  CHECK(err.err == FI_ECANCELED, "err is " << err.err << ", not FI_ECANCELED");
  CHECK(err.op_context == &ctx, "op_context is not the receive's");
  CHECK(err.flags & FI_RECV, "flags 0x" << std::hex << err.flags << " lack FI_RECV");
  Completion extra;
  CHECK(!c.Poll(p.b.rx, &extra, 200), "a second entry follows the cancelled receive's error");
}

// A truncated receive is an FI_ETRUNC error with olen, the bytes dropped.
CONFORMANCE_CASE(cq_readerr_truncation, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const fi_cq_err_entry err = TruncErr(c, p, nullptr, 0);
  CHECK(err.err == FI_ETRUNC, "err is " << err.err << ", not FI_ETRUNC");
  CHECK(err.olen == 60, "olen is " << err.olen << ", want 60 (64 sent into 4)");
  CHECK(err.len <= 4, "len is " << err.len << " for a 4-byte buffer");
}

// err_data given (err_data_size > 0): filled in place, size set to the
// bytes copied, never more than given.
CONFORMANCE_CASE(cq_readerr_err_data_user, kShm) {
  Pair p = c.OpenPair(c.Hints());
  static char user[16];
  const fi_cq_err_entry err = TruncErr(c, p, user, sizeof user);
  CHECK(err.err_data_size <= sizeof user, "err_data_size " << err.err_data_size << " > the 16 given");
  CHECK(err.err_data_size == 0 || err.err_data == user,
        "err_data does not point at the application's buffer while err_data_size is " << err.err_data_size);
}

// "If err_data_size is 0 on input ... any buffer referenced by err_data
// will be ignored on input ... err_data will be set to a data buffer owned
// by the provider."
CONFORMANCE_CASE(cq_readerr_err_data_size0, kShm) {
  Pair p = c.OpenPair(c.Hints());
  static char sentinel[64];
  std::memset(sentinel, 0x5a, sizeof sentinel);
  const fi_cq_err_entry err = TruncErr(c, p, sentinel, 0);
  CHECK(err.err_data != sentinel, "err_data still points at the application's buffer");
  for (char ch : sentinel) CHECK(ch == 0x5a, "the application's buffer was written with err_data_size 0");
}

// "or the fabric was opened with release < 1.5": the same, and the 1.4
// entry has no err_data_size to write.
CONFORMANCE_CASE(cq_readerr_api_1_4, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->mr_mode = FI_MR_BASIC;  // 1.4's registration mode
  Pair p = c.OpenPair(h, {}, false, FI_VERSION(1, 4));
  static char user[64];
  std::memset(user, 0x5a, sizeof user);
  const fi_cq_err_entry err = TruncErr(c, p, user, sizeof user);
  CHECK(err.err_data != user, "err_data points at the application's buffer under api 1.4");
  for (char ch : user) CHECK(ch == 0x5a, "the application's buffer was written under api 1.4");
  CHECK(err.err_data_size == sizeof user, "err_data_size (not in 1.4's entry) was written: " << err.err_data_size);
}

// fi_cq_strerror answers a string, in buf when one is given.
CONFORMANCE_CASE(cq_strerror, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const fi_cq_err_entry err = TruncErr(c, p, nullptr, 0);
  char buf[64];
  std::memset(buf, 'x', sizeof buf);
  const char* s = fi_cq_strerror(p.b.rx, err.prov_errno, err.err_data, buf, sizeof buf);
  CHECK(s != nullptr, "fi_cq_strerror answered null");
  CHECK(std::memchr(buf, '\0', sizeof buf) != nullptr, "buf is not a string within its length");
}

// FI_SELECTIVE_COMPLETION: a send without FI_COMPLETION is not reported,
// one with it is.
CONFORMANCE_CASE(cq_selective_completion, kShm) {
  EpOpts o;
  o.tx_bind = FI_SELECTIVE_COMPLETION;
  Pair p = c.OpenPair(c.Hints(), o);
  static char in[2][8], out[2][8] = {"quiet", "loud"};
  int quiet, loud;
  for (auto& b : in) CHECK_RET(fi_recv(p.b.ep, b, sizeof b, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  iovec iov[2] = {{out[0], 8}, {out[1], 8}};
  fi_msg m[2] = {};
  for (int i = 0; i < 2; ++i) {
    m[i].msg_iov = &iov[i];
    m[i].iov_count = 1;
    m[i].addr = p.a_to_b;
    m[i].context = i == 0 ? static_cast<void*>(&quiet) : &loud;
  }
  c.Post("fi_sendmsg(0)", [&] { return fi_sendmsg(p.a.ep, &m[0], 0); });
  c.Post("fi_sendmsg(FI_COMPLETION)", [&] { return fi_sendmsg(p.a.ep, &m[1], FI_COMPLETION); });
  for (int i = 0; i < 2; ++i) CHECK(!c.Wait(p.b.rx, "a receive").error, "a receive failed");
  const Completion s = c.Wait(p.a.tx, "the FI_COMPLETION send");
  CHECK(!s.error, "the FI_COMPLETION send failed");
  CHECK(s.entry.op_context == &loud, "the send without FI_COMPLETION was reported");
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 200), "a second send completion (the one without FI_COMPLETION)");
}

// "error completions are generated for all operations, including those
// for which a completion was not requested".
CONFORMANCE_CASE(cq_error_despite_selective, kShm) {
  EpOpts o;
  o.rx_bind = FI_SELECTIVE_COMPLETION;
  Pair p = c.OpenPair(c.Hints(), o);
  static char buf[16];
  iovec iov{buf, sizeof buf};
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = FI_ADDR_UNSPEC;
  int ctx;
  m.context = &ctx;
  CHECK_RET(fi_recvmsg(p.b.ep, &m, 0), 0);
  CHECK_RET(fi_cancel(&p.b.ep->fid, &ctx), 0);
  fi_cq_err_entry err{};
  ReadErr(c, p.b.rx, &err);
  CHECK(err.err == FI_ECANCELED, "err is " << err.err);
}

// Every operation completes exactly once, with its own op_context, at
// sizes that take different paths (small, eager, large).
CONFORMANCE_CASE(cq_one_completion_per_op, kShm) {
  Pair p = c.OpenPair(c.Hints());
  const size_t sizes[] = {16, 6000, 300000};
  constexpr int kEach = 4;
  constexpr int kOps = 3 * kEach;
  std::vector<std::vector<char>> in(kOps), out(kOps);
  int sctx[kOps], rctx[kOps];
  for (int i = 0; i < kOps; ++i) {
    out[i].assign(sizes[i / kEach], static_cast<char>(i));
    in[i].assign(sizes[i / kEach], 0);
    c.Post("fi_trecv", [&] {
      return fi_trecv(p.b.ep, in[i].data(), in[i].size(), nullptr, FI_ADDR_UNSPEC, i, 0, &rctx[i]);
    });
  }
  for (int i = 0; i < kOps; ++i) {
    c.Post("fi_tsend",
           [&] { return fi_tsend(p.a.ep, out[i].data(), out[i].size(), nullptr, p.a_to_b, i, &sctx[i]); });
  }
  std::map<void*, int> seen;
  for (int n = 0; n < kOps; ++n) {
    const Completion s = c.Wait(p.a.tx, "send completion " + std::to_string(n + 1) + " of " + std::to_string(kOps));
    CHECK(!s.error, "a send failed: " << Err(-s.err.err));
    ++seen[s.entry.op_context];
  }
  for (int n = 0; n < kOps; ++n) {
    const Completion r = c.Wait(p.b.rx, "receive completion " + std::to_string(n + 1));
    CHECK(!r.error, "a receive failed: " << Err(-r.err.err));
    ++seen[r.entry.op_context];
  }
  for (int i = 0; i < kOps; ++i) {
    CHECK(seen[&sctx[i]] == 1, "send " << i << " (" << out[i].size() << " B) completed " << seen[&sctx[i]] << " times");
    CHECK(seen[&rctx[i]] == 1, "receive " << i << " completed " << seen[&rctx[i]] << " times");
    CHECK(in[i] == out[i], "receive " << i << " holds other bytes");
  }
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 200) && !c.Poll(p.b.rx, &extra, 200), "an extra completion after all operations");
}

namespace {

// FI_DELIVERY_COMPLETE: when the send completes, the data is in the
// receiver's buffer. Only the sender's CQ is read until then, with
// progress passes of the receiver in between.
void DeliveryCheck(Ctx& c, Pair& p, const std::function<ssize_t(const char*, size_t)>& send) {
  static char in[64];
  char out[64] = "delivered";
  CHECK_RET(fi_recv(p.b.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  c.Post("the send", [&] { return send(out, sizeof out); });
  for (int pass = 0;; ++pass) {
    fi_cq_tagged_entry e;
    const ssize_t n = fi_cq_read(p.a.tx, &e, 1);
    if (n == 1) break;
    CHECK(n == -FI_EAGAIN, "the send failed: " << Err(n));
    CHECK(pass < 10000000, "hang: the FI_DELIVERY_COMPLETE send does not complete");
    fi_cq_read(p.b.rx, nullptr, 0);
  }
  CHECK(std::memcmp(in, out, sizeof out) == 0, "the send completed before its data reached the receive buffer");
}

}  // namespace

CONFORMANCE_CASE(cq_delivery_complete_flag, kShm) {
  Pair p = c.OpenPair(c.Hints());
  DeliveryCheck(c, p, [&](const char* buf, size_t len) {
    iovec iov{const_cast<char*>(buf), len};
    fi_msg m{};
    m.msg_iov = &iov;
    m.iov_count = 1;
    m.addr = p.a_to_b;
    return fi_sendmsg(p.a.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION);
  });
}

// The same from tx_attr->op_flags in the hints, on a plain fi_send.
CONFORMANCE_CASE(cq_delivery_complete_op_flags, kShm) {
  fi_info* h = c.Hints();
  h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  Pair p = c.OpenPair(h);
  CHECK(p.a.info->tx_attr->op_flags & FI_DELIVERY_COMPLETE, "fi_getinfo dropped FI_DELIVERY_COMPLETE from op_flags");
  DeliveryCheck(c, p, [&](const char* buf, size_t len) { return fi_send(p.a.ep, buf, len, nullptr, p.a_to_b, nullptr); });
}

// The same from tx_attr->op_flags set on the entry before fi_endpoint.
CONFORMANCE_CASE(cq_delivery_complete_info_op_flags, kShm) {
  fi_info* i = c.Info(c.Hints());
  i->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  Pair p = c.PairFrom(i);
  DeliveryCheck(c, p, [&](const char* buf, size_t len) { return fi_send(p.a.ep, buf, len, nullptr, p.a_to_b, nullptr); });
}

// fi_eq_write of an event; fi_eq_read answers it, byte for byte.
CONFORMANCE_CASE(eq_write_read, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_eq* eq = c.Eq(c.Fabric(i));
  fi_eq_entry in{};
  in.fid = &eq->fid;
  in.context = &in;
  in.data = 77;
  CHECK_RET(fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 0), sizeof in);
  uint32_t event = 0;
  fi_eq_entry out{};
  CHECK_RET(fi_eq_read(eq, &event, &out, sizeof out, 0), sizeof out);
  CHECK(event == FI_NOTIFY, "event " << event);
  CHECK(out.fid == in.fid && out.context == in.context && out.data == 77, "the event's entry differs");
  CHECK_RET(fi_eq_read(eq, &event, &out, sizeof out, 0), -FI_EAGAIN);
}

// FI_PEEK leaves the event for the next read.
CONFORMANCE_CASE(eq_peek, kShm) {
  fi_info* i = c.Info(c.Hints());
  fid_eq* eq = c.Eq(c.Fabric(i));
  fi_eq_entry in{};
  in.data = 5;
  CHECK_RET(fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 0), sizeof in);
  uint32_t event;
  fi_eq_entry out{};
  CHECK_RET(fi_eq_read(eq, &event, &out, sizeof out, FI_PEEK), sizeof out);
  CHECK_RET(fi_eq_read(eq, &event, &out, sizeof out, 0), sizeof out);
  CHECK(out.data == 5, "data " << out.data);
  CHECK_RET(fi_eq_read(eq, &event, &out, sizeof out, 0), -FI_EAGAIN);
}

namespace {

// An FI_EVENT AV bound to an EQ, after an asynchronous insert of a good
// and a bad address with context `ctx`.
struct AsyncAv {
  fid_eq* eq;
  fid_av* av;
};

AsyncAv InsertAsync(Ctx& c, void* ctx) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  fi_info* i = c.Info(h);
  fid_fabric* f = c.Fabric(i);
  fid_domain* d = c.Domain(f, i);
  AsyncAv a;
  a.eq = c.Eq(f);
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.flags = FI_EVENT;
  CHECK_RET(fi_av_open(d, &attr, &a.av, nullptr), 0);
  c.Own(&a.av->fid);
  CHECK_RET(fi_av_bind(a.av, &a.eq->fid, 0), 0);
  sockaddr_in addrs[2] = {};
  addrs[0].sin_family = AF_INET;
  addrs[0].sin_port = htons(47301);
  addrs[0].sin_addr.s_addr = htonl(0x0a0b0c0d);
  addrs[1].sin_family = 0x7f7f;  // not an address
  fi_addr_t out[2];
  CHECK_RET(fi_av_insert(a.av, addrs, 2, out, 0, ctx), 0);
  return a;
}

// The next answer of fi_eq_read, once there is one.
ssize_t NextEvent(fid_eq* eq, uint32_t* event, fi_eq_entry* e) {
  for (int pass = 0;; ++pass) {
    const ssize_t r = fi_eq_read(eq, event, e, sizeof *e, 0);
    if (r != -FI_EAGAIN) return r;
    CHECK(pass < 10000000, "hang: no event for the asynchronous insert");
  }
}

}  // namespace

// FI_EVENT AV: "one EQ error entry ... for each failed address insertion,
// followed by one non-error event": fi_eq_read answers -FI_EAVAIL,
// fi_eq_readerr the entry (the AV's fid, the insert's context, the failed
// index in data), then FI_AV_COMPLETE with the count inserted.
CONFORMANCE_CASE(eq_readerr_av_event, kTcp) {
  int ctx;
  const AsyncAv a = InsertAsync(c, &ctx);
  uint32_t event = 0;
  fi_eq_entry e{};
  const ssize_t r = NextEvent(a.eq, &event, &e);
  CHECK(r == -FI_EAVAIL, "the first read answers " << Err(r) << " (event " << event << ", data " << e.data
                                                  << "), not -FI_EAVAIL for the failed address");
  fi_eq_err_entry err{};
  CHECK_RET(fi_eq_readerr(a.eq, &err, 0), sizeof err);
  CHECK(err.fid == &a.av->fid, "the error's fid is not the AV");
  CHECK(err.context == &ctx, "the error's context is not the insert's");
  CHECK(err.data == 1, "the error's data (failed index) is " << err.data);
  CHECK(err.err != 0, "the error's err is 0");
  CHECK_RET(fi_eq_read(a.eq, &event, &e, sizeof e, 0), sizeof e);
  CHECK(event == FI_AV_COMPLETE, "event " << event << ", not FI_AV_COMPLETE");
  CHECK(e.context == &ctx && e.data == 1, "FI_AV_COMPLETE's context or count (" << e.data << ") is wrong");
}

// fi_eq_readerr with err_data_size 0 leaves the application's buffer
// alone, as fi_cq_readerr does (whatever order the events come in).
CONFORMANCE_CASE(eq_readerr_err_data_size0, kTcp) {
  int ctx;
  const AsyncAv a = InsertAsync(c, &ctx);
  uint32_t event = 0;
  fi_eq_entry e{};
  ssize_t r = NextEvent(a.eq, &event, &e);
  if (r == sizeof e && event == FI_AV_COMPLETE) r = NextEvent(a.eq, &event, &e);
  CHECK(r == -FI_EAVAIL, "no error entry for the failed address: fi_eq_read answers " << Err(r));
  static char sentinel[64];
  std::memset(sentinel, 0x5a, sizeof sentinel);
  fi_eq_err_entry err{};
  err.err_data = sentinel;
  err.err_data_size = 0;
  CHECK_RET(fi_eq_readerr(a.eq, &err, 0), sizeof err);
  CHECK(err.err_data != sentinel, "err_data still points at the application's buffer");
  for (char ch : sentinel) CHECK(ch == 0x5a, "the application's buffer was written with err_data_size 0");
}

}  // namespace bypass::fi::conformance
