// Send operations: what each kind of operation is (one table, kOpTraits:
// the only place the engine dispatches on OpKind), the operation record a
// peer's stream carries, and the fixed table they live in.
#ifndef BYPASS_FABRIC_RDM_OPS_H_
#define BYPASS_FABRIC_RDM_OPS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "fabric/rdm/context.h"
#include "fabric/rdm/index_list.h"
#include "fabric/rdm/psn.h"
#include "fabric/rdm/wire.h"

namespace bypass::rdm {

// What an operation is. kMsg..kRead and kAtomic take one of the
// application's send slots (max_send_ops); the others are the engine's own
// (max_rma_ops).
enum class OpKind : uint8_t {
  kMsg,          // an eager message: DATA segments
  kRndvRequest,  // a rendezvous message's request to send: one DATA packet, no payload
  kRndvData,     // the same message once its receiver pulled it: READ_DATA
  kWrite,        // RMA write: WRITE segments, then a RESPONSE from the target
  kRead,         // RMA read: a READ_REQ, then READ_DATA into the caller's buffer
  kPull,         // (receiver) the READ_REQ pulling a rendezvous message, then its READ_DATA
  kReadData,     // (target) the READ_DATA answering a peer's read
  kResponse,     // (target) a RESPONSE to a peer's write or refused read or pull
  kAtomic,       // an atomic: one ATOMIC packet, then the target's ATOMIC_RESP
  kAtomicResp,   // (target) the ATOMIC_RESP to a peer's atomic, with the values it fetched
};
inline constexpr size_t kOpKinds = 10;

// What happens to an operation once every packet of it is acknowledged.
enum class AfterAck : uint8_t {
  kComplete,     // it is done: its completion (a send, a pulled message)
  kAwaitAnswer,  // it waits for the peer's answer (Reliability's waiting list)
  kFree,         // an answer of ours: nothing more to do
};

// What happens to an operation whose peer's session ends before it does.
enum class OnFail : uint8_t {
  kReport,         // an error completion for the application's operation
  kFailReceive,    // a pull: the receive it pulls into completes in error (Messaging)
  kDrop,           // an answer of ours: dropped with the session
};

// Everything that differs between kinds of operation.
struct OpTraits {
  const char* name;
  bool user;          // posted by the application (a send slot, a completion)
  bool jumps_queue;   // answers and pulled bytes: before user ops not yet started
  bool holds_stream;  // sent, it holds the user's later ops until the peer answers
  bool may_give_up;   // a message the receiver may refuse for rnr_give_up_ns
  AfterAck after_ack;
  OnFail on_fail;
};

inline constexpr OpTraits kOpTraits[kOpKinds] = {
    // name        user   jumps  holds  give_up after_ack              on_fail
    {"msg",        true,  false, false, true,  AfterAck::kComplete,    OnFail::kReport},
    {"rndv-req",   true,  false, true,  true,  AfterAck::kAwaitAnswer, OnFail::kReport},
    {"rndv-data",  true,  true,  false, false, AfterAck::kComplete,    OnFail::kReport},
    {"write",      true,  false, false, false, AfterAck::kAwaitAnswer, OnFail::kReport},
    {"read",       true,  false, false, false, AfterAck::kAwaitAnswer, OnFail::kReport},
    {"pull",       false, true,  false, false, AfterAck::kAwaitAnswer, OnFail::kFailReceive},
    {"read-data",  false, true,  false, false, AfterAck::kFree,        OnFail::kDrop},
    {"response",   false, true,  false, false, AfterAck::kFree,        OnFail::kDrop},
    {"atomic",     true,  false, false, false, AfterAck::kAwaitAnswer, OnFail::kReport},
    {"atomic-resp", false, true, false, false, AfterAck::kFree,        OnFail::kDrop},
};
inline const OpTraits& Traits(OpKind k) { return kOpTraits[static_cast<size_t>(k)]; }

// Where an operation is.
enum class OpState : uint8_t {
  kIdle,     // allocated, in no list (being set up, or ending)
  kQueued,   // in its peer's stream (Reliability: packets to send or unacknowledged)
  kWaiting,  // every packet acknowledged, waiting for the peer's answer
};

// One operation, from post to its end. Its packets are built from a header
// template (msg or rma, by `type`) and `src`: they differ only in offset
// and payload, so the stream that sends and resends them needs nothing of
// what the operation means.
struct SendOp {
  OpKind kind = OpKind::kMsg;
  OpState state = OpState::kIdle;
  // The application's (user kinds): the completion to report.
  void* context = nullptr;
  uint64_t comp_flags = 0;  // Completion::flags
  uint64_t len = 0;         // bytes the completion reports
  bool inject = false;      // no completion to come (inject, or buffered: it came at once)
  bool ack_now = false;     // kSendAckNow: its last packet asks for an ACK at once
  // Given up (the receiver refused it for rnr_give_up_ns): completed in
  // error already; or taken by the receiver from a bundle it refused after
  // it (Reliability::TakenFromBundle): completed already. What is in
  // flight goes as kMsgAbandoned, the rest never.
  bool abandoned = false;
  uint32_t peer = kNone;

