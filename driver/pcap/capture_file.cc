#include "driver/pcap/capture_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bypass::driver::pcap {
namespace {

// Abseil here is built with its own string_view (ABSL_OPTION_USE_STD_* = 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The classic pcap header with nanosecond timestamps, in this host's byte
// order (readers take either, by the magic).
constexpr uint32_t kMagicNs = 0xa1b23c4d;
constexpr uint32_t kLinktypeEthernet = 1;

struct FileHeader {
  uint32_t magic;
  uint16_t version_major;
  uint16_t version_minor;
  int32_t thiszone;
  uint32_t sigfigs;
  uint32_t snaplen;
  uint32_t network;
};
static_assert(sizeof(FileHeader) == kPcapHeaderBytes);
struct RecordHeader {
  uint32_t ts_sec;
  uint32_t ts_nsec;
  uint32_t incl_len;
  uint32_t orig_len;
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);

// pcapng (draft-ietf-opsawg-pcapng), in this host's byte order (the
// section header's byte-order magic tells readers).
constexpr uint32_t kShbType = 0x0A0D0D0A;
constexpr uint32_t kIdbType = 1;
constexpr uint32_t kEpbType = 6;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kOptEnd = 0;
constexpr uint16_t kOptComment = 1;
constexpr uint16_t kShbUserAppl = 4;
constexpr uint16_t kIfName = 2;
constexpr uint16_t kIfDescription = 3;
constexpr uint16_t kIfTsresol = 9;
constexpr uint16_t kEpbFlags = 2;
constexpr uint32_t kEpbInbound = 1;  // epb_flags bits 0-1: the direction
constexpr uint32_t kEpbOutbound = 2;

uint32_t Pad4(uint32_t n) { return (n + 3) & ~3u; }

void Put(std::vector<uint8_t>& b, const void* p, size_t n) {
  const auto* u = static_cast<const uint8_t*>(p);
  b.insert(b.end(), u, u + n);
}
void Put32(std::vector<uint8_t>& b, uint32_t v) { Put(b, &v, 4); }
void Put16(std::vector<uint8_t>& b, uint16_t v) { Put(b, &v, 2); }
void PadTo4(std::vector<uint8_t>& b) { b.resize(b.size() + (Pad4(b.size()) - b.size()), 0); }

void PutOption(std::vector<uint8_t>& b, uint16_t code, std::string_view value) {
  Put16(b, code);
  Put16(b, static_cast<uint16_t>(value.size()));
  Put(b, value.data(), value.size());
  PadTo4(b);
}

// Starts a block at the end of b (its length filled in by EndBlock).
size_t BeginBlock(std::vector<uint8_t>& b, uint32_t type) {
  const size_t at = b.size();
  Put32(b, type);
  Put32(b, 0);
  return at;
}
void EndBlock(std::vector<uint8_t>& b, size_t at) {
  Put16(b, kOptEnd);
  Put16(b, 0);
  const uint32_t len = static_cast<uint32_t>(b.size() - at + 4);
  std::memcpy(b.data() + at + 4, &len, 4);
  Put32(b, len);
}

std::vector<uint8_t> SectionHeader() {
  std::vector<uint8_t> b;
  const size_t at = BeginBlock(b, kShbType);
  Put32(b, kByteOrderMagic);
  Put16(b, 1);  // version 1.0
  Put16(b, 0);
  const int64_t unknown_length = -1;
  Put(b, &unknown_length, 8);
  PutOption(b, kShbUserAppl, "bypass");
  EndBlock(b, at);
  return b;
}

// "bypass rx queue 3": the direction as the engine saw it.
std::string DirectionComment(Direction dir, uint16_t queue) {
  return absl::StrCat("bypass ", dir == Direction::kRx ? "rx" : "tx", " queue ", queue);
}

std::mutex g_files_mu;
// path -> the process's open of it.
std::map<std::string, std::weak_ptr<CaptureFile>>& Files() {
  static auto* files = new std::map<std::string, std::weak_ptr<CaptureFile>>();
  return *files;
}

std::string ExpandPath(std::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      absl::StrAppend(&out, getpid());
      ++i;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

bool ParseWhole(std::string_view s, uint64_t* out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end && !s.empty();
}

// max_mb= and snaplen= (named `prefix`max_mb in a URI) into o.
absl::Status SetOption(std::string_view prefix, std::string_view key, std::string_view value,
                       CaptureOptions& o) {
  uint64_t n = 0;
  const bool number = ParseWhole(value, &n);
  if (key == "max_mb") {
    constexpr uint64_t kMaxMb = kMaxMaxBytes >> 20;
    if (!number || n < 1 || n > kMaxMb) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(prefix), "max_mb=", Sv(value),
                                                     ": expected a whole number of MiB from 1 to ",
                                                     kMaxMb));
    }
    o.max_bytes = n << 20;
    return absl::OkStatus();
  }
  if (key == "snaplen") {
    // A record must hold the Ethernet, IPv4 and UDP headers at least.
    if (!number || n < 64 || n > kMaxSnaplen) {
      return absl::InvalidArgumentError(absl::StrCat(
          Sv(prefix), "snaplen=", Sv(value), ": expected a whole number of bytes from 64 to ",
          kMaxSnaplen));
    }
    o.snaplen = static_cast<uint32_t>(n);
    return absl::OkStatus();
  }
  if (key == "format") {
    if (value != "pcap" && value != "pcapng") {
      return absl::InvalidArgumentError(absl::StrCat(Sv(prefix), "format=", Sv(value),
                                                     ": expected pcap or pcapng"));
    }
    o.format = value == "pcapng" ? CaptureFormat::kPcapng : CaptureFormat::kPcap;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "capture option '", Sv(prefix), Sv(key), "=", Sv(value), "': unknown (known: ", Sv(prefix),
      "max_mb, ", Sv(prefix), "snaplen, ", Sv(prefix), "format)"));
}

