#include "fabric/fi/conformance/conformance.h"

#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace bypass::fi::conformance {

void Fail(const char* file, int line, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  throw Failure{std::string(base != nullptr ? base + 1 : file) + ":" + std::to_string(line) + ": " + what};
}

void Refuse(const std::string& what) { throw Refused{what}; }

std::string Err(long ret) {
  if (ret >= 0) return std::to_string(ret);
  static const struct {
    int code;
    const char* name;
  } kNames[] = {
      {FI_EAGAIN, "FI_EAGAIN"},         {FI_EAVAIL, "FI_EAVAIL"},     {FI_EBUSY, "FI_EBUSY"},
      {FI_EINVAL, "FI_EINVAL"},         {FI_ENODATA, "FI_ENODATA"},   {FI_ENOSYS, "FI_ENOSYS"},
      {FI_ETOOSMALL, "FI_ETOOSMALL"},   {FI_ENOCQ, "FI_ENOCQ"},       {FI_ENOAV, "FI_ENOAV"},
      {FI_ETIMEDOUT, "FI_ETIMEDOUT"},   {FI_ECANCELED, "FI_ECANCELED"}, {FI_EACCES, "FI_EACCES"},
      {FI_EOPBADSTATE, "FI_EOPBADSTATE"}, {FI_EBADF, "FI_EBADF"},     {FI_ENOENT, "FI_ENOENT"},
      {FI_EADDRNOTAVAIL, "FI_EADDRNOTAVAIL"}, {FI_ETRUNC, "FI_ETRUNC"}, {FI_EOPNOTSUPP, "FI_EOPNOTSUPP"},
  };
  for (const auto& n : kNames) {
    if (-ret == n.code) return std::string("-") + n.name + " (" + fi_strerror(n.code) + ")";
  }
  return std::to_string(ret) + " (" + fi_strerror(static_cast<int>(-ret)) + ")";
}

namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

Ctx::~Ctx() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) fi_close(*it);
  for (fi_info* i : infos_) fi_freeinfo(i);
}

char* Ctx::Buf(size_t len, char fill) {
  bufs_.push_back(std::make_unique<char[]>(len));
  std::memset(bufs_.back().get(), fill, len);
  return bufs_.back().get();
}

fi_info* Ctx::Hints(uint64_t caps) {
  fi_info* h = fi_allocinfo();
  infos_.push_back(h);
  h->caps = caps;
  h->ep_attr->type = FI_EP_RDM;
  h->fabric_attr->prov_name = strdup(prov_.c_str());
  // Registration keys and addresses as the provider chooses; no local
  // registration (the cases pass no descriptors).
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
  return h;
}

int Ctx::TryInfo(const fi_info* hints, fi_info** out, const char* node, const char* service, uint64_t flags,
                 uint32_t version) {
  *out = nullptr;
  const int r = fi_getinfo(version, node, service, flags, hints, out);
  if (r == 0) infos_.push_back(*out);
  return r;
}

fi_info* Ctx::Info(const fi_info* hints, const char* node, const char* service, uint64_t flags,
                   uint32_t version) {
  fi_info* list = nullptr;
  const int r = TryInfo(hints, &list, node, service, flags, version);
  if (r == -FI_ENODATA) Refuse("fi_getinfo refused the hints (-FI_ENODATA)");
  CHECK(r == 0, "fi_getinfo failed: " << Err(r));
  CHECK(list != nullptr, "fi_getinfo returned 0 and no entry");
  return list;
}

fid_fabric* Ctx::Fabric(const fi_info* info) {
  fid_fabric* f = nullptr;
  CHECK_RET(fi_fabric(info->fabric_attr, &f, nullptr), 0);
  Own(&f->fid);
  return f;
}

fid_domain* Ctx::Domain(fid_fabric* fabric, fi_info* info) {
  fid_domain* d = nullptr;
  CHECK_RET(fi_domain(fabric, info, &d, nullptr), 0);
  Own(&d->fid);
  return d;
}

fid_cq* Ctx::Cq(fid_domain* domain, fi_cq_format format, fi_wait_obj wait, size_t size) {
  fi_cq_attr attr{};
  attr.format = format;
  attr.wait_obj = wait;
  attr.size = size;
  fid_cq* cq = nullptr;
  CHECK_RET(fi_cq_open(domain, &attr, &cq, nullptr), 0);
  Own(&cq->fid);
  cqs_.push_back(cq);
  return cq;
}

