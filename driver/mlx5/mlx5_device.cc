#include "driver/mlx5/mlx5_device.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "driver/mlx5/doorbell.h"
#include "driver/mlx5/queue_pair.h"
#include "driver/mlx5/ring.h"
#include "hugepage/pool.h"

namespace bypass::driver::mlx5 {
namespace {

// Abseil here has its own string_view.
absl::string_view Sv(const std::string& s) { return absl::string_view(s.data(), s.size()); }

std::string ErrnoText(int err) { return err == 0 ? "no error code" : std::strerror(err); }

constexpr uint32_t kMaxInline = 128;  // frames this short are copied into the WQE

// The kernel interface of an RDMA device's port (its MAC and IPv4 address).
std::optional<std::string> NetdevOf(const std::string& ibdev) {
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::path("/sys/class/infiniband") / ibdev / "device" / "net";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    return entry.path().filename().string();
  }
  return std::nullopt;
}

std::optional<MacAddress> MacOf(const std::string& netdev) {
  std::ifstream in("/sys/class/net/" + netdev + "/address");
  std::string text;
  if (!(in >> text)) return std::nullopt;
  absl::StatusOr<MacAddress> mac = MacAddress::Parse(text);
  if (!mac.ok()) return std::nullopt;
  return *mac;
}

std::optional<Ipv4Address> Ipv4Of(const std::string& netdev) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<Ipv4Address> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (netdev != a->ifa_name) continue;
    sockaddr_in sin;
    std::memcpy(&sin, a->ifa_addr, sizeof(sin));
    out = Ipv4Address{ntohl(sin.sin_addr.s_addr)};
    break;
  }
  freeifaddrs(list);
  return out;
}

// One raw-packet QP with its CQs and registered pool.
class Mlx5Queue final : public QpControl {
 public:
  Mlx5Queue() = default;
  Mlx5Queue(const Mlx5Queue&) = delete;
  Mlx5Queue& operator=(const Mlx5Queue&) = delete;
  ~Mlx5Queue() override {
    // The device first, then the memory it could write.
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (send_cq != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(send_cq));
    if (recv_cq != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(recv_cq));
    if (mr != nullptr) ibv_dereg_mr(mr);
    queue_pair.reset();
  }

  absl::Status ToRts() {
    ibv_qp_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = port;
    if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT); err != 0) {
      return absl::InternalError(absl::StrCat("ibv_modify_qp to INIT: ", ErrnoText(err)));
    }
    for (ibv_qp_state s : {IBV_QPS_RTR, IBV_QPS_RTS}) {
      std::memset(&attr, 0, sizeof(attr));
      attr.qp_state = s;
      if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE); err != 0) {
        return absl::InternalError(absl::StrCat("ibv_modify_qp to ",
                                                s == IBV_QPS_RTR ? "RTR" : "RTS", ": ",
                                                ErrnoText(err)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Recover() override {
    ibv_qp_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RESET;
    if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE); err != 0) {
      return absl::InternalError(absl::StrCat("ibv_modify_qp to RESET: ", ErrnoText(err)));
    }
    return ToRts();
  }

  uint8_t port = 1;
  ibv_cq_ex* send_cq = nullptr;
  ibv_cq_ex* recv_cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::unique_ptr<UarDoorbellWriter> writer;
  std::unique_ptr<Mlx5QueuePair> queue_pair;
};

// Flow rules: Ethernet destination MAC, then optionally IPv4 destination
// and UDP destination port. The specs follow the attribute back to back (each
// is 4-aligned with a size that is a multiple of 4, so no padding: checked).
struct MacFlow {
  ibv_flow_attr attr;
  ibv_flow_spec_eth eth;
};
struct UdpFlow {
  ibv_flow_attr attr;
  ibv_flow_spec_eth eth;
  ibv_flow_spec_ipv4 ipv4;
  ibv_flow_spec_tcp_udp udp;
};
static_assert(offsetof(MacFlow, eth) == sizeof(ibv_flow_attr));
static_assert(sizeof(MacFlow) == sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth));
static_assert(offsetof(UdpFlow, ipv4) == offsetof(UdpFlow, eth) + sizeof(ibv_flow_spec_eth));
static_assert(offsetof(UdpFlow, udp) == offsetof(UdpFlow, ipv4) + sizeof(ibv_flow_spec_ipv4));
static_assert(sizeof(UdpFlow) == offsetof(UdpFlow, udp) + sizeof(ibv_flow_spec_tcp_udp));

void FillEth(ibv_flow_spec_eth* eth, const MacAddress& mac) {
  eth->type = IBV_FLOW_SPEC_ETH;
  eth->size = sizeof(*eth);
  std::memcpy(eth->val.dst_mac, mac.bytes.data(), 6);
  std::memset(eth->mask.dst_mac, 0xff, 6);
}