// The format a file name implies: pcapng for *.pcapng.
CaptureFormat FormatOf(std::string_view path) {
  constexpr std::string_view kExt = ".pcapng";
  return path.size() >= kExt.size() && path.substr(path.size() - kExt.size()) == kExt
             ? CaptureFormat::kPcapng
             : CaptureFormat::kPcap;
}

}  // namespace

absl::StatusOr<std::optional<CaptureOptions>> TakeCaptureOptions(DeviceUri& uri) {
  std::optional<std::string> path = uri.Take("pcap");
  std::optional<std::string> max_mb = uri.Take("pcap_max_mb");
  std::optional<std::string> snaplen = uri.Take("pcap_snaplen");
  std::optional<std::string> format = uri.Take("pcap_format");
  if (!path) {
    if (max_mb || snaplen || format) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", uri.text, "': pcap_max_mb=, pcap_snaplen= and pcap_format= need pcap=FILE"));
    }
    return std::nullopt;
  }
  if (path->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", uri.text, "': pcap= needs a file name"));
  }
  CaptureOptions o;
  o.path = *path;
  o.format = FormatOf(o.path);
  if (format) {
    if (absl::Status s = SetOption("pcap_", "format", *format, o); !s.ok()) return s;
  }
  if (max_mb) {
    if (absl::Status s = SetOption("pcap_", "max_mb", *max_mb, o); !s.ok()) return s;
  }
  if (snaplen) {
    if (absl::Status s = SetOption("pcap_", "snaplen", *snaplen, o); !s.ok()) return s;
  }
  return o;
}

absl::StatusOr<CaptureOptions> ParseCaptureSpec(std::string_view spec) {
  const size_t comma = spec.find(',');
  CaptureOptions o;
  o.path = std::string(spec.substr(0, comma));
  o.format = FormatOf(o.path);
  if (o.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("capture spec '", Sv(spec),
                     "': expected FILE[,max_mb=N][,snaplen=N][,format=pcap|pcapng]"));
  }
  size_t pos = comma;
  while (pos != std::string_view::npos) {
    const size_t next = spec.find(',', pos + 1);
    const std::string_view item = spec.substr(pos + 1, next - pos - 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("capture spec '", Sv(spec), "': '", Sv(item), "': expected key=value"));
    }
    if (absl::Status s = SetOption("", item.substr(0, eq), item.substr(eq + 1), o); !s.ok()) {
      return s;
    }
    pos = next;
  }
  return o;
}

absl::StatusOr<std::shared_ptr<CaptureFile>> CaptureFile::Open(const CaptureOptions& opts) {
  const std::string path = ExpandPath(opts.path);
  std::lock_guard<std::mutex> l(g_files_mu);
  if (auto it = Files().find(path); it != Files().end()) {
    if (std::shared_ptr<CaptureFile> f = it->second.lock()) return f;
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("pcap=", path, ": cannot open for writing: ", std::strerror(errno)));
  }
  std::shared_ptr<CaptureFile> f(new CaptureFile(path, fd, opts));
  std::vector<uint8_t> header;
  if (opts.format == CaptureFormat::kPcapng) {
    header = SectionHeader();
  } else {
    const FileHeader h{kMagicNs, 2, 4, 0, 0, f->snaplen_, kLinktypeEthernet};
    Put(header, &h, sizeof(h));
  }
  f->reserved_ = header.size();
  if (!f->WriteAll(header.data(), header.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("pcap=", path, ": cannot write: ", std::strerror(errno)));
  }
  Files()[path] = f;
  return f;
}

CaptureFile::CaptureFile(std::string path, int fd, const CaptureOptions& opts)
    : path_(std::move(path)),
      fd_(fd),
      max_bytes_(opts.max_bytes),
      snaplen_(opts.snaplen),
      format_(opts.format),
      writer_([this] { WriterLoop(); }) {}

CaptureFile::~CaptureFile() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  close(fd_);
}

