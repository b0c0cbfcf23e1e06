// The event queue (fi_eq(3)): events written by the application or by
// asynchronous AV inserts (FI_AV_COMPLETE), read with fi_eq_read or
// waited for (fi_eq_sread, the wait object of wait.h).
#ifndef BYPASS_FABRIC_FI_EQ_H_
#define BYPASS_FABRIC_FI_EQ_H_

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/fi/wait.h"

namespace bypass::fi {

struct Fabric;

// One event as fi_eq_read hands it out.
struct EqEvent {
  uint32_t event = 0;
  std::vector<uint8_t> bytes;
  bool error = false;
  fi_eq_err_entry err{};
  char message[160] = {};  // an error's err_data (fi_eq_readerr)
  // A connection error's err_data is the peer's bytes instead (fi_reject's
  // data: FI_ECONNREFUSED, msg_ep.h).
  bool binary = false;
  std::vector<uint8_t> err_bytes;
};

// An event queue; its own mutex, since it belongs to the fabric, not to a
// domain.
struct Eq {
  fid_eq fid;
  Obj obj;
  Fabric* fabric = nullptr;
  std::mutex mu;
  std::deque<EqEvent> events;
  size_t capacity = 0;
  char last_error[160] = {};  // err_data of the last readerr without a buffer
  WaitObject wait;            // signaled by every event added (wait.h)
  // Passive and connected endpoints bound to it, progressed by fi_eq_read
  // (msg_ep.h); guarded by mu.
  std::vector<fid_t> cm;
};
static_assert(offsetof(Eq, fid) == 0);

inline Eq* AsEq(const void* f) { return As<Eq>(f, FI_CLASS_EQ); }

// fi_eq_open.
int OpenEq(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);
// Adds an event to eq (cold path); false when it is full.
bool EqPush(Eq* eq, EqEvent ev);
// Adds an error event (fi_eq_readerr): err (a positive FI_* errno) and
// prov_errno about fi_addr `addr` (in err.data, as fi_eq(3) allows), with
// a one-line message (err_data); false when the EQ is full.
bool EqPushError(Eq* eq, fid_t fid, void* context, fi_addr_t addr, int err, int prov_errno,
                 const char* message);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_EQ_H_