  // The wire: a packet of type at offset o carries src + o (if src).
  wire::PacketType type = wire::PacketType::kData;
  wire::MsgFields msg;
  wire::RmaFields rma;
  const uint8_t* src = nullptr;
  uint64_t wire_len = 0;  // payload bytes this phase streams (0: one packet)

  // The stream (Reliability).
  bool started = false;  // a packet of it went out in this session
  bool all_sent = false;
  Psn last_psn;

  // Answers (kRead, kPull) and what they hold.
  uint64_t rx_done = 0;      // answer bytes arrived
  uint8_t* dst = nullptr;    // kRead, kPull: where the answer goes
  uint32_t slot = kNone;     // kPull: the receive slot it pulls into
  uint64_t total = 0;        // kPull: the message's length (len: the bytes pulled)
  uint32_t* ref = nullptr;   // a count this op holds while it lives (a region's reads)
  // kPull: the message was read in place into dst (its READ_REQ says
  // COPIED); the receive completes on the sender's RESPONSE, or at once
  // when the sender's guard word vouched for the bytes (`delivered`).
  bool copied = false;
  bool delivered = false;  // kPull: its receive has completed; o only awaits the RESPONSE
  // kRndvRequest/kRndvData with an in-place offer: the guard word the
  // offer names (OpTable::ArmGuard), cleared as the send ends (RevokeOffer).
  uint64_t* offer_guard = nullptr;

  uint32_t prev = kNone;
  uint32_t next = kNone;
};

static_assert(std::is_trivially_copyable_v<SendOp>);
inline const SendOp kFreshOp{};  // what OpTable::Alloc starts every op from

// The send's in-place offer stops standing: its guard word is cleared
// before the application can learn that the send ended (and reuse the
// buffer), so a receiver that reads the word after the bytes and still
// finds the offer's value knows the bytes were the message's (PROTOCOL.md,
// "Reading in place"). Sequentially consistent: no later store, the
// application's to the buffer included, is seen before it.
inline void RevokeOffer(const SendOp& op) {
  if (op.offer_guard != nullptr) {
    std::atomic_ref<uint64_t>(*op.offer_guard).store(0, std::memory_order_seq_cst);
  }
}

// Sets op up as a RESPONSE (kResponse) naming the initiator's rma_id, key,
// addr and length, with the target's verdict.
inline void MakeResponse(SendOp& op, uint8_t flags, wire::RmaStatus status, uint32_t rma_id,
                         uint64_t key, uint64_t addr, uint64_t total) {
  op.type = wire::PacketType::kRma;
  op.rma.op = wire::RmaOp::kResponse;
  op.rma.flags = flags;
  op.rma.status = status;
  op.rma.rma_id = rma_id;
  op.rma.key = key;
  op.rma.addr = addr;
  op.rma.total_length = total;
  op.wire_len = 0;
}

// The fixed table of operations: max_send_ops slots for the application's,
// then max_rma_ops for the engine's, each with a generation so that an
// answer naming an op that ended is not taken for the op reusing its slot.
class OpTable {
 public:
  OpTable(Context& ctx, uint32_t user_slots, uint32_t engine_slots, uint32_t inject_size);
  OpTable(const OpTable&) = delete;
  OpTable& operator=(const OpTable&) = delete;
  // Clears every guard word before its memory goes (an endpoint closed
  // with offers standing): freed memory keeps its bytes.
  ~OpTable();

  // A fresh op of `kind` (user kinds from the user slots), or kNone.
  uint32_t Alloc(OpKind kind) {
    const bool user = Traits(kind).user;
    FreeSlots& pool = user ? free_user_ : free_engine_;
    if (pool.empty()) return kNone;
    const uint32_t o = user ? pool.Pop() : user_slots_ + pool.Pop();
    // A fresh op, copied from kFreshOp: value-initialising in place
    // (std::construct_at) compiled to `rep stosq` over the 264 bytes, the
    // hottest instruction of Messaging::PostSend in a 64 B message-rate
    // profile (wire::LibcCopy says why).
    wire::LibcCopy(static_cast<void*>(&ops_[o]), &kFreshOp, sizeof(SendOp));
    ops_[o].kind = kind;
    ++live_[static_cast<size_t>(kind)];
    return o;
  }
  // Ends op o: its generation moves on, its ref is released; a freed
  // engine op is noted (Context::NoteFreed).
  void Free(uint32_t o) {
    SendOp& op = ops_[o];
    RevokeOffer(op);
    --live_[static_cast<size_t>(op.kind)];
    if (op.ref != nullptr) --*op.ref;
    op.ref = nullptr;
    op.state = OpState::kIdle;
    gen_[o] = static_cast<uint16_t>((gen_[o] + 1) & ((1u << (32 - kRmaIdSlotBits)) - 1));
    if (IsUser(o)) {
      free_user_.Push(o);
    } else {
      free_engine_.Push(o - user_slots_);
      ctx_.NoteFreed();  // a peer we refused for lack of one may retry now
    }
  }
  // Changes the kind of a live op (a pulled rendezvous request).
  void SetKind(uint32_t o, OpKind kind) {
    --live_[static_cast<size_t>(ops_[o].kind)];
    ops_[o].kind = kind;
    ++live_[static_cast<size_t>(kind)];
  }

