// A single-producer single-consumer ring of frame slots joining one sender
// queue to one receiver queue of the loopback backend.
#ifndef BYPASS_DRIVER_LOOPBACK_SPSC_RING_H_
#define BYPASS_DRIVER_LOOPBACK_SPSC_RING_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

namespace bypass::driver::loopback {

// A ring of `slots` frame slots of `slot_bytes` each: the producer copies a
// frame in, the consumer copies it out. Exactly one producer thread and one
// consumer thread. Indices are free-running uint32_t masked by slots - 1: the
// differences tail - head are correct across wrap-around because unsigned
// arithmetic is modulo 2^32 and slots <= 2^31.
class SpscRing {
 public:
  // REQUIRES: slots is a power of two in [1, 2^31]; slot_bytes > 0.
  SpscRing(uint32_t slots, uint32_t slot_bytes);
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  uint32_t slots() const { return mask_ + 1; }
  uint32_t slot_bytes() const { return slot_bytes_; }

  // --- Producer side. Frames are staged, then made visible by Publish().

  // True if one more frame can be staged.
  bool CanStage() {
    if (prod_.staged - prod_.cached_head <= mask_) return true;
    // Pairs with the consumer's release store in Release(): the slots it
    // read are free before we overwrite them.
    prod_.cached_head = head_.value.load(std::memory_order_acquire);
    return prod_.staged - prod_.cached_head <= mask_;
  }
  // REQUIRES: CanStage() returned true; len <= slot_bytes().
  void Stage(const uint8_t* frame, uint32_t len) {
    const uint32_t i = prod_.staged & mask_;
    lens_[i] = len;
    std::memcpy(frames_.get() + static_cast<size_t>(i) * slot_bytes_, frame, len);
    ++prod_.staged;
  }
  // Makes every staged frame visible to the consumer.
  void Publish() {
    if (prod_.staged == prod_.published) return;
    prod_.published = prod_.staged;
    // Pairs with the consumer's acquire load in Readable(): the slot bytes
    // and lengths written by Stage() are visible before the new tail.
    tail_.value.store(prod_.staged, std::memory_order_release);
  }

  // --- Consumer side.

  // Frames ready to read.
  uint32_t Readable() {
    if (cons_.cached_tail == cons_.head) {
      // Pairs with the producer's release store in Publish().
      cons_.cached_tail = tail_.value.load(std::memory_order_acquire);
    }
    return cons_.cached_tail - cons_.head;
  }
  // The i-th readable frame. REQUIRES: i < Readable().
  const uint8_t* Frame(uint32_t i, uint32_t* len) const {
    const uint32_t slot = (cons_.head + i) & mask_;
    *len = lens_[slot];
    return frames_.get() + static_cast<size_t>(slot) * slot_bytes_;
  }
  // Frees the first n readable frames. REQUIRES: n <= Readable().
  void Release(uint32_t n) {
    if (n == 0) return;
    cons_.head += n;
    // Pairs with the producer's acquire load in CanStage().
    head_.value.store(cons_.head, std::memory_order_release);
  }

 private:
  // Each index on its own cache line; each side's private copies on another.
  // A ring index shared between the two threads.
  struct alignas(64) Index {
    std::atomic<uint32_t> value{0};
  };
  // What only the producer thread touches.
  struct alignas(64) ProducerState {
    uint32_t staged = 0;       // next slot to fill
    uint32_t published = 0;    // last value stored to tail_
    uint32_t cached_head = 0;  // consumer index as last seen
  };
  // What only the consumer thread touches.
  struct alignas(64) ConsumerState {
    uint32_t head = 0;         // next slot to read
    uint32_t cached_tail = 0;  // producer index as last seen
  };

  Index tail_;  // written by the producer, read by the consumer
  Index head_;  // written by the consumer, read by the producer
  ProducerState prod_;
  ConsumerState cons_;
  const uint32_t mask_;
  const uint32_t slot_bytes_;
  std::unique_ptr<uint32_t[]> lens_;
  std::unique_ptr<uint8_t[]> frames_;
};

}  // namespace bypass::driver::loopback

#endif  // BYPASS_DRIVER_LOOPBACK_SPSC_RING_H_
