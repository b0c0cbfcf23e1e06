// A decorator that injects faults into what any device receives: drop,
// duplicate, reorder, delay and corrupt, at configured rates from a seed,
// behind an optional bottleneck link (a fixed rate and a drop-tail queue).
#ifndef BYPASS_DRIVER_FAULT_FAULT_DEVICE_H_
#define BYPASS_DRIVER_FAULT_FAULT_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "driver/clock.h"
#include "driver/device.h"
#include "driver/fault/fault_options.h"
#include "driver/fault/prng.h"
#include "driver/packet.h"

namespace bypass::driver::fault {

// A queue pair that applies faults to the packets its inner queue receives.
// TX, allocation and freeing pass straight through. Held packets (delayed,
// reordered, or ready but not yet returned) live in fixed arrays sized at
// construction; nothing on the burst path allocates. Packets still held at
// destruction are freed to the inner queue.
class FaultQueue final : public QueuePair {
 public:
  // REQUIRES: inner and clock outlive this queue; ValidateFaultOptions(opts).
  FaultQueue(QueuePair& inner, const FaultOptions& opts, uint64_t seed, const Clock& clock);
  FaultQueue(const FaultQueue&) = delete;
  FaultQueue& operator=(const FaultQueue&) = delete;
  ~FaultQueue() override;

  uint16_t RxBurst(absl::Span<Packet*> out) override;
  uint16_t TxBurst(absl::Span<Packet* const> pkts) override { return inner_.TxBurst(pkts); }
  bool AllocBulk(absl::Span<Packet*> out) override { return inner_.AllocBulk(out); }
  void FreeBulk(absl::Span<Packet* const> pkts) override { inner_.FreeBulk(pkts); }
  uint32_t PoolAvailable() const override { return inner_.PoolAvailable(); }
  uint32_t PoolCapacity() const override { return inner_.PoolCapacity(); }
  // The inner queue's stats, with rx_packets/rx_bytes counting what this
  // queue returned.
  QueueStats stats() const override;
  // Its fault counters (fault_), then the inner queue's.
  void AppendCounters(NamedCounters* out) const override;
  uint16_t id() const override { return inner_.id(); }
  int64_t ReadPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len) override {
    return inner_.ReadPeerMemory(pid, addr, dst, len);
  }
  int64_t ReadPeerMemoryV(uint32_t pid, absl::Span<const PeerRange> ranges) override {
    return inner_.ReadPeerMemoryV(pid, ranges);
  }
  bool ReachesSameHost(Ipv4Address ip, uint16_t port) override {
    return inner_.ReachesSameHost(ip, port);
  }
  PeerLiveness PeerAlive(Ipv4Address ip, uint16_t port) override {
    return inner_.PeerAlive(ip, port);
  }
  absl::Status BindUdpPort(uint16_t port) override { return inner_.BindUdpPort(port); }
  void UnbindUdpPort(uint16_t port) override { inner_.UnbindUdpPort(port); }

  const FaultCounters& counters() const { return counters_; }
  size_t held_reordered() const { return reorder_count_; }
  size_t held_delayed() const { return delayed_.size(); }
  size_t held_queued() const { return link_.size(); }  // in the bottleneck's FIFO

 private:
  static constexpr size_t kChunk = 64;  // packets pulled from the inner queue at once

  // A fixed-capacity FIFO of T.
  template <typename T>
  class Fifo {
   public:
    explicit Fifo(size_t capacity) : slots_(new T[capacity]), capacity_(capacity) {}
    bool empty() const { return size_ == 0; }
    bool full() const { return size_ == capacity_; }
    size_t size() const { return size_; }
    const T& front() const { return slots_[head_]; }
    void Push(const T& v) { slots_[(head_ + size_++) % capacity_] = v; }  // REQUIRES: !full()
    T Pop() {  // REQUIRES: !empty()
      T v = slots_[head_];
      head_ = (head_ + 1) % capacity_;
      --size_;
      return v;
    }

