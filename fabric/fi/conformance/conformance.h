// The man-page conformance suite: an ordinary libfabric application (Debian's
// libfabric) that runs each case against bypass and against a reference
// provider. A case is a function over a Ctx; it fails by throwing (CHECK),
// so the runner can run it in a child process of its own and judge the
// outcome against the ledger (fabric/fi/CONFORMANCE.md).
#ifndef BYPASS_FABRIC_FI_CONFORMANCE_CONFORMANCE_H_
#define BYPASS_FABRIC_FI_CONFORMANCE_CONFORMANCE_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace bypass::fi::conformance {

inline constexpr uint32_t kApi = FI_VERSION(1, 17);
inline constexpr char kBypass[] = "bypass";
// The reference providers: shm for most rows, tcp (under ofi_rxm for
// FI_EP_RDM) for addressing rows, since shm has no FI_SOCKADDR_IN.
inline constexpr char kShm[] = "shm";
inline constexpr char kTcp[] = "tcp;ofi_rxm";
// Ends a wait that would otherwise hang; never a measure of speed.
inline constexpr int kHangSeconds = 10;

// A case's failure, or fi_getinfo refusing what the case needs.
struct Failure {
  std::string what;
};
struct Refused {
  std::string what;
};

[[noreturn]] void Fail(const char* file, int line, const std::string& what);
[[noreturn]] void Refuse(const std::string& what);
std::string Err(long ret);  // "-FI_EAGAIN (Resource temporarily unavailable)"

#define CONF_MSG(msg) ([&] { std::ostringstream conf_s; conf_s << msg; return conf_s.str(); }())
#define CHECK(cond, msg)                                                          \
  do {                                                                            \
    if (!(cond)) ::bypass::fi::conformance::Fail(__FILE__, __LINE__, CONF_MSG(msg)); \
  } while (0)
// A call that must return `want` (0, a count, or a -FI_E* code).
#define CHECK_RET(call, want)                                                            \
  do {                                                                                   \
    const long conf_r = static_cast<long>(call);                                         \
    if (conf_r != static_cast<long>(want))                                               \
      ::bypass::fi::conformance::Fail(__FILE__, __LINE__,                                \
                                      CONF_MSG(#call << " returned " << ::bypass::fi::conformance::Err(conf_r) \
                                                     << ", want " << ::bypass::fi::conformance::Err(want))); \
  } while (0)

// One completion read from a CQ (in the widest format), or its error entry.
struct Completion {
  bool error = false;
  fi_cq_tagged_entry entry{};
  fi_cq_err_entry err{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
};

// An endpoint with its domain's AV and CQs (bound TRANSMIT and RECV).
struct Ep {
  fi_info* info = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* tx = nullptr;
  fid_cq* rx = nullptr;
  fid_ep* ep = nullptr;
  std::vector<char> name;  // fi_getname after enable
};

struct EpOpts {
  fi_cq_format format = FI_CQ_FORMAT_TAGGED;
  uint64_t tx_bind = 0;  // added to FI_TRANSMIT, e.g. FI_SELECTIVE_COMPLETION
  uint64_t rx_bind = 0;
  fi_av_type av_type = FI_AV_TABLE;
  fid_av* av = nullptr;  // share this AV instead of opening one
  fid_cntr* cntr = nullptr;  // also bound, with cntr_flags (FI_SEND, ...)
  uint64_t cntr_flags = 0;
  fid_ep* opened = nullptr;  // an endpoint already opened (op_flags set, ...)
  fi_wait_obj wait = FI_WAIT_NONE;  // the CQs' wait object
  size_t cq_size = 0;               // the CQs' size (0: the provider's)
};

// Two endpoints that know each other: a on one domain, b on another (or on
// the same domain with same_domain), each address inserted in the other's AV.
struct Pair {
  Ep a, b;
  fi_addr_t a_to_b = FI_ADDR_NOTAVAIL, b_to_a = FI_ADDR_NOTAVAIL;
};

class Ctx {
 public:
  explicit Ctx(std::string prov) : prov_(std::move(prov)) {}
  ~Ctx();
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;

  const std::string& prov() const { return prov_; }
  bool bypass() const { return prov_ == kBypass; }

  // RDM hints for this provider; the case adds to them (owned by the Ctx).
  fi_info* Hints(uint64_t caps = FI_MSG);
  // fi_getinfo's raw return, its list owned by the Ctx.
  int TryInfo(const fi_info* hints, fi_info** out, const char* node = nullptr, const char* service = nullptr,
              uint64_t flags = 0, uint32_t version = kApi);
  // The first entry; Refuse on -FI_ENODATA, Fail on another error.
  fi_info* Info(const fi_info* hints, const char* node = nullptr, const char* service = nullptr,
                uint64_t flags = 0, uint32_t version = kApi);

