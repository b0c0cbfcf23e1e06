// The connected-endpoint rig of the FI_EP_MSG cases (cm_pair.h).
#include "fabric/fi/conformance/cm_pair.h"

#include <cstring>
#include <string>
#include <vector>

namespace bypass::fi::conformance {

fi_info* MsgHints(Ctx& c, uint64_t caps) {
  fi_info* h = c.Hints(caps);
  h->ep_attr->type = FI_EP_MSG;
  return h;
}

// Reads the next event of eq, progressing the other EQs and CQs (their
// reads) meanwhile. The event, or -FI_EAVAIL with *err read.
int NextEvent(Ctx& c, fid_eq* eq, const std::vector<fid_eq*>& others, fi_eq_cm_entry* entry,
              std::vector<uint8_t>* data, fi_eq_err_entry* err) {
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 512];
  HangGuard guard(kHangSeconds, "an EQ event");
  for (;;) {
    uint32_t event = 0;
    const ssize_t n = fi_eq_read(eq, &event, buf, sizeof buf, 0);
    if (n >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry))) {
      std::memcpy(entry, buf, sizeof *entry);
      if (data != nullptr) data->assign(buf + sizeof *entry, buf + n);
      return static_cast<int>(event);
    }
    if (n == -FI_EAVAIL) {
      CHECK(err != nullptr, "an unexpected EQ error");
      CHECK_RET(fi_eq_readerr(eq, err, 0), sizeof *err);
      return -FI_EAVAIL;
    }
    CHECK(n == -FI_EAGAIN, "fi_eq_read returned " << Err(n));
    for (fid_eq* o : others) {
      uint32_t e;
      fi_eq_read(o, &e, buf, sizeof buf, FI_PEEK);
    }
    c.Progress();
  }
}

Cm::Side OpenSide(Ctx& c, Cm& m, fi_info* info) {
  Cm::Side s;
  s.domain = c.Domain(m.fabric, info);
  s.eq = c.Eq(m.fabric);
  s.cq = c.Cq(s.domain, FI_CQ_FORMAT_TAGGED);
  CHECK_RET(fi_endpoint(s.domain, info, &s.ep, nullptr), 0);
  c.Own(&s.ep->fid);
  CHECK_RET(fi_ep_bind(s.ep, &s.eq->fid, 0), 0);
  CHECK_RET(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV), 0);
  CHECK_RET(fi_enable(s.ep), 0);
  return s;
}

// A listening passive endpoint and an enabled client, not yet connected.
Cm Listen(Ctx& c, uint64_t caps) {
  Cm m;
  m.info = c.Info(MsgHints(c, caps), "127.0.0.1", nullptr, FI_SOURCE);
  CHECK(m.info->ep_attr->type == FI_EP_MSG, "not an FI_EP_MSG entry");
  m.fabric = c.Fabric(m.info);
  m.pep_eq = c.Eq(m.fabric);
  CHECK_RET(fi_passive_ep(m.fabric, m.info, &m.pep, nullptr), 0);
  c.Own(&m.pep->fid);
  CHECK_RET(fi_pep_bind(m.pep, &m.pep_eq->fid, 0), 0);
  CHECK_RET(fi_listen(m.pep), 0);
  size_t len = 0;
  CHECK_RET(fi_getname(&m.pep->fid, nullptr, &len), -FI_ETOOSMALL);
  m.pep_name.resize(len);
  CHECK_RET(fi_getname(&m.pep->fid, m.pep_name.data(), &len), 0);
  fi_info* client_info = c.Info(MsgHints(c, caps));
  m.client = OpenSide(c, m, client_info);
  return m;
}

// fi_connect with data; FI_CONNREQ; the server endpoint from its info.
fi_eq_cm_entry Request(Ctx& c, Cm& m, const char* data) {
  CHECK_RET(fi_connect(m.client.ep, m.pep_name.data(), data, data ? std::strlen(data) : 0), 0);
  fi_eq_cm_entry e{};
  std::vector<uint8_t> got;
  CHECK_RET(NextEvent(c, m.pep_eq, {m.client.eq}, &e, &got), FI_CONNREQ);
  CHECK(e.fid == &m.pep->fid, "the FI_CONNREQ's fid is not the passive endpoint");
  CHECK(e.info != nullptr && e.info->handle != nullptr, "the FI_CONNREQ has no info or handle");
  if (data != nullptr) {
    CHECK(got.size() >= std::strlen(data) && std::memcmp(got.data(), data, std::strlen(data)) == 0,
          "the FI_CONNREQ's data is not the connect's (" << got.size() << " bytes)");
  }
  return e;
}

// A connected pair: connect, accept, FI_CONNECTED on both.
Cm Connected(Ctx& c, uint64_t caps) {
  Cm m = Listen(c, caps);
  fi_eq_cm_entry e = Request(c, m, nullptr);
  m.server = OpenSide(c, m, e.info);
  fi_freeinfo(e.info);
  CHECK_RET(fi_accept(m.server.ep, nullptr, 0), 0);
  CHECK_RET(NextEvent(c, m.client.eq, {m.server.eq, m.pep_eq}, &e), FI_CONNECTED);
  CHECK(e.fid == &m.client.ep->fid, "the client's FI_CONNECTED names another fid");
  CHECK_RET(NextEvent(c, m.server.eq, {m.client.eq, m.pep_eq}, &e), FI_CONNECTED);
  CHECK(e.fid == &m.server.ep->fid, "the server's FI_CONNECTED names another fid");
  return m;
}

Cm::Side Accept(Ctx& c, Cm& m, Cm::Side* client) {
  *client = OpenSide(c, m, c.Info(MsgHints(c, m.info->caps & (FI_MSG | FI_RMA | FI_ATOMIC))));
  Cm other = m;
  other.client = *client;
  fi_eq_cm_entry e = Request(c, other, nullptr);
  Cm::Side server = OpenSide(c, m, e.info);
  fi_freeinfo(e.info);
  CHECK_RET(fi_accept(server.ep, nullptr, 0), 0);
  CHECK_RET(NextEvent(c, client->eq, {server.eq, m.pep_eq}, &e), FI_CONNECTED);
  CHECK_RET(NextEvent(c, server.eq, {client->eq, m.pep_eq}, &e), FI_CONNECTED);
  return server;
}

}  // namespace bypass::fi::conformance
