// prm.h against rdma-core's mlx5dv.h (v44): every offset, size and constant
// the ring code uses, and the encoder's bytes against the header's own
// mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg and mlx5dv_set_eth_seg.
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/mlx5/prm.h"
#include "driver/mlx5/recording_writer.h"
#include "driver/mlx5/ring.h"
#include "gtest/gtest.h"

namespace bypass::driver::mlx5 {
namespace {

#define SAME_FIELD(ours, theirs, field)                                  \
  static_assert(offsetof(ours, field) == offsetof(theirs, field), #field); \
  static_assert(sizeof(ours::field) == sizeof(theirs::field), #field)

static_assert(sizeof(CtrlSeg) == sizeof(mlx5_wqe_ctrl_seg));
static_assert(alignof(CtrlSeg) == alignof(mlx5_wqe_ctrl_seg));
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, opmod_idx_opcode);
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, qpn_ds);
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, signature);
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, dci_stream_channel_id);
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, fm_ce_se);
SAME_FIELD(CtrlSeg, mlx5_wqe_ctrl_seg, imm);

static_assert(sizeof(EthSeg) == sizeof(mlx5_wqe_eth_seg));
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, rsvd0);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, cs_flags);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, rsvd1);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, mss);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, rsvd2);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, inline_hdr_sz);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, inline_hdr_start);
SAME_FIELD(EthSeg, mlx5_wqe_eth_seg, inline_hdr);
// The 18 inline bytes run from inline_hdr_start to the end of the segment.
static_assert(sizeof(mlx5_wqe_eth_seg) - offsetof(mlx5_wqe_eth_seg, inline_hdr_start) ==
              kEthL2InlineHeaderSize);

static_assert(sizeof(DataSeg) == sizeof(mlx5_wqe_data_seg));
SAME_FIELD(DataSeg, mlx5_wqe_data_seg, byte_count);
SAME_FIELD(DataSeg, mlx5_wqe_data_seg, lkey);
SAME_FIELD(DataSeg, mlx5_wqe_data_seg, addr);
static_assert(sizeof(mlx5_wqe_inl_data_seg) == 4);

static_assert(sizeof(mlx5_cqe64) == kCqeBytes);
static_assert(sizeof(mlx5_err_cqe) == kCqeBytes);
static_assert(offsetof(mlx5_cqe64, hds_ip_ext) == CqeOffset::kHdsIpExt);
static_assert(offsetof(mlx5_cqe64, byte_cnt) == CqeOffset::kByteCnt);
static_assert(offsetof(mlx5_cqe64, sop_drop_qpn) == CqeOffset::kSopDropQpn);
static_assert(offsetof(mlx5_cqe64, wqe_counter) == CqeOffset::kWqeCounter);
static_assert(offsetof(mlx5_cqe64, signature) == CqeOffset::kSignature);
static_assert(offsetof(mlx5_cqe64, op_own) == CqeOffset::kOpOwn);
static_assert(offsetof(mlx5_err_cqe, vendor_err_synd) == CqeOffset::kVendorErrSynd);
static_assert(offsetof(mlx5_err_cqe, syndrome) == CqeOffset::kSyndrome);
static_assert(offsetof(mlx5_err_cqe, s_wqe_opcode_qpn) == CqeOffset::kSopDropQpn);
static_assert(offsetof(mlx5_err_cqe, wqe_counter) == CqeOffset::kWqeCounter);
static_assert(offsetof(mlx5_err_cqe, op_own) == CqeOffset::kOpOwn);