// A ConnectX port behind the driver contract.
class Mlx5Device final : public Device {
 public:
  Mlx5Device() = default;
  Mlx5Device(const Mlx5Device&) = delete;
  Mlx5Device& operator=(const Mlx5Device&) = delete;
  ~Mlx5Device() override {
    for (ibv_flow* f : flows_) ibv_destroy_flow(f);
    queues_.clear();
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t q) override { return *queues_[q]->queue_pair; }

  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override {
    if (q >= queues_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("mlx5: no queue ", q));
    }
    UdpFlow f;
    std::memset(&f, 0, sizeof(f));
    f.attr.type = IBV_FLOW_ATTR_NORMAL;
    f.attr.size = sizeof(f);
    f.attr.priority = 0;  // before the MAC rule of queue 0
    f.attr.num_of_specs = 3;
    f.attr.port = port_;
    FillEth(&f.eth, info_.mac);
    f.ipv4.type = IBV_FLOW_SPEC_IPV4;
    f.ipv4.size = sizeof(f.ipv4);
    f.ipv4.val.dst_ip = htonl(info_.ipv4.value);
    f.ipv4.mask.dst_ip = info_.ipv4.value != 0 ? 0xffffffffu : 0;
    f.udp.type = IBV_FLOW_SPEC_UDP;
    f.udp.size = sizeof(f.udp);
    f.udp.val.dst_port = htons(udp_port);
    f.udp.mask.dst_port = 0xffff;
    ibv_flow* flow = ibv_create_flow(queues_[q]->qp, &f.attr);
    if (flow == nullptr) {
      return absl::InternalError(absl::StrCat("mlx5: ibv_create_flow for UDP port ", udp_port,
                                              " to queue ", q, ": ", ErrnoText(errno)));
    }
    flows_.push_back(flow);
    return absl::OkStatus();
  }

  LinkState link_state() const override {
    ibv_port_attr attr;
    if (ibv_query_port(ctx_, port_, &attr) != 0) return LinkState::kDown;
    return attr.state == IBV_PORT_ACTIVE ? LinkState::kUp : LinkState::kDown;
  }
  absl::Status SetLinkState(LinkState) override {
    return absl::UnimplementedError("mlx5: the link is the port's; bring it up or down with ip link");
  }

  absl::Status OpenPort(const std::string& name, uint8_t port, const DeviceOptions& opts);
  void set_uri(std::string uri) { info_.uri = std::move(uri); }

 private:
  absl::Status AddQueue(uint16_t id, const DeviceOptions& opts);

  DeviceInfo info_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  uint8_t port_ = 1;
  std::vector<std::unique_ptr<Mlx5Queue>> queues_;
  std::vector<ibv_flow*> flows_;
};

