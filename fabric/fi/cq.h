// The completion queue (fi_cq(3)): the entries the progress path
// (progress.h) and datagram endpoints (dgram.h) deliver, read in the
// application's format; reading progresses every endpoint bound to it;
// its wait object (wait.h) is signaled by every entry added.
#ifndef BYPASS_FABRIC_FI_CQ_H_
#define BYPASS_FABRIC_FI_CQ_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <cstddef>
#include <vector>

#include "fabric/fi/common.h"
#include "fabric/fi/wait.h"

namespace bypass::fi {

struct Domain;
struct Ep;

// A completion as the CQ stores it: the widest format plus its source.
struct CqEntry {
  fi_cq_tagged_entry e;
  fi_addr_t src;
};
// A failed operation as the CQ stores it, with the one-line message that
// fi_cq_readerr hands out as err_data.
struct CqError {
  fi_cq_err_entry e;
  fi_addr_t src;
  char message[160];
  // FI_SOURCE_ERR (FI_EADDRNOTAVAIL): err_data is the sender's address in
  // the domain's format, not the message.
  uint8_t source[32];
  size_t source_len = 0;
};

// A completion queue of one domain.
struct Cq {
  fid_cq fid;
  Obj obj;
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  size_t entry_size = sizeof(fi_cq_entry);
  size_t capacity = 0;
  Ring<CqEntry> entries;      // bounded by capacity
  Ring<CqError> errors;       // bounded by capacity
  char last_error[160] = {};  // err_data of the last readerr without a buffer
  std::vector<Ep*> eps;       // progressed by every read
  std::atomic<bool> signaled{false};  // fi_cq_signal: the next sread returns -FI_EAGAIN
  WaitObject wait;                    // signaled by every entry added (wait.h)
  // attr->wait_cond: FI_CQ_COND_THRESHOLD makes an sread's cond the number
  // of entries to wait for (as a value, as providers read it).
  bool threshold = false;
  // The lock of the endpoints it serves, which a read takes: the domain's,
  // or the queue's of a scalable endpoint's context (ep.cc, ServesLock).
  std::atomic<DomainLock*> lock{nullptr};

  size_t room() const { return capacity - entries.size(); }
};
static_assert(offsetof(Cq, fid) == 0);

inline Cq* AsCq(const void* f) { return As<Cq>(f, FI_CLASS_CQ); }

// fi_cq_open.
int OpenCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_CQ_H_
