// Event queues: events written by the application and the FI_AV_COMPLETE
// events of asynchronous AV inserts, read in order (fi_eq_sread sleeps on
// the EQ's wait object until one is added).
#include "fabric/fi/eq.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "driver/clock.h"
#include "fabric/fi/fabric.h"
#include "fabric/fi/msg_ep.h"
#include "fabric/fi/services.h"

namespace bypass::fi {
namespace {

constexpr size_t kDefaultEqSize = 256;
// fi_eq_sread's naps between reads while connections are being managed.
constexpr uint64_t kCmNapNs = 200'000;

int EqClose(fid* f) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  if (eq->obj.refs.load() > 0) return -FI_EBUSY;
  eq->wait.Close();
  if (eq->wait.set() != nullptr) LeaveWaitSet(eq->wait.set(), &eq->fid.fid);
  {
    std::lock_guard<std::mutex> lock(eq->mu);
    eq->events.clear();
  }
  eq->fabric->obj.refs.fetch_sub(1);
  eq->obj.magic = Obj::kDead;
  Retire(eq);
  return 0;
}

int EqControl(fid* f, int command, void* arg) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  return eq->wait.Control(command, arg);
}

fi_ops g_eq_fi_ops = {
    .size = sizeof(fi_ops),
    .close = EqClose,
    .bind = NoSysBind,
    .control = EqControl,
    .ops_open = NoSysOpsOpen,
    .tostr = NoSysTostr,
    .ops_set = NoSysOpsSet,
};

ssize_t EqRead(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  if (event == nullptr || (buf == nullptr && len > 0)) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_PEEK)) != 0) return -FI_EBADFLAGS;
  ProgressCm(eq);  // connection events come from the endpoints' progress
  std::lock_guard<std::mutex> lock(eq->mu);
  if (eq->events.empty()) return -FI_EAGAIN;
  const EqEvent& ev = eq->events.front();
  if (ev.error) return -FI_EAVAIL;
  if (len < ev.bytes.size()) return -FI_ETOOSMALL;
  *event = ev.event;
  if (!ev.bytes.empty()) std::memcpy(buf, ev.bytes.data(), ev.bytes.size());  // fi_eq_write of 0 bytes
  const auto n = static_cast<ssize_t>(ev.bytes.size());
  if (!(flags & FI_PEEK)) eq->events.pop_front();
  return n;
}

ssize_t EqReadErr(fid_eq* f, fi_eq_err_entry* buf, uint64_t flags) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  if (buf == nullptr) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_PEEK)) != 0) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> lock(eq->mu);
  if (eq->events.empty() || !eq->events.front().error) return -FI_EAGAIN;
  const EqEvent& ev = eq->events.front();
  if (ev.binary) {  // a connection error's err_data: the peer's bytes (fi_reject's data)
    CopyErrBytes(eq->fabric->api_version, ev.err, ev.err_bytes.data(), ev.err_bytes.size(),
                 eq->last_error, buf);
  } else {
    CopyErrData(eq->fabric->api_version, ev.err, ev.message, eq->last_error, buf);
  }
  if (!(flags & FI_PEEK)) eq->events.pop_front();
  return sizeof(*buf);
}

ssize_t EqWrite(fid_eq* f, uint32_t event, const void* buf, size_t len, uint64_t flags) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  if (buf == nullptr && len > 0) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  EqEvent ev;
  ev.event = event;
  ev.bytes.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + len);
  if (!EqPush(eq, std::move(ev))) return -FI_EAGAIN;
  return static_cast<ssize_t>(len);
}

// Sleeps until an event is added (fi_eq_write, an AV insert, a failure the
// progress path reports) or timeout milliseconds pass (-FI_EAGAIN).
ssize_t EqSRead(fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags) {
  Eq* eq = AsEq(f);
  if (eq == nullptr) return BadFid(f, FI_CLASS_EQ);
  ssize_t ret = -FI_EAGAIN;
  const auto read = [&] {
    ret = EqRead(f, event, buf, len, flags);
    return ret != -FI_EAGAIN;
  };
  const uint64_t deadline = DeadlineAfterMs(timeout);
  if (!HasCm(eq)) {
    SleepUntil(&eq->wait, &eq->fid.fid, deadline, read);
    return ret;
  }
  // Connection events come from progress that reading does (ProgressCm):
  // sleep in short naps, reading between them.
  const driver::Clock& clock = driver::SteadyClock::Get();
  while (!SleepUntil(&eq->wait, &eq->fid.fid, std::min(deadline, clock.NowNs() + kCmNapNs), read) &&
         clock.NowNs() < deadline) {
  }
  return ret;
}

const char* EqStrerror(fid_eq*, int prov_errno, const void* err_data, char* buf, size_t len) {
  return ErrorText(prov_errno, err_data, buf, len);
}

fi_ops_eq g_eq_ops = {
    .size = sizeof(fi_ops_eq),
    .read = EqRead,
    .readerr = EqReadErr,
    .write = EqWrite,
    .sread = EqSRead,
    .strerror = EqStrerror,
};

}  // namespace

bool EqPush(Eq* eq, EqEvent ev) {
  {
    std::lock_guard<std::mutex> lock(eq->mu);
    if (eq->events.size() >= eq->capacity) return false;
    eq->events.push_back(std::move(ev));
  }
  eq->wait.Signal();
  return true;
}

bool EqPushError(Eq* eq, fid_t fid, void* context, fi_addr_t addr, int err, int prov_errno,
                 const char* message) {
  EqEvent ev;
  ev.error = true;
  ev.err.fid = fid;
  ev.err.context = context;
  ev.err.data = addr;
  ev.err.err = err;
  ev.err.prov_errno = prov_errno;
  std::snprintf(ev.message, sizeof(ev.message), "%s", message);
  return EqPush(eq, std::move(ev));
}

int OpenEq(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** out, void* context) {
  Fabric* fab = AsFabric(fabric);
  if (fab == nullptr) return BadFid(fabric, FI_CLASS_FABRIC);
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  int err;
  WaitSet* ws = AttrWaitSet(RawEnum(attr->wait_obj), attr->wait_set, &err);
  if (err != 0) return err;
  if ((attr->flags & ~static_cast<uint64_t>(FI_WRITE)) != 0) return -FI_EBADFLAGS;
  auto eq = std::make_unique<Eq>();
  std::memset(&eq->fid, 0, sizeof(eq->fid));
  eq->fid.fid.fclass = FI_CLASS_EQ;
  eq->fid.fid.context = context;
  eq->fid.fid.ops = &g_eq_fi_ops;
  eq->fid.ops = &g_eq_ops;
  eq->fabric = fab;
  eq->capacity = attr->size == 0 ? kDefaultEqSize : attr->size;
  if (int ret = eq->wait.Init(RawEnum(attr->wait_obj), ws); ret != 0) return ret;
  if (ws != nullptr) JoinWaitSet(ws, &eq->fid.fid);
  fab->obj.refs.fetch_add(1);
  *out = &eq.release()->fid;
  return 0;
}

}  // namespace bypass::fi
