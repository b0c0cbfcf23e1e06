#include "driver/pcap/pcap_device.h"

#include <time.h>

#include <algorithm>
#include <string>
#include <vector>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace bypass::driver::pcap {
namespace {

// Idle RxBursts between two looks at the clock for a buffer to flush.
constexpr uint32_t kIdlePollsPerClockRead = 1024;

uint64_t UnixNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

// The device's URI without the capture's own keys (pcap=, pcap_*=): the
// interface's name in a pcapng file.
std::string InterfaceName(const std::string& uri) {
  std::vector<std::string> kept;
  for (const absl::string_view part : absl::StrSplit(uri, ',')) {
    if (!absl::StartsWith(part, "pcap=") && !absl::StartsWith(part, "pcap_")) {
      kept.emplace_back(part);
    }
  }
  return absl::StrJoin(kept, ",");
}

}  // namespace

CaptureQueue::CaptureQueue(QueuePair& inner, std::shared_ptr<CaptureFile> file, uint32_t interface)
    : inner_(inner),
      file_(std::move(file)),
      format_{file_->format(), interface, inner.id(), file_->snaplen()} {
  buf_.reserve(CaptureFile::kBufferBytes);
}

CaptureQueue::~CaptureQueue() { Flush(); }

void CaptureQueue::Flush() {
  if (buf_records_ == 0) return;
  buf_ = file_->Submit(std::move(buf_), buf_records_);
  buf_records_ = 0;
}

void CaptureQueue::FlushIfOld(uint64_t now) {
  if (buf_records_ > 0 && now - first_ns_ >= kFlushAfterNs) Flush();
}

bool CaptureQueue::Claim(Direction dir, uint32_t len) {
  if (!full_ && file_->Reserve(RecordBytes(format_, dir, len))) return true;
  full_ = true;
  file_->CountFull(1);
  return false;
}

uint16_t CaptureQueue::RxBurst(absl::Span<Packet*> out) {
  const uint16_t n = inner_.RxBurst(out);
  if (n == 0) {
    if (buf_records_ > 0 && ++idle_polls_ >= kIdlePollsPerClockRead) {
      idle_polls_ = 0;
      FlushIfOld(UnixNs());
    }
    return n;
  }
  if (full_) {
    file_->CountFull(n);
    return n;
  }
  const uint64_t now = UnixNs();
  for (uint16_t i = 0; i < n; ++i) {
    const Packet& p = *out[i];
    if (!Claim(Direction::kRx, p.len)) continue;
    if (buf_.size() + RecordBytes(format_, Direction::kRx, p.len) > CaptureFile::kBufferBytes) {
      Flush();
    }
    if (buf_records_++ == 0) first_ns_ = now;
    AppendRecord(buf_, format_, Direction::kRx, now, p.data, p.len);
  }
  FlushIfOld(now);
  return n;
}

uint16_t CaptureQueue::TxBurst(absl::Span<Packet* const> pkts) {
  if (full_) {
    const uint16_t taken = inner_.TxBurst(pkts);
    file_->CountFull(taken);
    return taken;
  }
  // A frame is no longer ours once the inner queue took it, and which ones
  // it takes is known only after: each chunk's frames are copied first and
  // the records of those not taken are cut off again.
  const uint64_t now = UnixNs();
  size_t done = 0;
  while (done < pkts.size()) {
    if (buf_.size() + TxBytes(pkts[done]->len) > CaptureFile::kBufferBytes) Flush();
    const size_t mark = buf_.size();
    size_t fit = 0;
    while (done + fit < pkts.size() &&
           buf_.size() + TxBytes(pkts[done + fit]->len) <= CaptureFile::kBufferBytes) {
      const Packet& p = *pkts[done + fit];
      AppendRecord(buf_, format_, Direction::kTx, now, p.data, p.len);
      ++fit;
    }
    const uint16_t taken = inner_.TxBurst(pkts.subspan(done, fit));
    size_t end = mark;
    for (uint16_t i = 0; i < taken; ++i) {
      const uint32_t len = pkts[done + i]->len;
      if (!Claim(Direction::kTx, len)) {
        file_->CountFull(taken - i - 1u);
        break;
      }
      end += TxBytes(len);
      if (buf_records_++ == 0) first_ns_ = now;
    }
    buf_.resize(end);
    done += taken;
    if (taken < fit) break;
  }
  FlushIfOld(now);
  return static_cast<uint16_t>(done);
}

absl::StatusOr<std::unique_ptr<CaptureDevice>> CaptureDevice::Create(
    std::unique_ptr<Device> inner, const CaptureOptions& opts) {
  if (inner == nullptr) return absl::InvalidArgumentError("CaptureDevice: no inner device");
  absl::StatusOr<std::shared_ptr<CaptureFile>> file = CaptureFile::Open(opts);
  if (!file.ok()) return file.status();
  return std::unique_ptr<CaptureDevice>(new CaptureDevice(std::move(inner), *std::move(file)));
}

CaptureDevice::CaptureDevice(std::unique_ptr<Device> inner, std::shared_ptr<CaptureFile> file)
    : inner_(std::move(inner)), file_(std::move(file)) {
  const DeviceInfo& info = inner_->info();
  const std::string name = InterfaceName(info.uri);
  const uint32_t interface = file_->AddInterface(
      name, absl::StrCat("bypass device ", name, ", ", info.num_queues, " queue(s), MAC ",
                         info.mac.ToString(), ", IPv4 ", info.ipv4.ToString()));
  for (uint16_t q = 0; q < info.num_queues; ++q) {
    queues_.push_back(std::make_unique<CaptureQueue>(inner_->queue(q), file_, interface));
  }
}

CaptureDevice::~CaptureDevice() {
  queues_.clear();  // their last records, while the file is open
}

absl::StatusOr<std::unique_ptr<Device>> WrapWithCapture(std::unique_ptr<Device> inner,
                                                        const CaptureOptions& opts) {
  absl::StatusOr<std::unique_ptr<CaptureDevice>> dev =
      CaptureDevice::Create(std::move(inner), opts);
  if (!dev.ok()) return dev.status();
  return std::unique_ptr<Device>(*std::move(dev));
}

void CaptureQueue::AppendCounters(NamedCounters* out) const {
  const CaptureCounters c = file_->counters();  // the file's: every queue capturing into it
  AppendNamed(out, "pcap_", {{"records", c.records},
                             {"dropped_full", c.dropped_full},
                             {"dropped_backlog", c.dropped_backlog},
                             {"write_errors", c.write_errors}});
  inner_.AppendCounters(out);
}

}  // namespace bypass::driver::pcap