absl::Status Mlx5Device::OpenPort(const std::string& name, uint8_t port,
                                  const DeviceOptions& opts) {
  port_ = port;
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    // NULL with ENOSYS: no RDMA subsystem at all (no devices).
    const int err = errno;
    if (list != nullptr) ibv_free_device_list(list);
    return absl::NotFoundError(absl::StrCat(
        "mlx5: no RDMA devices on this machine (ibv_get_device_list: ", ErrnoText(err),
        "): load mlx5_ib on a host with a ConnectX, or use loopback:NAME or dpdk:PCI_ADDRESS"));
  }
  ibv_device* dev = nullptr;
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    names.emplace_back(ibv_get_device_name(list[i]));
    if (names.back() == name) dev = list[i];
  }
  if (dev == nullptr) {
    ibv_free_device_list(list);
    return absl::NotFoundError(absl::StrCat("mlx5: no RDMA device '", Sv(name),
                                            "'; this machine has: ", absl::StrJoin(names, ", ")));
  }
  if (!mlx5dv_is_supported(dev)) {
    ibv_free_device_list(list);
    return absl::FailedPreconditionError(absl::StrCat(
        "mlx5: '", Sv(name), "' is not an mlx5 device (direct verbs unsupported); use dpdk:"));
  }
  mlx5dv_context_attr dv_attr;
  std::memset(&dv_attr, 0, sizeof(dv_attr));
  ctx_ = mlx5dv_open_device(dev, &dv_attr);
  ibv_free_device_list(list);
  if (ctx_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("mlx5: cannot open '", Sv(name), "': ", ErrnoText(errno)));
  }
  ibv_port_attr pattr;
  if (int err = ibv_query_port(ctx_, port_, &pattr); err != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mlx5: '", Sv(name), "' has no port ", port_,
                                                   ": ", ErrnoText(err)));
  }
  if (pattr.link_layer != IBV_LINK_LAYER_ETHERNET) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mlx5: '", Sv(name), "' port ", port_, " is InfiniBand, not Ethernet; raw packets need "
        "an Ethernet port (mlxconfig LINK_TYPE_P1=2)"));
  }
  pd_ = ibv_alloc_pd(ctx_);
  if (pd_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("mlx5: ibv_alloc_pd: ", ErrnoText(errno)));
  }

  info_.driver = "mlx5";
  info_.mtu = opts.mtu;
  info_.num_queues = opts.queues;
  info_.ring_size = opts.ring_size;
  info_.offloads = kOffloadRxIpChecksum | kOffloadRxUdpChecksum | kOffloadTxIpChecksum |
                   kOffloadTxUdpChecksum;
  info_.can_steer = true;
  const std::optional<std::string> netdev = NetdevOf(name);
  if (netdev) {
    if (std::optional<MacAddress> mac = MacOf(*netdev)) info_.mac = *mac;
    if (std::optional<Ipv4Address> ip = Ipv4Of(*netdev)) info_.ipv4 = *ip;
  }
  if (opts.ipv4) info_.ipv4 = *opts.ipv4;
  if (info_.mac == MacAddress{}) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mlx5: '", Sv(name), "' has no network interface to take a MAC address from"));
  }
  for (uint16_t q = 0; q < opts.queues; ++q) {
    if (absl::Status s = AddQueue(q, opts); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("mlx5: '", Sv(name), "' queue ", q, ": ",
                                                 s.message()));
    }
  }
  // Everything else to this MAC lands on queue 0.
  MacFlow f;
  std::memset(&f, 0, sizeof(f));
  f.attr.type = IBV_FLOW_ATTR_NORMAL;
  f.attr.size = sizeof(f);
  f.attr.priority = 1;
  f.attr.num_of_specs = 1;
  f.attr.port = port_;
  FillEth(&f.eth, info_.mac);
  ibv_flow* flow = ibv_create_flow(queues_[0]->qp, &f.attr);
  if (flow == nullptr) {
    return absl::InternalError(absl::StrCat("mlx5: '", Sv(name),
                                            "': ibv_create_flow for the port's MAC: ",
                                            ErrnoText(errno)));
  }
  flows_.push_back(flow);
  return absl::OkStatus();
}

