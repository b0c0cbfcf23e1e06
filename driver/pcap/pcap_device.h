// A decorator that captures what any device sends and receives into a pcap
// or pcapng file (capture_file.h; pcapng: an interface per device, each
// record's direction): `pcap=FILE` on a device URI (driver/open.cc), or
// WrapWithCapture in code.
//
// Every device here hands the layers above whole Ethernet/IPv4/UDP frames,
// so every record is LINKTYPE_ETHERNET with real addresses and ports: the
// frames a NIC carries (loopback, DPDK, mlx5) as they are; the intra-host
// device's lanes carry the sender engine's whole frames; the kernel UDP
// device, whose sockets carry only the UDP payload, synthesizes the
// Ethernet/IPv4/UDP headers of what it receives (the datagram's real
// source and destination address and ports; the source MAC derived from the
// source IPv4, udp::MacFromIpv4; UDP checksum 0) and sends the payload of
// the engine's own frames, which are recorded as the engine built them. So
// Wireshark's UDP dissection and the bypass dissector
// (tools/wireshark/bypass.lua) apply to all of them.
#ifndef BYPASS_DRIVER_PCAP_PCAP_DEVICE_H_
#define BYPASS_DRIVER_PCAP_PCAP_DEVICE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/device.h"
#include "driver/packet.h"
#include "driver/pcap/capture_file.h"

namespace bypass::driver::pcap {

// A queue pair that records every frame its inner queue returns from
// RxBurst and every frame the inner TxBurst takes (in that order, with the
// wall-clock time of the burst). Frames go into a buffer of this queue's
// (a copy per frame, no lock, no system call); a full buffer, or one whose
// first record is older than kFlushAfterNs, is handed to the file's writer
// thread. The rest passes straight through.
class CaptureQueue final : public QueuePair {
 public:
  static constexpr uint64_t kFlushAfterNs = 200'000'000;

  // REQUIRES: inner outlives this queue. `interface`: its device's in the
  // file (CaptureFile::AddInterface).
  CaptureQueue(QueuePair& inner, std::shared_ptr<CaptureFile> file, uint32_t interface);
  CaptureQueue(const CaptureQueue&) = delete;
  CaptureQueue& operator=(const CaptureQueue&) = delete;
  // Hands the last records to the file.
  ~CaptureQueue() override;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override;
  bool AllocBulk(absl::Span<Packet*> out) override { return inner_.AllocBulk(out); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { inner_.FreeBulk(pkts); }
  uint32_t PoolAvailable() const override { return inner_.PoolAvailable(); }
  uint32_t PoolCapacity() const override { return inner_.PoolCapacity(); }
  QueueStats stats() const override { return inner_.stats(); }
  // The capture file's counters (pcap_), then the inner queue's.
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return inner_.id(); }
  absl::Status BindUdpPort(uint16_t port) override { return inner_.BindUdpPort(port); }
  void UnbindUdpPort(uint16_t port) override { inner_.UnbindUdpPort(port); }
  absl::Status JoinGroup(Ipv4Address group, uint16_t udp_port) override {
    return inner_.JoinGroup(group, udp_port);
  }
  void LeaveGroup(Ipv4Address group, uint16_t udp_port) override {
    inner_.LeaveGroup(group, udp_port);
  }
  bool LoopsMulticast() const override { return inner_.LoopsMulticast(); }
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override {
    return inner_.ReadPeerMemory(pid, addr, dst, len);
  }
  bool ReachesSameHost(Ipv4Address ip, uint16_t port) override {
    return inner_.ReachesSameHost(ip, port);
  }

  // Hands what the buffer holds to the file now (tests; the queue's thread).
  void Flush();

 private:
  // Claims the file's budget for a record of `len` bytes' frame; false
  // (counted, and from then on every frame) once it is spent.
  bool Claim(Direction dir, uint32_t len);
  uint32_t TxBytes(uint32_t len) const { return RecordBytes(format_, Direction::kTx, len); }
  // Hands the buffer over if its first record is old enough.
  void FlushIfOld(uint64_t now);

  QueuePair& inner_;
  std::shared_ptr<CaptureFile> file_;
  const RecordFormat format_;
  std::vector<uint8_t> buf_;
  uint64_t buf_records_ = 0;
  uint64_t first_ns_ = 0;    // of the buffer's first record
  uint32_t idle_polls_ = 0;  // empty RxBursts since the clock was last read
  bool full_ = false;        // the file's budget is spent: nothing more is copied
};

// A device whose queue pairs are CaptureQueues over the inner device's;
// info, steering and link state are the inner device's.
class CaptureDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<CaptureDevice>> Create(std::unique_ptr<Device> inner,
                                                               const CaptureOptions& opts);
  CaptureDevice(const CaptureDevice&) = delete;
  CaptureDevice& operator=(const CaptureDevice&) = delete;
  ~CaptureDevice() override;

  const DeviceInfo& info() const override { return inner_->info(); }
  QueuePair& queue(uint16_t q) override { return *queues_[q]; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override {
    return inner_->SteerUdpPort(udp_port, q);
  }
  LinkState link_state() const override { return inner_->link_state(); }
  absl::Status SetLinkState(LinkState state) override { return inner_->SetLinkState(state); }

  CaptureQueue& capture_queue(uint16_t q) { return *queues_[q]; }
  CaptureFile& file() { return *file_; }
  Device& inner() { return *inner_; }

 private:
  CaptureDevice(std::unique_ptr<Device> inner, std::shared_ptr<CaptureFile> file);

  std::unique_ptr<Device> inner_;  // declared first: outlives the queues
  std::shared_ptr<CaptureFile> file_;
  std::vector<std::unique_ptr<CaptureQueue>> queues_;
};

// CaptureDevice::Create as a plain Device.
absl::StatusOr<std::unique_ptr<Device>> WrapWithCapture(std::unique_ptr<Device> inner,
                                                        const CaptureOptions& opts);

}  // namespace bypass::driver::pcap

#endif  // BYPASS_DRIVER_PCAP_PCAP_DEVICE_H_
