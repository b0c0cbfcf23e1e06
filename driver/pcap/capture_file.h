// A packet capture file, in the classic libpcap format (LINKTYPE_ETHERNET,
// nanosecond timestamps) or in pcapng (a section header, an interface
// description block per capturing device, and enhanced packet blocks whose
// flags say the direction, inbound or outbound, and whose comment says it
// with the queue: "bypass rx queue 0"), written by a thread of its own so
// that the queues that capture never make a system call: a queue fills a
// buffer of records and hands it over whole (CaptureFile::Submit).
#ifndef BYPASS_DRIVER_PCAP_CAPTURE_FILE_H_
#define BYPASS_DRIVER_PCAP_CAPTURE_FILE_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/uri.h"

namespace bypass::driver::pcap {

inline constexpr uint32_t kPcapHeaderBytes = 24;  // the file's global header
inline constexpr uint32_t kRecordHeaderBytes = 16;  // before each frame
inline constexpr uint32_t kMaxSnaplen = 65535;
// The most bytes a record adds beyond the frame's captured bytes (pcapng:
// the block, its padding, flags and comment).
inline constexpr uint32_t kMaxRecordOverhead = 96;
inline constexpr uint64_t kDefaultMaxBytes = 64ull << 20;
inline constexpr uint64_t kMaxMaxBytes = 1ull << 40;

enum class CaptureFormat : uint8_t {
  kPcap,    // classic libpcap: no direction, no interface per record
  kPcapng,  // pcapng: a file named *.pcapng, or pcap_format=pcapng
};

// Which way a captured frame went.
enum class Direction : uint8_t { kRx, kTx };

// What to capture, and where.
struct CaptureOptions {
  // The file; "%p" in it is replaced by the process id (one file per
  // process: two processes writing one path would truncate each other).
  std::string path;
  // The file's size is at most this; records past it are dropped (counted).
  uint64_t max_bytes = kDefaultMaxBytes;
  // Bytes of each frame kept (the record says the frame's whole length).
  uint32_t snaplen = kMaxSnaplen;
  CaptureFormat format = CaptureFormat::kPcap;
};

// Takes `pcap=FILE`, `pcap_max_mb=N`, `pcap_snaplen=N` and
// `pcap_format=pcap|pcapng` out of `uri` (without pcap_format, a FILE
// ending in .pcapng is pcapng). Nothing when there is no pcap= (the others
// alone are an error). Bad values are one-line InvalidArgument errors that
// say what is accepted.
absl::StatusOr<std::optional<CaptureOptions>> TakeCaptureOptions(DeviceUri& uri);

// "FILE[,max_mb=N][,snaplen=N][,format=pcap|pcapng]" (FI_BYPASS_PCAP),
// same rules.
absl::StatusOr<CaptureOptions> ParseCaptureSpec(std::string_view spec);

// What a capture did, for tests and tools.
struct CaptureCounters {
  uint64_t records = 0;           // frames handed to the file
  uint64_t dropped_full = 0;      // frames not captured: the file reached max_bytes
  uint64_t dropped_backlog = 0;   // frames not captured: the writer was behind
  uint64_t write_errors = 0;      // buffers lost to a failed write (disk full, ...)
};

// One open capture file, shared by every queue (of every device) of this
// process that names the same path. Thread-safe.
class CaptureFile {
 public:
  // The buffer a queue fills: whole records, then handed to Submit.
  static constexpr size_t kBufferBytes = 1u << 20;
  static_assert(kBufferBytes >= kMaxRecordOverhead + kMaxSnaplen);

  // Opens (creating or truncating) the file and writes its header, or
  // returns the process's open of that path. FailedPrecondition in one line
  // (path and errno text) when it cannot be opened or written.
  static absl::StatusOr<std::shared_ptr<CaptureFile>> Open(const CaptureOptions& opts);
  CaptureFile(const CaptureFile&) = delete;
  CaptureFile& operator=(const CaptureFile&) = delete;
  // Writes every submitted buffer, then closes the file.
  ~CaptureFile();

  const std::string& path() const { return path_; }
  uint32_t snaplen() const { return snaplen_; }
  CaptureFormat format() const { return format_; }

  // Cold path: describes one capturing device (pcapng: an interface
  // description block with its name and description, queued before any
  // record of it) and returns the interface id its records carry. Classic
  // pcap has no interfaces: 0, nothing written.
  uint32_t AddInterface(const std::string& name, const std::string& description);

  // Claims `bytes` of the file's size budget; false (and nothing claimed)
  // when they would take the file past max_bytes.
  bool Reserve(uint64_t bytes);
  // Hands `buf` (records of `records` frames) to the writer thread and
  // returns an empty buffer of kBufferBytes capacity to fill next. Never
  // waits for the disk: with too many buffers waiting already, buf's
  // records are dropped (counted) and buf comes back emptied.
  std::vector<uint8_t> Submit(std::vector<uint8_t> buf, uint64_t records);
  // Records a queue dropped because the budget was spent.
  void CountFull(uint64_t records) { dropped_full_.fetch_add(records, std::memory_order_relaxed); }
  // Blocks until every buffer submitted so far is written (tests, tools).
  void Drain();
  CaptureCounters counters() const;

 private:
  static constexpr size_t kMaxPending = 8;  // buffers waiting for the writer

  CaptureFile(std::string path, int fd, const CaptureOptions& opts);
  // Queues bytes that must precede later records (a pcapng block), past
  // the backlog limit and counted in the budget.
  void SubmitBlock(std::vector<uint8_t> block);
  void WriterLoop();
  bool WriteAll(const uint8_t* p, size_t n);

  const std::string path_;
  const int fd_;
  const uint64_t max_bytes_;
  const uint32_t snaplen_;
  const CaptureFormat format_;
  uint32_t interfaces_ = 0;  // guarded by mu_
  std::atomic<uint64_t> reserved_{0};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> dropped_full_{0};
  std::atomic<uint64_t> dropped_backlog_{0};
  std::atomic<uint64_t> write_errors_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> pending_;  // guarded by mu_
  std::vector<std::vector<uint8_t>> spare_;   // emptied buffers, guarded by mu_
  bool writing_ = false;                      // the writer holds a buffer; mu_
  bool stop_ = false;                         // guarded by mu_
  std::thread writer_;                        // last: started when the rest is set
};

// How one queue's records look: the file's format, the interface its
// device got (AddInterface) and the queue's number (pcapng's comments).
struct RecordFormat {
  CaptureFormat format = CaptureFormat::kPcap;
  uint32_t interface = 0;
  uint16_t queue = 0;
  uint32_t snaplen = kMaxSnaplen;
};

// Appends one record (header, the first snaplen bytes of `frame`, and in
// pcapng the direction and its comment) at the end of buf. REQUIRES: buf
// has room for RecordBytes more.
void AppendRecord(std::vector<uint8_t>& buf, const RecordFormat& f, Direction dir,
                  uint64_t unix_ns, const uint8_t* frame, uint32_t len);
// The bytes AppendRecord adds for a frame of `len` bytes.
uint32_t RecordBytes(const RecordFormat& f, Direction dir, uint32_t len);

}  // namespace bypass::driver::pcap

#endif  // BYPASS_DRIVER_PCAP_CAPTURE_FILE_H_