  fid_fabric* Fabric(const fi_info* info);
  fid_domain* Domain(fid_fabric* fabric, fi_info* info);
  fid_cq* Cq(fid_domain* domain, fi_cq_format format, fi_wait_obj wait = FI_WAIT_NONE,
             size_t size = 0);
  fid_av* Av(fid_domain* domain, fi_av_type type);
  fid_cntr* Cntr(fid_domain* domain, fi_wait_obj wait = FI_WAIT_NONE);
  fid_eq* Eq(fid_fabric* fabric);
  // Opens (unless opts.opened), binds (AV, CQs, counter) and enables an
  // endpoint.
  Ep OpenEp(fid_domain* domain, fi_info* info, const EpOpts& opts = {});
  // An enabled pair from `hints` (same fabric; two domains unless same_domain).
  Pair OpenPair(const fi_info* hints, const EpOpts& opts = {}, bool same_domain = false,
                uint32_t version = kApi);
  // The same from an entry the case has adjusted (op_flags, ...).
  Pair PairFrom(fi_info* info, const EpOpts& opts = {}, bool same_domain = false);
  fi_addr_t Insert(fid_av* av, const std::vector<char>& name);

  // Memory for operations: it stays valid until every object of the case
  // is closed (an endpoint's close may still deliver into a receive buffer
  // or answer a read from a region).
  char* Buf(size_t len, char fill = 0);

  // Tracks an object to close when the case ends (in reverse order).
  void Own(fid* f) { owned_.push_back(f); }
  // fi_close now; forgets the object when it closed.
  int Close(fid* f);

  // One progress pass over every CQ the case opened.
  void Progress();
  // The next completion of cq (an error entry counts), progressing all;
  // fails with "hang" when none comes.
  Completion Wait(fid_cq* cq, const std::string& what, bool readfrom = false);
  // Polls cq for `passes` progress passes; false when nothing came.
  bool Poll(fid_cq* cq, Completion* out, int passes);
  void WaitCntr(fid_cntr* cntr, uint64_t value, const std::string& what);
  // Posts an operation, progressing while it answers -FI_EAGAIN; fails
  // on any other error.
  void Post(const std::string& what, const std::function<ssize_t()>& op);

 private:
  std::string prov_;
  std::vector<fi_info*> infos_;
  std::vector<fid*> owned_;
  std::vector<fid_cq*> cqs_;
  std::vector<std::unique_ptr<char[]>> bufs_;
};

// Around a blocking call (fi_cntr_wait, ...) that might never return: when
// it has not returned after `seconds`, the case ends with a "hang" verdict
// on the runner's pipe (SIGALRM; the case's objects are not closed).
class HangGuard {
 public:
  HangGuard(int seconds, const std::string& what);
  ~HangGuard();
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;
};
// The runner's verdict pipe, for HangGuard.
void SetVerdictFd(int fd);

// Length-prefixed messages between the processes of a case (pipes): a
// read waits at most kHangSeconds.
void WriteMsg(int fd, const std::string& m);
std::string ReadMsg(int fd, const char* what);

// An endpoint opened on d (owned by the case) with each counter bound with
// its flags (FI_WRITE, FI_REMOTE_READ, ...), not yet enabled: pass it to
// OpenEp as EpOpts::opened.
fid_ep* OpenWithCntrs(Ctx& c, fid_domain* d, fi_info* i,
                      const std::vector<std::pair<fid_cntr*, uint64_t>>& binds);

// The RMA address of `buf` in `mr` under the domain's mr_mode.
uint64_t RmaAddr(const fi_info* info, const void* buf);

// A registered case: `ref` is the reference provider it also runs on.
struct CaseDef {
  const char* name;
  const char* ref;
  void (*fn)(Ctx&);
};
std::vector<CaseDef>& Cases();
bool Register(const char* name, const char* ref, void (*fn)(Ctx&));

#define CONFORMANCE_CASE(name, ref)                                                          \
  static void Case_##name(::bypass::fi::conformance::Ctx& c);                               \
  [[maybe_unused]] static const bool kRegistered_##name =                                  \
      ::bypass::fi::conformance::Register(#name, ref, &Case_##name);                        \
  static void Case_##name([[maybe_unused]] ::bypass::fi::conformance::Ctx& c)

}  // namespace bypass::fi::conformance

#endif  // BYPASS_FABRIC_FI_CONFORMANCE_CONFORMANCE_H_