  SendOp& operator[](uint32_t o) { return ops_[o]; }
  const SendOp& operator[](uint32_t o) const { return ops_[o]; }
  SendOp* base() { return ops_.get(); }
  bool IsUser(uint32_t o) const { return o < user_slots_; }
  uint32_t capacity() const { return user_slots_ + engine_slots_; }
  uint32_t user_free() const { return free_user_.available(); }
  bool engine_free() const { return !free_engine_.empty(); }
  uint32_t live(OpKind k) const { return live_[static_cast<size_t>(k)]; }
  // Arms user op o's guard word for an in-place offer: a value never used
  // before, held until the send ends (RevokeOffer). Returns the word; its
  // value is *word.
  uint64_t* ArmGuard(uint32_t o) {
    if (next_guard_ == 0) next_guard_ = ctx_.Random() | 1;
    uint64_t* g = &guards_[o];
    std::atomic_ref<uint64_t>(*g).store(next_guard_, std::memory_order_seq_cst);
    next_guard_ = next_guard_ + 1 == 0 ? 1 : next_guard_ + 1;
    ops_[o].offer_guard = g;
    return g;
  }
  // Where an inject copies its bytes (inject_size per user slot).
  uint8_t* inject_buffer(uint32_t o) { return inject_arena_.get() + uint64_t{o} * inject_size_; }
  // An atomic's bytes for as long as its op lives (2 * kMaxAtomicBytes per
  // slot, user and engine): the operands of a request, the fetched values
  // of an answer, resent from here if lost. Allocated at the first atomic.
  uint8_t* atomic_buffer(uint32_t o) {
    if (atomic_arena_ == nullptr) {
      atomic_arena_.reset(new uint8_t[uint64_t{capacity()} * kAtomicSlotBytes]);
    }
    return atomic_arena_.get() + uint64_t{o} * kAtomicSlotBytes;
  }
  static constexpr uint32_t kAtomicSlotBytes = 2 * kMaxAtomicBytes;

  // An op's name on the wire (RmaHeader::rma_id): its slot in the low bits
  // (at most 2^21 slots: config.cc), the slot's generation above.
  static constexpr uint32_t kRmaIdSlotBits = 21;
  uint32_t RmaId(uint32_t o) const { return uint32_t{gen_[o]} << kRmaIdSlotBits | o; }
  // The op an answer names, if it is still that op; else kNone.
  uint32_t FromRmaId(uint32_t rma_id) const {
    const uint32_t o = rma_id & ((1u << kRmaIdSlotBits) - 1);
    if (o >= uint64_t{user_slots_} + engine_slots_) return kNone;
    return rma_id >> kRmaIdSlotBits == gen_[o] ? o : kNone;
  }
  // The op of `kind` that answer r from peer pi is for: alive (by its
  // generation), of pi, waiting for an answer, and echoed with the key and
  // length it asked with (a READ_DATA also at the next offset); else kNone
  // (a stale, misdirected or forged answer).
  uint32_t Answered(uint32_t pi, const wire::RmaFields& r, OpKind kind) const {
    const uint32_t o = FromRmaId(r.rma_id);
    if (o == kNone) return kNone;
    const SendOp& op = ops_[o];
    const bool ok = op.kind == kind && op.state == OpState::kWaiting && op.peer == pi &&
                    r.key == op.rma.key && r.total_length == op.len &&
                    (r.op != wire::RmaOp::kReadData || r.offset == op.rx_done);
    return ok ? o : kNone;
  }

 private:
  Context& ctx_;
  const uint32_t user_slots_;
  const uint32_t engine_slots_;
  const uint32_t inject_size_;
  std::unique_ptr<SendOp[]> ops_;
  std::unique_ptr<uint16_t[]> gen_;  // +1 (mod 2^11) each time an op in the slot ends
  FreeSlots free_user_;
  FreeSlots free_engine_;  // numbered from user_slots_
  uint32_t live_[kOpKinds] = {};
  std::unique_ptr<uint8_t[]> inject_arena_;
  // One guard word per user slot, read by peers of this host (ArmGuard).
  std::unique_ptr<uint64_t[]> guards_;
  uint64_t next_guard_ = 0;  // 0: not seeded yet
  std::unique_ptr<uint8_t[]> atomic_arena_;
};

}  // namespace bypass::rdm

#endif  // BYPASS_FABRIC_RDM_OPS_H_
