#include "driver/mlx5/fake_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "hugepage/pool.h"

namespace bypass::driver::mlx5 {

absl::StatusOr<std::unique_ptr<FakeMlx5Device>> FakeMlx5Device::Open(std::shared_ptr<Wire> wire,
                                                                     int port,
                                                                     const DeviceOptions& opts,
                                                                     FakeNic::Options nic_opts) {
  std::unique_ptr<FakeMlx5Device> dev(new FakeMlx5Device);
  dev->wire_ = std::move(wire);
  nic_opts.sq_wqes = opts.ring_size;
  nic_opts.rq_wqes = opts.ring_size;
  dev->nic_ = std::make_unique<FakeNic>(dev->wire_.get(), port, nic_opts);

  DeviceInfo& info = dev->info_;
  info.uri = absl::StrCat("mlx5-fake:", port);
  info.driver = "mlx5";
  info.mtu = opts.mtu;
  info.mac.bytes = {0x02, 0x00, 0x00, 0x00, 0x5f, static_cast<uint8_t>(port + 1)};
  info.ipv4 = opts.ipv4 ? *opts.ipv4
                        : Ipv4Address{(10u << 24) | (95u << 16) | static_cast<uint32_t>(port + 1)};
  info.num_queues = 1;
  info.ring_size = opts.ring_size;
  info.offloads = kOffloadRxIpChecksum | kOffloadRxUdpChecksum | kOffloadTxIpChecksum |
                 kOffloadTxUdpChecksum;
  info.can_steer = false;

  hugepage::PoolOptions po;
  po.buffer_size = hugepage::Bytes(Mlx5QueuePair::kDataOffset + info.max_frame());
  po.count = opts.pool_buffers != 0 ? opts.pool_buffers : 4u * opts.ring_size;
  po.region.best = hugepage::Backing::kTransparent;  // no DMA: leave hugetlb pages alone
  po.region.lock = false;
  po.region.name = "bypass-mlx5-fake";
  absl::StatusOr<std::unique_ptr<hugepage::BufferPool>> pool = hugepage::BufferPool::Create(po);
  if (!pool.ok()) return pool.status();
  const uint32_t lkey = 0x5000 + static_cast<uint32_t>(port);
  dev->nic_->RegisterMemory((*pool)->region().data(), (*pool)->region().size().value(), lkey);

  QueuePairParts parts;
  parts.id = 0;
  parts.rings = dev->nic_->memory();
  parts.writer = dev->nic_->writer();
  parts.control = dev.get();
  parts.pool = *std::move(pool);
  parts.lkey = lkey;
  parts.max_frame = info.max_frame();
  parts.send.signal_every = 32;
  parts.send.max_inline = 128;
  absl::StatusOr<std::unique_ptr<Mlx5QueuePair>> qp = Mlx5QueuePair::Create(std::move(parts));
  if (!qp.ok()) return qp.status();
  dev->qp_ = *std::move(qp);
  if (nic_opts.step_on_doorbell) {
    FakeNic* nic = dev->nic_.get();
    dev->qp_->set_rx_kick([nic] { nic->Step(); });
  }
  return dev;
}

FakeMlx5Device::~FakeMlx5Device() {
  if (nic_) nic_->Stop();
}

absl::Status FakeMlx5Device::SteerUdpPort(uint16_t, uint16_t) {
  return absl::UnimplementedError("mlx5 fake NIC: no flow steering (one queue)");
}

absl::Status FakeMlx5Device::SetLinkState(LinkState) {
  return absl::UnimplementedError("mlx5 fake NIC: the link stays up");
}

absl::Status FakeMlx5Device::Recover() {
  nic_->ResetQp();
  return absl::OkStatus();
}

}  // namespace bypass::driver::mlx5
