// Fuzz target: sequences of fi_* calls with hostile arguments (issue 17,
// SECURITY.md). Each input is a script: a fresh fabric from fi_getinfo with
// hints the input chooses, then byte-coded calls (open, bind, enable, post,
// read, remove, close, control) on a handful of object slots over two
// in-process loopback domains, in any order and with any arguments an
// application could pass: NULLs, counts past limits, iov lengths that
// overflow, unknown flags, objects closed while bound, addresses never
// inserted. Everything still open at the end is closed, children first, so
// the sanitizers also see leaks. The property is the provider's: it returns
// a negative errno or works, it never crashes, overruns or hangs.
//
// Pointers the script passes are NULL or point into buffers of this file at
// lengths within them: a provider may trust an application's pointer and
// length to name memory it owns, and only that (fi_endpoint(3)).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

constexpr char kDevA[] = "loopback:fuzzcalls,ip=10.78.1.1";
constexpr char kDevB[] = "loopback:fuzzcalls,ip=10.78.1.2";

const bool kEnvironment = [] {
  setenv("FI_BYPASS_DEVICES", (std::string(kDevA) + ";" + kDevB).c_str(), 1);
  // A peer that never answers fails its operations in 50 ms, not 10 s, so
  // a script that sends to nowhere and then closes does not wait long.
  setenv("FI_BYPASS_PEER_TIMEOUT_MS", "50", 1);
  setenv("FI_BYPASS_LINGER_MS", "0", 1);
  return true;
}();