fid_av* Ctx::Av(fid_domain* domain, fi_av_type type) {
  fi_av_attr attr{};
  attr.type = type;
  fid_av* av = nullptr;
  CHECK_RET(fi_av_open(domain, &attr, &av, nullptr), 0);
  Own(&av->fid);
  return av;
}

fid_cntr* Ctx::Cntr(fid_domain* domain, fi_wait_obj wait) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = wait;
  fid_cntr* cntr = nullptr;
  CHECK_RET(fi_cntr_open(domain, &attr, &cntr, nullptr), 0);
  Own(&cntr->fid);
  return cntr;
}

fid_eq* Ctx::Eq(fid_fabric* fabric) {
  fi_eq_attr attr{};
  attr.wait_obj = FI_WAIT_NONE;
  attr.flags = FI_WRITE;  // fi_eq_write is used
  fid_eq* eq = nullptr;
  CHECK_RET(fi_eq_open(fabric, &attr, &eq, nullptr), 0);
  Own(&eq->fid);
  return eq;
}

Ep Ctx::OpenEp(fid_domain* domain, fi_info* info, const EpOpts& opts) {
  Ep e;
  e.info = info;
  e.domain = domain;
  e.av = opts.av != nullptr ? opts.av : Av(domain, opts.av_type);
  e.tx = Cq(domain, opts.format, opts.wait, opts.cq_size);
  e.rx = Cq(domain, opts.format, opts.wait, opts.cq_size);
  e.ep = opts.opened;
  if (e.ep == nullptr) {
    CHECK_RET(fi_endpoint(domain, info, &e.ep, nullptr), 0);
    Own(&e.ep->fid);
  }
  CHECK_RET(fi_ep_bind(e.ep, &e.av->fid, 0), 0);
  CHECK_RET(fi_ep_bind(e.ep, &e.tx->fid, FI_TRANSMIT | opts.tx_bind), 0);
  CHECK_RET(fi_ep_bind(e.ep, &e.rx->fid, FI_RECV | opts.rx_bind), 0);
  if (opts.cntr != nullptr) CHECK_RET(fi_ep_bind(e.ep, &opts.cntr->fid, opts.cntr_flags), 0);
  CHECK_RET(fi_enable(e.ep), 0);
  e.name.resize(256);
  size_t len = e.name.size();
  CHECK_RET(fi_getname(&e.ep->fid, e.name.data(), &len), 0);
  e.name.resize(len);
  return e;
}

fi_addr_t Ctx::Insert(fid_av* av, const std::vector<char>& name) {
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_insert(av, name.data(), 1, &a, 0, nullptr), 1);
  CHECK(a != FI_ADDR_NOTAVAIL, "fi_av_insert returned 1 and FI_ADDR_NOTAVAIL");
  return a;
}

Pair Ctx::OpenPair(const fi_info* hints, const EpOpts& opts, bool same_domain, uint32_t version) {
  return PairFrom(Info(hints, nullptr, nullptr, 0, version), opts, same_domain);
}

Pair Ctx::PairFrom(fi_info* info, const EpOpts& opts, bool same_domain) {
  fid_fabric* fabric = Fabric(info);
  Pair p;
  fid_domain* da = Domain(fabric, info);
  p.a = OpenEp(da, info, opts);
  p.b = OpenEp(same_domain ? da : Domain(fabric, info), info, opts);
  p.a_to_b = Insert(p.a.av, p.b.name);
  p.b_to_a = Insert(p.b.av, p.a.name);
  return p;
}

int Ctx::Close(fid* f) {
  const int r = fi_close(f);
  if (r == 0) {
    for (auto it = owned_.begin(); it != owned_.end(); ++it) {
      if (*it == f) {
        owned_.erase(it);
        break;
      }
    }
    for (auto it = cqs_.begin(); it != cqs_.end(); ++it) {
      if (&(*it)->fid == f) {
        cqs_.erase(it);
        break;
      }
    }
  }
  return r;
}

void Ctx::Progress() {
  for (fid_cq* cq : cqs_) fi_cq_read(cq, nullptr, 0);
}

bool Ctx::Poll(fid_cq* cq, Completion* out, int passes) {
  for (int i = 0; i < passes; ++i) {
    *out = Completion{};
    const ssize_t n = fi_cq_read(cq, &out->entry, 1);
    if (n == 1) return true;
    if (n == -FI_EAVAIL) {
      out->error = true;
      CHECK_RET(fi_cq_readerr(cq, &out->err, 0), 1);
      return true;
    }
    CHECK(n == -FI_EAGAIN, "fi_cq_read returned " << Err(n));
    Progress();
  }
  return false;
}