static_assert(kOpcodeSend == MLX5_OPCODE_SEND);
static_assert(kWqeCtrlCqUpdate == MLX5_WQE_CTRL_CQ_UPDATE);
static_assert(kInlineSeg == MLX5_INLINE_SEG);
static_assert(kInvalidLkey == MLX5_INVALID_LKEY);
static_assert(kEthWqeL3Csum == MLX5_ETH_WQE_L3_CSUM);
static_assert(kEthWqeL4Csum == MLX5_ETH_WQE_L4_CSUM);
static_assert(kRcvDbr == MLX5_RCV_DBR);
static_assert(kSndDbr == MLX5_SND_DBR);
static_assert(kCqeL3Ok == MLX5_CQE_L3_OK);
static_assert(kCqeL4Ok == MLX5_CQE_L4_OK);
static_assert(kCqeOwnerMask == MLX5_CQE_OWNER_MASK);
static_assert(static_cast<int>(CqeOpcode::kReq) == MLX5_CQE_REQ);
static_assert(static_cast<int>(CqeOpcode::kRespSend) == MLX5_CQE_RESP_SEND);
static_assert(static_cast<int>(CqeOpcode::kReqErr) == MLX5_CQE_REQ_ERR);
static_assert(static_cast<int>(CqeOpcode::kRespErr) == MLX5_CQE_RESP_ERR);
static_assert(static_cast<int>(CqeOpcode::kInvalid) == MLX5_CQE_INVALID);
static_assert(static_cast<int>(CqeSyndrome::kLocalLengthErr) == MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
static_assert(static_cast<int>(CqeSyndrome::kLocalProtErr) == MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
static_assert(static_cast<int>(CqeSyndrome::kWrFlushErr) == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
static_assert(static_cast<int>(CqeSyndrome::kRemoteAbortedErr) ==
              MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);

// One send queue of `n` WQEBBs on a plain buffer.
struct Sq {
  explicit Sq(uint32_t n, uint16_t start_pi = 0, uint32_t max_inline = 0)
      : buf(n * kWqeBb, 0xee),
        writer(&dbrec[kSndDbr]),
        sq({buf.data(), n, kWqeBb}, &dbrec[kSndDbr], 0x1234, &writer,
           SendOptions{.signal_every = 4, .max_inline = max_inline}, start_pi) {}
  std::vector<uint8_t> buf;
  uint32_t dbrec[2] = {};
  RecordingDoorbellWriter writer;
  SendQueue sq;
};

std::vector<uint8_t> Frame(uint32_t len) {
  std::vector<uint8_t> f(len);
  for (uint32_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(i * 7 + 1);
  return f;
}

TEST(Mlx5LayoutTest, ControlAndDataSegmentsMatchMlx5dv) {
  for (uint16_t start : {uint16_t{0}, uint16_t{0x00ff}, uint16_t{0xfffe}}) {
    Sq s(16, start);
    const std::vector<uint8_t> f = Frame(100);
    s.sq.Post({f.data(), 100, 0x1000'0000'2000ull, 0xabcd, kEthWqeL3Csum | kEthWqeL4Csum, 1},
              /*last_in_burst=*/true);
    const uint8_t* wqe = s.buf.data() + (start & 15) * kWqeBb;

    mlx5_wqe_ctrl_seg want_ctrl;
    std::memset(&want_ctrl, 0, sizeof(want_ctrl));
    mlx5dv_set_ctrl_seg(&want_ctrl, start, MLX5_OPCODE_SEND, 0, 0x1234, MLX5_WQE_CTRL_CQ_UPDATE,
                        4, 0, 0);
    EXPECT_EQ(std::memcmp(wqe, &want_ctrl, sizeof(want_ctrl)), 0) << "pi " << start;

    mlx5_wqe_eth_seg want_eth;
    std::memset(&want_eth, 0, sizeof(want_eth));
    mlx5dv_set_eth_seg(&want_eth, MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM, 0,
                       kEthL2InlineHeaderSize, const_cast<uint8_t*>(f.data()));
    EXPECT_EQ(std::memcmp(wqe + 16, &want_eth, sizeof(want_eth)), 0);

    mlx5_wqe_data_seg want_data;
    mlx5dv_set_data_seg(&want_data, 100 - 18, 0xabcd, 0x1000'0000'2000ull + 18);
    EXPECT_EQ(std::memcmp(wqe + 48, &want_data, sizeof(want_data)), 0);
  }
}

TEST(Mlx5LayoutTest, InlineDataIsHeaderThenBytes) {
  Sq s(16, 0, /*max_inline=*/256);
  const std::vector<uint8_t> f = Frame(60);
  s.sq.Post({f.data(), 60, 0, 0, 0, 1}, true);
  const uint8_t* wqe = s.buf.data();
  mlx5_wqe_ctrl_seg want_ctrl;
  std::memset(&want_ctrl, 0, sizeof(want_ctrl));
  // 3 + ceil((42 + 4) / 16) = 6 DS.
  mlx5dv_set_ctrl_seg(&want_ctrl, 0, MLX5_OPCODE_SEND, 0, 0x1234, MLX5_WQE_CTRL_CQ_UPDATE, 6, 0,
                      0);
  EXPECT_EQ(std::memcmp(wqe, &want_ctrl, sizeof(want_ctrl)), 0);
  uint32_t hdr;
  std::memcpy(&hdr, wqe + 48, 4);
  EXPECT_EQ(be32toh(hdr), (60u - 18u) | MLX5_INLINE_SEG);
  EXPECT_EQ(std::memcmp(wqe + 52, f.data() + 18, 12), 0);               // rest of WQEBB 0
  EXPECT_EQ(std::memcmp(wqe + 64, f.data() + 30, 60 - 30), 0);          // into WQEBB 1
  EXPECT_EQ(s.sq.pi(), 2);
}

TEST(Mlx5LayoutTest, RecvEntryMatchesMlx5dvDataSeg) {
  std::vector<uint8_t> buf(4 * 32, 0xee);
  uint32_t dbrec[2] = {};
  RecordingDoorbellWriter writer;
  RecvQueue rq({buf.data(), 4, 32}, &dbrec[kRcvDbr], &writer);
  rq.Post(0xdead'beef'0000ull, 0x77, 2048, 9);
  mlx5_wqe_data_seg want[2];
  mlx5dv_set_data_seg(&want[0], 2048, 0x77, 0xdead'beef'0000ull);
  mlx5dv_set_data_seg(&want[1], 0, MLX5_INVALID_LKEY, 0);
  EXPECT_EQ(std::memcmp(buf.data(), want, sizeof(want)), 0);
  rq.Ring();
  EXPECT_EQ(be32toh(dbrec[MLX5_RCV_DBR]), 1u);
}

}  // namespace
}  // namespace bypass::driver::mlx5