absl::Status Mlx5Device::AddQueue(uint16_t id, const DeviceOptions& opts) {
  auto q = std::make_unique<Mlx5Queue>();
  q->port = port_;
  hugepage::PoolOptions po;
  po.buffer_size = hugepage::Bytes(Mlx5QueuePair::kDataOffset + info_.max_frame());
  po.count = opts.pool_buffers != 0 ? opts.pool_buffers : 4u * opts.ring_size;
  po.region.numa_node = opts.numa_node;
  po.region.name = "bypass-mlx5";
  absl::StatusOr<std::unique_ptr<hugepage::BufferPool>> pool = hugepage::BufferPool::Create(po);
  if (!pool.ok()) return pool.status();
  // The function, not verbs.h's macro of the same name (whose enum
  // arithmetic clang rejects).
  q->mr = (ibv_reg_mr)(pd_, (*pool)->region().data(), (*pool)->region().size().value(),
                     IBV_ACCESS_LOCAL_WRITE);
  if (q->mr == nullptr) {
    return absl::UnavailableError(absl::StrCat("ibv_reg_mr of ", (*pool)->region().size().value(),
                                               " bytes: ", ErrnoText(errno),
                                               " (raise ulimit -l?)"));
  }

  // CQs: 64-byte CQEs, compression off (comp_mask 0). The send CQ covers the
  // SQ's WQEBBs (an inline WQE takes up to 3), the receive CQ the RQ.
  for (int which = 0; which < 2; ++which) {
    ibv_cq_init_attr_ex cq_attr;
    std::memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.cqe = which == 0 ? 4u * opts.ring_size : opts.ring_size;
    mlx5dv_cq_init_attr dv_cq;
    std::memset(&dv_cq, 0, sizeof(dv_cq));
    dv_cq.comp_mask = 0;
    ibv_cq_ex* cq = mlx5dv_create_cq(ctx_, &cq_attr, &dv_cq);
    if (cq == nullptr) return absl::UnavailableError(absl::StrCat("mlx5dv_create_cq: ", ErrnoText(errno)));
    (which == 0 ? q->send_cq : q->recv_cq) = cq;
  }

  ibv_qp_init_attr_ex qp_attr;
  std::memset(&qp_attr, 0, sizeof(qp_attr));
  qp_attr.qp_type = IBV_QPT_RAW_PACKET;
  qp_attr.send_cq = ibv_cq_ex_to_cq(q->send_cq);
  qp_attr.recv_cq = ibv_cq_ex_to_cq(q->recv_cq);
  qp_attr.cap.max_send_wr = opts.ring_size;
  qp_attr.cap.max_recv_wr = opts.ring_size;
  qp_attr.cap.max_send_sge = 1;
  qp_attr.cap.max_recv_sge = 1;
  qp_attr.cap.max_inline_data = kMaxInline;
  qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  qp_attr.pd = pd_;
  mlx5dv_qp_init_attr dv_qp;
  std::memset(&dv_qp, 0, sizeof(dv_qp));
  dv_qp.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
  dv_qp.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
  q->qp = mlx5dv_create_qp(ctx_, &qp_attr, &dv_qp);
  if (q->qp == nullptr) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat(
        "mlx5dv_create_qp (raw packet): ", ErrnoText(err),
        err == EPERM ? " (raw-packet QPs need CAP_NET_RAW: run as root or setcap cap_net_raw)"
                     : ""));
  }
  if (absl::Status s = q->ToRts(); !s.ok()) return s;

  mlx5dv_qp dvqp;
  mlx5dv_cq dvscq, dvrcq;
  std::memset(&dvqp, 0, sizeof(dvqp));
  std::memset(&dvscq, 0, sizeof(dvscq));
  std::memset(&dvrcq, 0, sizeof(dvrcq));
  mlx5dv_obj obj;
  std::memset(&obj, 0, sizeof(obj));
  obj.qp.in = q->qp;
  obj.qp.out = &dvqp;
  obj.cq.in = ibv_cq_ex_to_cq(q->send_cq);
  obj.cq.out = &dvscq;
  if (int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ); err != 0) {
    return absl::InternalError(absl::StrCat("mlx5dv_init_obj: ", ErrnoText(err)));
  }
  std::memset(&obj, 0, sizeof(obj));
  obj.cq.in = ibv_cq_ex_to_cq(q->recv_cq);
  obj.cq.out = &dvrcq;
  if (int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ); err != 0) {
    return absl::InternalError(absl::StrCat("mlx5dv_init_obj: ", ErrnoText(err)));
  }
  if (dvscq.cqe_size != kCqeBytes || dvrcq.cqe_size != kCqeBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CQEs are ", dvscq.cqe_size, " bytes, bypass reads 64: unset MLX5_CQE_SIZE"));
  }

  QueuePairParts parts;
  parts.id = id;
  parts.rings.sq = {static_cast<uint8_t*>(dvqp.sq.buf), dvqp.sq.wqe_cnt, dvqp.sq.stride};
  parts.rings.rq = {static_cast<uint8_t*>(dvqp.rq.buf), dvqp.rq.wqe_cnt, dvqp.rq.stride};
  parts.rings.send_cq = {static_cast<uint8_t*>(dvscq.buf), dvscq.cqe_cnt, dvscq.cqe_size,
                         reinterpret_cast<uint32_t*>(dvscq.dbrec)};
  parts.rings.recv_cq = {static_cast<uint8_t*>(dvrcq.buf), dvrcq.cqe_cnt, dvrcq.cqe_size,
                         reinterpret_cast<uint32_t*>(dvrcq.dbrec)};
  parts.rings.qp_dbrec = reinterpret_cast<uint32_t*>(dvqp.dbrec);
  parts.rings.qpn = q->qp->qp_num;
  q->writer = std::make_unique<UarDoorbellWriter>(dvqp.bf.reg, dvqp.bf.size);
  parts.writer = q->writer.get();
  parts.control = q.get();
  parts.pool = *std::move(pool);
  parts.lkey = q->mr->lkey;
  parts.max_frame = info_.max_frame();
  parts.send.signal_every = 32;
  parts.send.max_inline = kMaxInline;
  absl::StatusOr<std::unique_ptr<Mlx5QueuePair>> qp = Mlx5QueuePair::Create(std::move(parts));
  if (!qp.ok()) return qp.status();
  q->queue_pair = *std::move(qp);
  queues_.push_back(std::move(q));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> Open(DeviceUri uri, const DeviceOptions& opts) {
  if (absl::Status s = uri.CheckKnown({"port"}); !s.ok()) return s;
  if (uri.target.empty()) {
    return absl::InvalidArgumentError(
        "mlx5: say which RDMA device: mlx5:DEVICE[,port=N] (ibv_devices lists them)");
  }
  uint32_t port = 1;
  if (std::optional<std::string> p = uri.Take("port")) {
    if (!absl::SimpleAtoi(Sv(*p), &port) || port < 1 || port > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlx5: port=", Sv(*p), " is not a port number (1, 2, ...)"));
    }
  }
  auto dev = std::make_unique<Mlx5Device>();
  dev->set_uri(uri.text);
  if (absl::Status s = dev->OpenPort(uri.target, static_cast<uint8_t>(port), opts); !s.ok()) {
    return s;
  }
  return std::unique_ptr<Device>(std::move(dev));
}

}  // namespace bypass::driver::mlx5