Completion Ctx::Wait(fid_cq* cq, const std::string& what, bool readfrom) {
  const double deadline = Now() + kHangSeconds;
  for (;;) {
    Completion c;
    const ssize_t n = readfrom ? fi_cq_readfrom(cq, &c.entry, 1, &c.src) : fi_cq_read(cq, &c.entry, 1);
    if (n == 1) return c;
    if (n == -FI_EAVAIL) {
      c.error = true;
      CHECK_RET(fi_cq_readerr(cq, &c.err, 0), 1);
      return c;
    }
    CHECK(n == -FI_EAGAIN, "fi_cq_read for " << what << " returned " << Err(n));
    CHECK(Now() < deadline, "hang: no completion for " << what << " within " << kHangSeconds << " s");
    Progress();
  }
}

void Ctx::WaitCntr(fid_cntr* cntr, uint64_t value, const std::string& what) {
  const double deadline = Now() + kHangSeconds;
  while (fi_cntr_read(cntr) < value) {
    CHECK(Now() < deadline, "hang: counter for " << what << " stays at " << fi_cntr_read(cntr) << " < " << value
                                                  << " for " << kHangSeconds << " s");
    Progress();
  }
}

void Ctx::Post(const std::string& what, const std::function<ssize_t()>& op) {
  const double deadline = Now() + kHangSeconds;
  for (;;) {
    const ssize_t r = op();
    if (r == 0) return;
    CHECK(r == -FI_EAGAIN, what << " returned " << Err(r));
    CHECK(Now() < deadline, "hang: " << what << " answers -FI_EAGAIN for " << kHangSeconds << " s");
    Progress();
  }
}

namespace {

int verdict_fd = -1;
char hang_verdict[256];
size_t hang_len = 0;

void OnHang(int) {
  if (write(verdict_fd, hang_verdict, hang_len) < 0) _exit(3);
  _exit(0);
}

}  // namespace

void SetVerdictFd(int fd) { verdict_fd = fd; }

HangGuard::HangGuard(int seconds, const std::string& what) {
  const std::string v = "Fhang: " + what + " did not return in " + std::to_string(seconds) + " s";
  hang_len = std::min(v.size(), sizeof hang_verdict);
  std::memcpy(hang_verdict, v.data(), hang_len);
  signal(SIGALRM, OnHang);
  alarm(seconds);
}

HangGuard::~HangGuard() { alarm(0); }

void WriteMsg(int fd, const std::string& m) {
  const uint32_t n = m.size();
  CHECK(write(fd, &n, sizeof n) == sizeof n && write(fd, m.data(), n) == static_cast<ssize_t>(n),
        "writing to the other process failed");
}

std::string ReadMsg(int fd, const char* what) {
  pollfd p{fd, POLLIN, 0};
  CHECK(poll(&p, 1, kHangSeconds * 1000) == 1, "hang: no " << what << " from the other process");
  uint32_t n = 0;
  CHECK(read(fd, &n, sizeof n) == sizeof n, "the other process ended before sending " << what);
  std::string m(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, m.data() + got, n - got);
    CHECK(r > 0, "the other process ended in the middle of " << what);
    got += r;
  }
  return m;
}

fid_ep* OpenWithCntrs(Ctx& c, fid_domain* d, fi_info* i,
                      const std::vector<std::pair<fid_cntr*, uint64_t>>& binds) {
  fid_ep* ep = nullptr;
  CHECK_RET(fi_endpoint(d, i, &ep, nullptr), 0);
  c.Own(&ep->fid);
  for (const auto& [cntr, flags] : binds) CHECK_RET(fi_ep_bind(ep, &cntr->fid, flags), 0);
  return ep;
}

uint64_t RmaAddr(const fi_info* info, const void* buf) {
  return (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0 ? reinterpret_cast<uintptr_t>(buf) : 0;
}

std::vector<CaseDef>& Cases() {
  static std::vector<CaseDef> cases;
  return cases;
}

bool Register(const char* name, const char* ref, void (*fn)(Ctx&)) {
  Cases().push_back({name, ref, fn});
  return true;
}

}  // namespace bypass::fi::conformance