   private:
    std::unique_ptr<T[]> slots_;
    size_t capacity_;
    size_t head_ = 0;
    size_t size_ = 0;
  };
  // A delayed packet and when it is due.
  struct Delayed {
    Packet* pkt = nullptr;
    uint64_t due_ns = 0;
  };
  // A reordered packet and how many later packets it still waits for.
  struct Held {
    Packet* pkt = nullptr;
    uint32_t left = 0;
  };

  // The bottleneck (rate_pps): takes what the inner queue has into the
  // link's FIFO (drop-tail), then returns in `in` up to `max` packets whose
  // departure time has come.
  uint16_t PullThroughLink(Packet** in, size_t max, uint64_t now);
  // Departures the link has made room for since it last went busy.
  uint64_t LinkDepartures(uint64_t now) const;
  void Process(Packet* p, uint64_t now);
  Packet* Duplicate(const Packet& p);
  bool Corrupt(Packet* p);
  // Queues p for delivery, then counts it as a "later packet" for held ones.
  void Emit(Packet* p);
  void ReleaseOldestReordered();

  QueuePair& inner_;
  const FaultOptions opts_;
  const Clock& clock_;
  Xoshiro256 rng_;
  Fifo<Packet*> ready_;        // processed, to be returned by RxBurst
  Fifo<Delayed> delayed_;      // in arrival order, hence due order
  Fifo<Packet*> link_;         // the bottleneck's queue (rate_pps)
  uint64_t link_busy_since_ns_ = 0;
  uint64_t link_sent_ = 0;     // packets that left it since then
  std::unique_ptr<Held[]> reorder_;  // oldest first, reorder_count_ used
  size_t reorder_count_ = 0;
  std::unique_ptr<Packet*[]> to_free_;  // dropped packets of one inner burst
  size_t to_free_count_ = 0;
  FaultCounters counters_;
  uint64_t rx_packets_ = 0;
  uint64_t rx_bytes_ = 0;
};

// A device whose queue pairs are FaultQueues over the inner device's. Owns
// the inner device; info (but for `lossless`: this device drops), steering
// and link state are the inner device's.
class FaultDevice final : public Device {
 public:
  // REQUIRES: clock outlives the device (tests pass a ManualClock).
  static absl::StatusOr<std::unique_ptr<FaultDevice>> Create(
      std::unique_ptr<Device> inner, const FaultOptions& opts,
      const Clock& clock = SteadyClock::Get());
  FaultDevice(const FaultDevice&) = delete;
  FaultDevice& operator=(const FaultDevice&) = delete;
  ~FaultDevice() override;

  const DeviceInfo& info() const override { return info_; }
  QueuePair& queue(uint16_t q) override { return *queues_[q]; }
  absl::Status SteerUdpPort(uint16_t udp_port, uint16_t q) override {
    return inner_->SteerUdpPort(udp_port, q);
  }
  LinkState link_state() const override { return inner_->link_state(); }
  absl::Status SetLinkState(LinkState state) override { return inner_->SetLinkState(state); }

  FaultQueue& fault_queue(uint16_t q) { return *queues_[q]; }
  // Summed over queues; call when no queue is in a burst call.
  FaultCounters counters() const;
  Device& inner() { return *inner_; }
  const FaultOptions& options() const { return opts_; }

 private:
  FaultDevice(std::unique_ptr<Device> inner, const FaultOptions& opts, const Clock& clock);

  std::unique_ptr<Device> inner_;  // declared first: outlives the queues freeing into it
  FaultOptions opts_;
  DeviceInfo info_;
  std::vector<std::unique_ptr<FaultQueue>> queues_;
};

// ParseFaultSpec(spec) and FaultDevice::Create in one call.
absl::StatusOr<std::unique_ptr<Device>> WrapWithFaults(std::unique_ptr<Device> inner,
                                                       std::string_view spec,
                                                       const Clock& clock = SteadyClock::Get());

}  // namespace bypass::driver::fault

#endif  // BYPASS_DRIVER_FAULT_FAULT_DEVICE_H_