// The input, read a byte (or a few) at a time; zeros once it runs out.
class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | Byte() << 8); }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }
  // One of the values an application is likely to get wrong.
  uint64_t Flags() {
    static constexpr uint64_t kFlags[] = {
        0,
        FI_COMPLETION,
        FI_INJECT,
        FI_MULTI_RECV,
        FI_REMOTE_CQ_DATA,
        FI_TRANSMIT_COMPLETE,
        FI_DELIVERY_COMPLETE,
        FI_INJECT_COMPLETE,
        FI_FENCE,
        FI_PEEK,
        FI_CLAIM,
        FI_DISCARD,
        FI_MORE,
        FI_SELECTIVE_COMPLETION,
        FI_TRANSMIT | FI_RECV,
        FI_SEND | FI_RECV | FI_READ | FI_WRITE,
        FI_REMOTE_READ | FI_REMOTE_WRITE,
    };
    const uint8_t b = Byte();
    if (b == 0xff) return U64();  // anything at all
    return kFlags[b % (sizeof(kFlags) / sizeof(kFlags[0]))] |
           ((b & 0x80) != 0 ? kFlags[Byte() % (sizeof(kFlags) / sizeof(kFlags[0]))] : 0);
  }
  size_t Length(size_t max) {
    const uint8_t b = Byte();
    switch (b % 8) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return max;
      default:
        return U16() % (max + 1);
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr int kSlots = 3;
constexpr size_t kBuf = 64 << 10;

// Objects of one domain, by slot (null: none).
struct DomainObjects {
  fid_domain* domain = nullptr;
  fi_info* info = nullptr;  // the entry it was opened from
  std::array<fid_av*, kSlots> av{};
  std::array<fid_cq*, kSlots> cq{};
  std::array<fid_cntr*, kSlots> cntr{};
  std::array<fid_mr*, kSlots> mr{};
  std::array<fid_ep*, kSlots> ep{};
};

// Application memory the script's operations name: buffers posted to
// receives stay valid until the end, when everything is closed.
struct Memory {
  alignas(64) std::array<char, kBuf> send{};
  alignas(64) std::array<char, kBuf> recv{};
  alignas(64) std::array<char, kBuf> region{};
  std::array<char, 256> name{};
  std::array<char, 256> err_data{};
  std::array<fi_addr_t, 8> addrs{};
  std::array<fi_context2, 64> contexts{};
};

class Runner {
 public:
  Runner(const uint8_t* data, size_t size) : s_(data, size), mem_(new Memory()) {}
  ~Runner() {
    CloseAll();
    delete mem_;
  }

  void Run() {
    if (!Open()) return;
    int steps = 0;
    while (!s_.done() && ++steps < 400) Step();
  }

 private:
  DomainObjects& Dom() { return dom_[s_.Byte() & 1]; }
  template <typename T>
  T*& Slot(std::array<T*, kSlots>& a) {
    return a[s_.Byte() % kSlots];
  }
  // An object of the domain, any kind, or null, or the fabric.
  fid* AnyFid(DomainObjects& d) {
    switch (s_.Byte() % 8) {
      case 0:
        return Fid(fabric_);
      case 1:
        return Fid(Slot(d.cq));
      case 2:
        return Fid(Slot(d.cntr));
      case 3:
        return Fid(Slot(d.av));
      case 4:
        return eq_ != nullptr ? &eq_->fid : nullptr;
      case 5:
        return Fid(Slot(d.mr));
      case 6:
        return Fid(Slot(d.ep));
      default:
        return d.domain != nullptr ? &d.domain->fid : nullptr;
    }
  }
  template <typename T>
  static fid* Fid(T* obj) {
    return obj != nullptr ? &obj->fid : nullptr;
  }
  void* Context() { return &mem_->contexts[s_.Byte() % mem_->contexts.size()]; }
  fi_addr_t Addr() {
    const uint8_t b = s_.Byte();
    if (b < 0xf0) return mem_->addrs[b % mem_->addrs.size()];
    if (b < 0xf8) return FI_ADDR_UNSPEC;
    return s_.U64();
  }
  char* SendBuf(size_t* len) {
    *len = s_.Length(kBuf);
    return s_.Byte() == 0xff ? nullptr : mem_->send.data() + (kBuf - *len);
  }
  char* RecvBuf(size_t* len) {
    *len = s_.Length(kBuf);
    return s_.Byte() == 0xff ? nullptr : mem_->recv.data() + (kBuf - *len);
  }
  // An iov of 0..5 entries (or, rarely, a count far past any limit with a
  // null array) whose lengths may overflow size_t when summed.
  size_t Iov(iovec* iov, void** desc, bool for_recv) {
    const uint8_t b = s_.Byte();
    size_t count = b % 6;
    for (size_t i = 0; i < count; ++i) {
      size_t len = 0;
      char* base = for_recv ? RecvBuf(&len) : SendBuf(&len);
      if (s_.Byte() == 0xfe) len = SIZE_MAX - i;  // overflows the sum
      iov[i] = iovec{base, len};
      desc[i] = nullptr;
    }
    if (b == 0xff) count = 1u << 20;
    return count;
  }

  bool Open() {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return false;
    static constexpr uint64_t kCaps[] = {FI_MSG | FI_TAGGED,
                                         FI_MSG | FI_TAGGED | FI_RMA,
                                         FI_MSG | FI_MULTI_RECV,
                                         FI_MSG | FI_TAGGED | FI_RMA | FI_SOURCE | FI_DIRECTED_RECV,
                                         0};
    hints->caps = kCaps[s_.Byte() % 5];
    hints->ep_attr->type = (s_.Byte() & 3) == 3 ? FI_EP_DGRAM : FI_EP_RDM;
    const uint8_t mr = s_.Byte();
    hints->domain_attr->mr_mode = (mr & 1 ? FI_MR_LOCAL : 0) | (mr & 2 ? FI_MR_VIRT_ADDR : 0) |
                                  (mr & 4 ? FI_MR_PROV_KEY : 0) | (mr & 8 ? FI_MR_ALLOCATED : 0);
    const uint8_t attrs = s_.Byte();
    if (attrs & 1) hints->tx_attr->op_flags = s_.Flags();
    if (attrs & 2) hints->rx_attr->op_flags = s_.Flags();
    if (attrs & 4) hints->domain_attr->threading = FI_THREAD_DOMAIN;
    if (attrs & 8) hints->tx_attr->iov_limit = s_.Byte();
    if (attrs & 16) hints->ep_attr->max_msg_size = s_.U64();
    const uint32_t version = (attrs & 32) ? FI_VERSION(1, 4) : FI_VERSION(1, 17);
    fi_info* list = nullptr;
    const int rc = fi_getinfo(version, nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc != 0 || list == nullptr) return false;
    for (fi_info* i = list; i != nullptr; i = i->next) {
      const char* name = i->domain_attr->name;
      if (name == nullptr) continue;
      if (std::strcmp(name, kDevA) == 0 && dom_[0].info == nullptr) dom_[0].info = fi_dupinfo(i);
      if (std::strcmp(name, kDevB) == 0 && dom_[1].info == nullptr) dom_[1].info = fi_dupinfo(i);
    }
    fi_freeinfo(list);
    if (dom_[0].info == nullptr) return false;
    return fi_fabric(dom_[0].info->fabric_attr, &fabric_, nullptr) == 0;
  }

  void Step() {
    DomainObjects& d = Dom();
    switch (s_.Byte() % 24) {
      case 0:  // fi_domain
        if (d.domain == nullptr && d.info != nullptr) {
          fi_domain(fabric_, d.info, &d.domain, nullptr);
        }
        break;
      case 1: {  // fi_av_open
        fid_av*& av = Slot(d.av);
        if (d.domain == nullptr || av != nullptr) break;
        fi_av_attr attr{};
        attr.type = (s_.Byte() & 1) ? FI_AV_MAP : FI_AV_TABLE;
        attr.count = s_.Byte();
        attr.flags = s_.Byte() == 0xff ? s_.U64() : 0;
        fi_av_open(d.domain, &attr, &av, nullptr);
        break;
      }
      case 2: {  // fi_cq_open
        fid_cq*& cq = Slot(d.cq);
        if (d.domain == nullptr || cq != nullptr) break;
        fi_cq_attr attr{};
        attr.format = static_cast<fi_cq_format>(s_.Byte() % 6);
        attr.size = s_.Byte();
        attr.wait_obj = (s_.Byte() & 7) == 7 ? FI_WAIT_FD : FI_WAIT_NONE;
        attr.flags = (s_.Byte() & 3) == 3 ? s_.Flags() : 0;
        fi_cq_open(d.domain, &attr, &cq, nullptr);
        break;
      }
      case 3: {  // fi_cntr_open, fi_eq_open
        if (s_.Byte() & 1) {
          if (eq_ != nullptr) break;
          fi_eq_attr attr{};
          attr.size = s_.Byte();
          fi_eq_open(fabric_, &attr, &eq_, nullptr);
          break;
        }
        fid_cntr*& cntr = Slot(d.cntr);
        if (d.domain == nullptr || cntr != nullptr) break;
        fi_cntr_attr attr{};
        attr.events = static_cast<fi_cntr_events>(s_.Byte() % 3);
        fi_cntr_open(d.domain, &attr, &cntr, nullptr);
        break;
      }
      case 4: {  // fi_mr_reg
        fid_mr*& mr = Slot(d.mr);
        if (d.domain == nullptr || mr != nullptr) break;
        const size_t len = s_.Length(kBuf);
        char* buf = s_.Byte() == 0xff ? nullptr : mem_->region.data() + (kBuf - len);
        fi_mr_reg(d.domain, buf, len, s_.Flags(), 0, s_.Byte() == 0xff ? s_.U64() : s_.Byte(),
                  s_.Byte() == 0xff ? s_.U64() : 0, &mr, nullptr);
        break;
      }
      case 5: {  // fi_endpoint
        fid_ep*& ep = Slot(d.ep);
        if (d.domain == nullptr || ep != nullptr) break;
        fi_endpoint(d.domain, s_.Byte() == 0xff ? nullptr : d.info, &ep, nullptr);
        break;
      }
      case 6: {  // fi_ep_bind
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        fid* obj = AnyFid(d);
        if (obj == nullptr && s_.Byte() != 0xff) break;
        fi_ep_bind(ep, obj, s_.Flags());
        break;
      }
      case 7: {  // fi_enable, fi_control
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        const uint8_t c = s_.Byte();
        if (c % 4 == 0) {
          fi_enable(ep);
        } else {
          uint64_t flags = s_.Flags() | (s_.Byte() & 1 ? FI_TRANSMIT : FI_RECV);
          static constexpr int kCommands[] = {FI_GETOPSFLAG, FI_SETOPSFLAG, FI_GETWAIT, FI_ALIAS,
                                              FI_GETFIDFLAG, FI_SETFIDFLAG, 12345};
          const int cmd = kCommands[s_.Byte() % 7];
          // FI_GETWAIT and FI_ALIAS take other argument types; pass them a
          // valid place of their own size, never flags' 8 bytes for a fid*.
          if (cmd == FI_GETWAIT) {
            int fd = -1;
            fi_control(&ep->fid, cmd, &fd);
          } else if (cmd == FI_ALIAS) {
            struct fi_alias alias{};
            fid* out = nullptr;
            alias.fid = &out;
            alias.flags = flags;
            if (fi_control(&ep->fid, cmd, &alias) == 0 && out != nullptr) fi_close(out);
          } else {
            fi_control(&ep->fid, cmd, (c & 0x80) ? nullptr : &flags);
          }
        }
        break;
      }
      case 8: {  // fi_getname / fi_av_insert of a name (ours, truncated or garbage)
        fid_ep* ep = Slot(Dom().ep);
        fid_av* av = Slot(Dom().av);
        size_t len = s_.Byte() % mem_->name.size();
        if (ep != nullptr) fi_getname(&ep->fid, mem_->name.data(), &len);
        if (s_.Byte() == 0xff) {
          for (char& c : mem_->name) c = static_cast<char>(s_.Byte());
        }
        if (av == nullptr) break;
        const size_t count = s_.Byte() % 3;
        fi_av_insert(av, count == 0 ? nullptr : mem_->name.data(), count,
                     s_.Byte() == 0xff ? nullptr : &mem_->addrs[s_.Byte() % 4], s_.Flags(),
                     nullptr);
        break;
      }
      case 9: {  // fi_av_insertsvc / insertsym / lookup / straddr / remove
        fid_av* av = Slot(d.av);
        if (av == nullptr) break;
        char svc[8];
        std::snprintf(svc, sizeof(svc), "%u", 7471u + s_.Byte() % 8);
        switch (s_.Byte() % 5) {
          case 0:
            fi_av_insertsvc(av, "10.78.1.2", svc, &mem_->addrs[4 + s_.Byte() % 4], 0, nullptr);
            break;
          case 1:
            fi_av_insertsym(av, "10.78.1.1", s_.Byte() % 4, svc, s_.Byte() % 4,
                            &mem_->addrs[4], 0, nullptr);
            break;
          case 2: {
            size_t len = s_.Byte() % mem_->name.size();
            fi_av_lookup(av, Addr(), mem_->name.data(), &len);
            break;
          }
          case 3: {
            size_t len = s_.Byte() % 64;
            char str[64];
            fi_av_straddr(av, mem_->name.data(), str, &len);
            break;
          }
          default: {
            fi_addr_t a = Addr();
            fi_av_remove(av, &a, 1, 0);
            break;
          }
        }
        break;
      }
      case 10: {  // sends
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        size_t len = 0;
        char* buf = SendBuf(&len);
        const fi_addr_t dest = Addr();
        const uint64_t tag = s_.Byte();
        switch (s_.Byte() % 6) {
          case 0:
            fi_send(ep, buf, len, nullptr, dest, Context());
            break;
          case 1:
            fi_inject(ep, buf, len, dest);
            break;
          case 2:
            fi_tsend(ep, buf, len, nullptr, dest, tag, Context());
            break;
          case 3:
            fi_senddata(ep, buf, len, nullptr, s_.U64(), dest, Context());
            break;
          case 4:
            fi_tinject(ep, buf, len, dest, tag);
            break;
          default:
            fi_tinjectdata(ep, buf, len, s_.U64(), dest, tag);
            break;
        }
        break;
      }
      case 11: {  // receives
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        size_t len = 0;
        char* buf = RecvBuf(&len);
        if (s_.Byte() & 1) {
          fi_recv(ep, buf, len, nullptr, Addr(), Context());
        } else {
          fi_trecv(ep, buf, len, nullptr, Addr(), s_.Byte(), s_.Byte() == 0xff ? ~0ull : 0,
                   Context());
        }
        break;
      }
      case 12: {  // vectored and msg forms
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        iovec iov[5];
        void* desc[5];
        const bool recv = s_.Byte() & 1;
        const size_t count = Iov(iov, desc, recv);
        const bool null_iov = count > 5;
        fi_msg m{};
        m.msg_iov = null_iov ? nullptr : iov;
        m.desc = desc;
        m.iov_count = count;
        m.addr = Addr();
        m.context = Context();
        m.data = s_.U64();
        const uint64_t flags = s_.Flags();
        switch (s_.Byte() % 4) {
          case 0:
            recv ? fi_recvv(ep, m.msg_iov, desc, count, m.addr, m.context)
                 : fi_sendv(ep, m.msg_iov, desc, count, m.addr, m.context);
            break;
          case 1:
            recv ? fi_recvmsg(ep, &m, flags) : fi_sendmsg(ep, &m, flags);
            break;
          case 2: {
            fi_msg_tagged t{};
            t.msg_iov = m.msg_iov;
            t.desc = desc;
            t.iov_count = count;
            t.addr = m.addr;
            t.tag = s_.Byte();
            t.ignore = s_.Byte() == 0xff ? ~0ull : 0;
            t.context = m.context;
            t.data = m.data;
            recv ? fi_trecvmsg(ep, &t, flags) : fi_tsendmsg(ep, &t, flags);
            break;
          }
          default:
            recv ? fi_trecvv(ep, m.msg_iov, desc, count, m.addr, s_.Byte(), 0, m.context)
                 : fi_tsendv(ep, m.msg_iov, desc, count, m.addr, s_.Byte(), m.context);
            break;
        }
        break;
      }
      case 13: {  // RMA
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        fid_mr* mr = Slot(dom_[s_.Byte() & 1].mr);
        const uint64_t key = (mr != nullptr && s_.Byte() != 0xff) ? fi_mr_key(mr) : s_.U64();
        const uint64_t addr = (s_.Byte() & 1)
                                  ? reinterpret_cast<uintptr_t>(mem_->region.data()) + s_.U16()
                                  : s_.U16() | (s_.Byte() == 0xff ? s_.U64() : 0);
        size_t len = 0;
        switch (s_.Byte() % 4) {
          case 0: {
            char* buf = SendBuf(&len);
            fi_write(ep, buf, len, nullptr, Addr(), addr, key, Context());
            break;
          }
          case 1: {
            char* buf = RecvBuf(&len);
            fi_read(ep, buf, len, nullptr, Addr(), addr, key, Context());
            break;
          }
          case 2: {
            char* buf = SendBuf(&len);
            fi_inject_write(ep, buf, len, Addr(), addr, key);
            break;
          }
          default: {
            iovec iov[5];
            void* desc[5];
            const size_t count = Iov(iov, desc, false);
            fi_rma_iov rma[2] = {{addr, s_.Length(kBuf), key}, {addr, SIZE_MAX, key}};
            fi_msg_rma m{};
            m.msg_iov = count > 5 ? nullptr : iov;
            m.desc = desc;
            m.iov_count = count;
            m.addr = Addr();
            m.rma_iov = s_.Byte() == 0xff ? nullptr : rma;
            m.rma_iov_count = s_.Byte() % 4;
            m.context = Context();
            fi_writemsg(ep, &m, s_.Flags());
            break;
          }
        }
        break;
      }
      case 14:
      case 15: {  // completion queues: reads drive progress
        fid_cq* cq = Slot(d.cq);
        if (cq == nullptr) break;
        fi_cq_tagged_entry entries[4];
        const size_t count = s_.Byte() % 5;
        const uint8_t how = s_.Byte();
        for (int i = 0; i < 1 + how / 32; ++i) {
          switch (how % 4) {
            case 0:
              fi_cq_read(cq, count == 0 ? nullptr : entries, count);
              break;
            case 1: {
              fi_addr_t src[4];
              fi_cq_readfrom(cq, entries, count, src);
              break;
            }
            case 2: {
              fi_cq_err_entry err{};
              if (s_.Byte() & 1) {
                err.err_data = mem_->err_data.data();
                err.err_data_size = s_.Byte() % mem_->err_data.size();
              }
              if (fi_cq_readerr(cq, &err, 0) == 1) {
                char buf[64];
                fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, s_.Byte() % sizeof(buf));
              }
              break;
            }
            default:
              fi_cq_sread(cq, entries, count, nullptr, 0);
              break;
          }
        }
        break;
      }
      case 16: {  // counters
        fid_cntr* cntr = Slot(d.cntr);
        if (cntr == nullptr) break;
        switch (s_.Byte() % 5) {
          case 0:
            fi_cntr_read(cntr);
            break;
          case 1:
            fi_cntr_readerr(cntr);
            break;
          case 2:
            fi_cntr_add(cntr, s_.U64());
            break;
          case 3:
            fi_cntr_set(cntr, s_.U64());
            break;
          default:
            fi_cntr_wait(cntr, s_.U64(), 0);
            break;
        }
        break;
      }
      case 17: {  // event queue
        if (eq_ == nullptr) break;
        uint32_t event = 0;
        fi_eq_entry entry{};
        switch (s_.Byte() % 3) {
          case 0:
            fi_eq_read(eq_, &event, &entry, s_.Byte() % (sizeof(entry) + 1), 0);
            break;
          case 1: {
            fi_eq_err_entry err{};
            if (s_.Byte() & 1) {
              err.err_data = mem_->err_data.data();
              err.err_data_size = s_.Byte() % mem_->err_data.size();
            }
            fi_eq_readerr(eq_, &err, 0);
            break;
          }
          default:
            entry.context = Context();
            fi_eq_write(eq_, FI_NOTIFY, &entry, s_.Byte() % (sizeof(entry) + 1), 0);
            break;
        }
        break;
      }
      case 18: {  // fi_cancel, fi_setname, fi_getpeer, options
        fid_ep* ep = Slot(d.ep);
        if (ep == nullptr) break;
        switch (s_.Byte() % 4) {
          case 0:
            fi_cancel(&ep->fid, Context());
            break;
          case 1:
            fi_setname(&ep->fid, mem_->name.data(), s_.Byte() % mem_->name.size());
            break;
          case 2: {
            size_t len = s_.Byte() % mem_->name.size();
            fi_getpeer(ep, mem_->name.data(), &len);
            break;
          }
          default: {
            size_t v = s_.U16();
            size_t len = (s_.Byte() & 1) ? sizeof(v) : s_.Byte() % 9;
            if (s_.Byte() & 1) {
              fi_setopt(&ep->fid, FI_OPT_ENDPOINT, s_.Byte() % 24, &v, len);
            } else {
              fi_getopt(&ep->fid, FI_OPT_ENDPOINT, s_.Byte() % 24, &v, &len);
            }
            break;
          }
        }
        break;
      }
      case 19:
      case 20:
        Close(d);
        break;
      default: {  // progress: a burst of reads of every CQ
        const int n = 1 + s_.Byte() % 16;
        for (int i = 0; i < n; ++i) {
          for (DomainObjects& dd : dom_) {
            for (fid_cq* cq : dd.cq) {
              if (cq != nullptr) fi_cq_read(cq, nullptr, 0);
            }
          }
        }
        break;
      }
    }
  }

  // fi_close of any object, in any order; a refused close (-FI_EBUSY) keeps
  // the object, which the final close reaches later.
  template <typename T>
  static void CloseSlot(T*& obj) {
    if (obj != nullptr && fi_close(&obj->fid) == 0) obj = nullptr;
  }
  void Close(DomainObjects& d) {
    switch (s_.Byte() % 7) {
      case 0:
        CloseSlot(Slot(d.ep));
        break;
      case 1:
        CloseSlot(Slot(d.cq));
        break;
      case 2:
        CloseSlot(Slot(d.cntr));
        break;
      case 3:
        CloseSlot(Slot(d.av));
        break;
      case 4:
        CloseSlot(Slot(d.mr));
        break;
      case 5:
        CloseSlot(eq_);
        break;
      default:
        CloseSlot(d.domain);
        break;
    }
  }

  // Children first, so every close is one fi_close(3) allows.
  void CloseAll() {
    for (DomainObjects& d : dom_) {
      for (auto& ep : d.ep) CloseSlot(ep);
    }
    for (DomainObjects& d : dom_) {
      for (auto& x : d.cq) CloseSlot(x);
      for (auto& x : d.cntr) CloseSlot(x);
      for (auto& x : d.av) CloseSlot(x);
      for (auto& x : d.mr) CloseSlot(x);
      CloseSlot(d.domain);
      fi_freeinfo(d.info);
      d.info = nullptr;
    }
    CloseSlot(eq_);
    CloseSlot(fabric_);
  }

  Script s_;
  Memory* mem_;
  fid_fabric* fabric_ = nullptr;
  fid_eq* eq_ = nullptr;
  std::array<DomainObjects, 2> dom_{};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kEnvironment;
  Runner(data, size).Run();
  return 0;
}
