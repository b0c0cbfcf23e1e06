// The connected-endpoint rig of the FI_EP_MSG cases (cases_msg.cc,
// cases_msgport.cc): a listener, connecting endpoints and the endpoints
// accepted from it, each with its EQ and one CQ, through the public API.
#ifndef BYPASS_FABRIC_FI_CONFORMANCE_CM_PAIR_H_
#define BYPASS_FABRIC_FI_CONFORMANCE_CM_PAIR_H_

#include <rdma/fi_cm.h>

#include <cstdint>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {

// A listener and a connecting endpoint of one fabric, each with its EQ, and
// the endpoint accepted from the listener, each with one CQ.
struct Cm {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_eq* pep_eq = nullptr;
  fid_pep* pep = nullptr;
  std::vector<char> pep_name;
  struct Side {
    fid_domain* domain = nullptr;
    fid_eq* eq = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
  } client, server;
};

// FI_EP_MSG hints with caps.
fi_info* MsgHints(Ctx& c, uint64_t caps = FI_MSG);
// Reads the next event of eq, progressing the other EQs and CQs (their
// reads) meanwhile. The event, or -FI_EAVAIL with *err read.
int NextEvent(Ctx& c, fid_eq* eq, const std::vector<fid_eq*>& others, fi_eq_cm_entry* entry,
              std::vector<uint8_t>* data = nullptr, fi_eq_err_entry* err = nullptr);
// An enabled endpoint of info on a domain of its own, with its EQ and CQ.
Cm::Side OpenSide(Ctx& c, Cm& m, fi_info* info);
// A listening passive endpoint and an enabled client, not yet connected.
Cm Listen(Ctx& c, uint64_t caps = FI_MSG);
// fi_connect of m.client with data; the FI_CONNREQ (its info the caller's).
fi_eq_cm_entry Request(Ctx& c, Cm& m, const char* data);
// A connected pair: connect, accept, FI_CONNECTED on both.
Cm Connected(Ctx& c, uint64_t caps = FI_MSG);
// One more connection to m's listener: a new client (*client) and the
// endpoint accepted for it, both connected.
Cm::Side Accept(Ctx& c, Cm& m, Cm::Side* client);

}  // namespace bypass::fi::conformance

#endif  // BYPASS_FABRIC_FI_CONFORMANCE_CM_PAIR_H_
