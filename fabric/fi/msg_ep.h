// Connected endpoints (FI_EP_MSG, fi_cm(3)): passive endpoints (fi_passive_ep,
// fi_listen, fi_reject) and the connection state of an FI_EP_MSG endpoint
// (fi_connect, fi_accept, fi_shutdown, fi_getpeer). A connecting endpoint is
// an RDM endpoint (ep.h: its own rdm::Endpoint); an accepted one shares its
// listener's (its port: one engine endpoint, a session per connected peer,
// completions routed to each connection by peer). Either way its one peer
// is fixed when the connection is made; the data calls take that peer and
// ignore their address argument. The connection manager's messages (cm.h) ride
// the engine as tagged injects; their events go to the EQ bound to the
// endpoint, and reading that EQ progresses the endpoints and passive
// endpoints bound to it. README.md ("Connected endpoints").
#ifndef BYPASS_FABRIC_FI_MSG_EP_H_
#define BYPASS_FABRIC_FI_MSG_EP_H_

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#include <vector>

#include "fabric/rdm/types.h"

namespace bypass::fi {

struct Ep;
struct Eq;
struct MsgConn;
struct MsgPort;

// fi_passive_ep.
int OpenPep(fid_fabric* fabric, fi_info* info, fid_pep** pep, void* context);

// The hooks of ep.cc: fi_endpoint of an FI_EP_MSG endpoint (info->handle
// may be a connection request to accept), its fi_enable (after the engine
// endpoint exists: -FI_ENOEQ without an EQ), its fi_close (CloseMsg before
// the endpoint lingers: tells a connected peer; FreeMsg once the engine
// endpoint is gone).
int OpenMsg(Ep* ep, const fi_info* info);
int EnableMsg(Ep* ep);
void CloseMsg(Ep* ep);
void FreeMsg(Ep* ep);

// An accepted connection shares its listener's port (Ep::shares, set by
// OpenMsg): fi_enable puts its peer in the listener's engine and routes
// that peer's completions to it (EnableSharedMsg, instead of an engine
// endpoint of its own; REQUIRES: its domain's and its lock). Its close
// tells a connected peer, waits for the acknowledgement (at most 1 s),
// removes the peer and leaves the port (LeaveSharedPort, REQUIRES: its
// lock); the port it returns, when it was the last one out, is closed by
// CloseSharedPort once no guard of its lock is held.
int EnableSharedMsg(Ep* ep);
MsgPort* LeaveSharedPort(Ep* ep);
void CloseSharedPort(MsgPort* port);

// The data path's destination (ep_ops.cc): for a connected endpoint its
// peer's fi_addr in *dest whatever was given, -FI_ENOTCONN before the
// connection or after it ended; 0 and *dest untouched for other endpoints.
int MsgDest(const Ep* ep, fi_addr_t* dest);

// The hooks of progress.cc: an engine completion, error or peer failure of
// a connected endpoint that belongs to the connection manager (true: taken).
bool MsgCompletion(Ep* ep, const rdm::Completion& c);
bool MsgError(Ep* ep, const rdm::ErrorCompletion& ec);
bool MsgPeerFailure(Ep* ep, const rdm::PeerFailure& f);

// Connections sharing their listener's port (progress.cc): on a listening
// endpoint l, the connections on its engine (null for any other
// endpoint), and the endpoint a completion c (null: a failure of peer)
// of that engine belongs to: l (its connection requests), the connection
// of the peer, or null (a connection since closed: dropped).
// REQUIRES: l's lock.
const std::vector<Ep*>* SharedMembers(const Ep* l);
// After a pass of l's engine: removes the peers of closed connections
// whose SHUTDOWN is acknowledged (or that the peer timeout gave up).
void TendSharedPort(Ep* l);
Ep* RouteShared(Ep* l, const rdm::Completion* c, rdm::PeerId peer);

// fi_eq_read's progress (eq.cc): the passive and connected endpoints bound
// to eq. Whether eq has any (fi_eq_sread then polls rather than sleeps).
void ProgressCm(Eq* eq);
bool HasCm(Eq* eq);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_MSG_EP_H_
