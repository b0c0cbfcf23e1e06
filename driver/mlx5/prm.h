// The ConnectX data-path layout bypass writes and reads: WQE segments, CQE
// field offsets and the constants of rdma-core's mlx5dv.h (v44), restated
// here so the ring code builds without rdma-core; layout_test.cc checks every
// offset and size against mlx5dv.h itself.
#ifndef BYPASS_DRIVER_MLX5_PRM_H_
#define BYPASS_DRIVER_MLX5_PRM_H_

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bypass::driver::mlx5 {

inline constexpr uint32_t kWqeBb = 64;       // send WQE basic block (sq.stride)
inline constexpr uint32_t kDsBytes = 16;     // one "DS" (octoword) of a WQE
inline constexpr uint32_t kCqeBytes = 64;    // CQEs are created 64 bytes wide
inline constexpr uint32_t kRqEntryBytes = 16;  // one data segment per RQ entry

// Not in mlx5dv.h: the Ethernet L2 header bytes inlined into every send WQE
// (valid on every ConnectX, required on ConnectX-4 and 4 Lx).
inline constexpr uint32_t kEthL2InlineHeaderSize = 18;  // MLX5_ETH_L2_INLINE_HEADER_SIZE

inline constexpr uint8_t kOpcodeSend = 0x0a;           // MLX5_OPCODE_SEND
inline constexpr uint8_t kWqeCtrlCqUpdate = 2 << 2;    // MLX5_WQE_CTRL_CQ_UPDATE
inline constexpr uint32_t kInlineSeg = 0x80000000u;    // MLX5_INLINE_SEG
inline constexpr uint32_t kInvalidLkey = 0x100;        // MLX5_INVALID_LKEY
inline constexpr uint8_t kEthWqeL3Csum = 1 << 6;       // MLX5_ETH_WQE_L3_CSUM
inline constexpr uint8_t kEthWqeL4Csum = 1 << 7;       // MLX5_ETH_WQE_L4_CSUM
inline constexpr int kRcvDbr = 0;                      // MLX5_RCV_DBR
inline constexpr int kSndDbr = 1;                      // MLX5_SND_DBR
inline constexpr uint8_t kCqeL3Ok = 1 << 1;            // MLX5_CQE_L3_OK (hds_ip_ext)
inline constexpr uint8_t kCqeL4Ok = 1 << 2;            // MLX5_CQE_L4_OK (hds_ip_ext)
inline constexpr uint8_t kCqeOwnerMask = 1;            // MLX5_CQE_OWNER_MASK

// CQE opcodes (op_own >> 4).
enum class CqeOpcode : uint8_t {
  kReq = 0,        // MLX5_CQE_REQ
  kRespSend = 2,   // MLX5_CQE_RESP_SEND
  kReqErr = 13,    // MLX5_CQE_REQ_ERR
  kRespErr = 14,   // MLX5_CQE_RESP_ERR
  kInvalid = 15,   // MLX5_CQE_INVALID (rdma-core pre-fills op_own with 0xf0)
};

// Error CQE syndromes (mlx5_err_cqe::syndrome).
enum class CqeSyndrome : uint8_t {
  kLocalLengthErr = 0x01,
  kLocalQpOpErr = 0x02,
  kLocalProtErr = 0x04,
  kWrFlushErr = 0x05,
  kMwBindErr = 0x06,
  kBadRespErr = 0x10,
  kLocalAccessErr = 0x11,
  kRemoteInvalReqErr = 0x12,
  kRemoteAccessErr = 0x13,
  kRemoteOpErr = 0x14,
  kTransportRetryExcErr = 0x15,
  kRnrRetryExcErr = 0x16,
  kRemoteAbortedErr = 0x22,
};

// Control segment (mlx5_wqe_ctrl_seg); multi-byte fields big-endian.
struct __attribute__((packed, aligned(4))) CtrlSeg {
  uint32_t opmod_idx_opcode;
  uint32_t qpn_ds;
  uint8_t signature;
  uint16_t dci_stream_channel_id;
  uint8_t fm_ce_se;
  uint32_t imm;
};
static_assert(sizeof(CtrlSeg) == 16);

// Ethernet segment (mlx5_wqe_eth_seg): inline_hdr_start runs into inline_hdr.
struct EthSeg {
  uint32_t rsvd0;
  uint8_t cs_flags;
  uint8_t rsvd1;
  uint16_t mss;
  uint32_t rsvd2;
  uint16_t inline_hdr_sz;
  uint8_t inline_hdr_start[2];
  uint8_t inline_hdr[16];
};
static_assert(sizeof(EthSeg) == 32);

// Data segment (mlx5_wqe_data_seg): send gather entry and RQ entry.
struct DataSeg {
  uint32_t byte_count;
  uint32_t lkey;
  uint64_t addr;
};
static_assert(sizeof(DataSeg) == 16);

// Byte offsets into a 64-byte CQE (mlx5_cqe64 and mlx5_err_cqe overlay it).
struct CqeOffset {
  static constexpr size_t kHdsIpExt = 28;       // mlx5_cqe64::hds_ip_ext
  static constexpr size_t kByteCnt = 44;        // mlx5_cqe64::byte_cnt
  static constexpr size_t kVendorErrSynd = 54;  // mlx5_err_cqe::vendor_err_synd
  static constexpr size_t kSyndrome = 55;       // mlx5_err_cqe::syndrome
  static constexpr size_t kSopDropQpn = 56;     // mlx5_cqe64::sop_drop_qpn
  static constexpr size_t kWqeCounter = 60;     // mlx5_cqe64::wqe_counter
  static constexpr size_t kSignature = 62;      // mlx5_cqe64::signature
  static constexpr size_t kOpOwn = 63;          // mlx5_cqe64::op_own, written last
};

// A send WQE's size in DS for a frame of `len` bytes: ctrl 1 + eth 2, then
// one data segment, or (inline) the rest of the frame after a 4-byte header.
constexpr uint32_t SendWqeDs(uint32_t len, bool inline_data) {
  const uint32_t rest = len > kEthL2InlineHeaderSize ? len - kEthL2InlineHeaderSize : 0;
  if (!inline_data) return 3 + (rest ? 1 : 0);
  return 3 + (rest ? (rest + 4 + kDsBytes - 1) / kDsBytes : 0);
}
// Big-endian fields of WQEs and CQEs, read without alignment assumptions.
inline uint16_t Be16At(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return be16toh(v);
}
inline uint32_t Be32At(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return be32toh(v);
}
inline uint64_t Be64At(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return be64toh(v);
}

constexpr uint32_t DsToWqeBbs(uint32_t ds) { return (ds * kDsBytes + kWqeBb - 1) / kWqeBb; }

}  // namespace bypass::driver::mlx5

#endif  // BYPASS_DRIVER_MLX5_PRM_H_