bool CaptureFile::WriteAll(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void CaptureFile::WriterLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stop_, and everything written
    std::vector<uint8_t> buf = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    l.unlock();
    if (!WriteAll(buf.data(), buf.size())) write_errors_.fetch_add(1, std::memory_order_relaxed);
    buf.clear();
    l.lock();
    writing_ = false;
    spare_.push_back(std::move(buf));
    cv_.notify_all();  // Drain
  }
}

bool CaptureFile::Reserve(uint64_t bytes) {
  uint64_t have = reserved_.load(std::memory_order_relaxed);
  do {
    if (have + bytes > max_bytes_) return false;
  } while (!reserved_.compare_exchange_weak(have, have + bytes, std::memory_order_relaxed));
  return true;
}

std::vector<uint8_t> CaptureFile::Submit(std::vector<uint8_t> buf, uint64_t records) {
  std::vector<uint8_t> next;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (pending_.size() >= kMaxPending) {
      dropped_backlog_.fetch_add(records, std::memory_order_relaxed);
      buf.clear();
      return buf;
    }
    records_.fetch_add(records, std::memory_order_relaxed);
    pending_.push_back(std::move(buf));
    if (!spare_.empty()) {
      next = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  cv_.notify_all();
  // At most kMaxPending + one per queue buffers ever exist: after the first
  // few submissions this allocates nothing.
  if (next.capacity() < kBufferBytes) next.reserve(kBufferBytes);
  return next;
}

uint32_t CaptureFile::AddInterface(const std::string& name, const std::string& description) {
  if (format_ != CaptureFormat::kPcapng) return 0;
  std::vector<uint8_t> b;
  const size_t at = BeginBlock(b, kIdbType);
  Put16(b, static_cast<uint16_t>(kLinktypeEthernet));
  Put16(b, 0);
  Put32(b, snaplen_);
  PutOption(b, kIfName, std::string_view(name).substr(0, 256));
  PutOption(b, kIfDescription, std::string_view(description).substr(0, 256));
  const char nanoseconds = 9;  // if_tsresol: 10^-9 s
  PutOption(b, kIfTsresol, std::string_view(&nanoseconds, 1));
  EndBlock(b, at);
  std::lock_guard<std::mutex> l(mu_);
  const uint32_t id = interfaces_++;
  reserved_.fetch_add(b.size(), std::memory_order_relaxed);
  pending_.push_back(std::move(b));
  cv_.notify_all();
  return id;
}

void CaptureFile::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return pending_.empty() && !writing_; });
}

CaptureCounters CaptureFile::counters() const {
  CaptureCounters c;
  c.records = records_.load(std::memory_order_relaxed);
  c.dropped_full = dropped_full_.load(std::memory_order_relaxed);
  c.dropped_backlog = dropped_backlog_.load(std::memory_order_relaxed);
  c.write_errors = write_errors_.load(std::memory_order_relaxed);
  return c;
}

uint32_t RecordBytes(const RecordFormat& f, Direction dir, uint32_t len) {
  const uint32_t caplen = len < f.snaplen ? len : f.snaplen;
  if (f.format == CaptureFormat::kPcap) return kRecordHeaderBytes + caplen;
  // Block header (8), EPB fields (20), the frame padded, epb_flags (8), the
  // comment padded (4 + text), end of options (4), trailing length (4).
  const uint32_t comment = static_cast<uint32_t>(DirectionComment(dir, f.queue).size());
  return 8 + 20 + Pad4(caplen) + 8 + 4 + Pad4(comment) + 4 + 4;
}

void AppendRecord(std::vector<uint8_t>& buf, const RecordFormat& f, Direction dir,
                  uint64_t unix_ns, const uint8_t* frame, uint32_t len) {
  const uint32_t caplen = len < f.snaplen ? len : f.snaplen;
  if (f.format == CaptureFormat::kPcap) {
    const RecordHeader h{static_cast<uint32_t>(unix_ns / 1'000'000'000),
                         static_cast<uint32_t>(unix_ns % 1'000'000'000), caplen, len};
    Put(buf, &h, sizeof(h));
    Put(buf, frame, caplen);
    return;
  }
  const size_t at = BeginBlock(buf, kEpbType);
  Put32(buf, f.interface);
  Put32(buf, static_cast<uint32_t>(unix_ns >> 32));  // in if_tsresol units: ns
  Put32(buf, static_cast<uint32_t>(unix_ns));
  Put32(buf, caplen);
  Put32(buf, len);
  Put(buf, frame, caplen);
  PadTo4(buf);
  const uint32_t flags = dir == Direction::kRx ? kEpbInbound : kEpbOutbound;
  PutOption(buf, kEpbFlags, std::string_view(reinterpret_cast<const char*>(&flags), 4));
  PutOption(buf, kOptComment, DirectionComment(dir, f.queue));
  EndBlock(buf, at);
}

}  // namespace bypass::driver::pcap
