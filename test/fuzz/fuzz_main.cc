// A stand-in for libFuzzer's driver, so that every fuzz target also runs as
// an ordinary test under gcc: LLVMFuzzerTestOneInput over the seed inputs,
// then over a bounded number of deterministic pseudo-random and mutated
// inputs. No coverage feedback; that is what --config=fuzz is for (README.md).
//
//   NAME [-runs=N] [-seed=S] [-max_len=L] [-seed_inputs=F1,F2,...] [FILE|DIR]...
//
// With only FILE arguments it runs exactly those, once each (to reproduce a
// crash libFuzzer found). Otherwise it runs every file of the DIRs and of
// -seed_inputs, then N generated inputs (default 20000) from PRNG seed S
// (default 1). Each input is passed in a heap block of exactly its size, so
// ASan sees a read past the end. Other libFuzzer flags are ignored.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));
// Present when a sanitizer runtime is linked; called before it exits on an error.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace {

using Input = std::vector<uint8_t>;

// What is running now, for the crash report. Set before each input.
struct Current {
  const uint8_t* data = nullptr;
  size_t size = 0;
  const char* seed_path = nullptr;  // a seed file, or nullptr for a generated input
  uint64_t generated_index = 0;
  uint64_t prng_seed = 0;
};
Current g_current;
// Filled before any input runs; the crash handler only reads them.
char g_crash_path[4096];
const char* g_rerun = "";  // how to run one input again, without the path
const char* g_saved_note = "";  // where a test's saved file ends up

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}
void Say(const char* s) { WriteAll(STDERR_FILENO, s, std::strlen(s)); }
void SayNumber(uint64_t v) {
  char buf[24];
  char* p = buf + sizeof(buf);
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  WriteAll(STDERR_FILENO, p, static_cast<size_t>(buf + sizeof(buf) - p));
}

void SayHex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char line[2 * 32 + 1];
  for (size_t at = 0; at < n; at += 32) {
    size_t k = 0;
    for (size_t i = at; i < n && i < at + 32; ++i) {
      line[k++] = kDigits[p[i] >> 4];
      line[k++] = kDigits[p[i] & 15];
    }
    line[k++] = '\n';
    WriteAll(STDERR_FILENO, line, k);
  }
}

// Says which input crashed and how to run it again, saving a generated one
// (in hex in the log too, when short). Called from a signal handler or a
// sanitizer's death callback: only async-signal-safe calls.
void ReportCrash() {
  static volatile sig_atomic_t reported = 0;
  if (reported || g_current.data == nullptr) return;
  reported = 1;
  Say("\nfuzz_main: the target crashed on ");
  if (g_current.seed_path != nullptr) {
    Say("seed input ");
    Say(g_current.seed_path);
    Say("\nfuzz_main: run it alone with: ");
    Say(g_rerun);
    Say(g_current.seed_path);
    Say("\n");
    return;
  }
  Say("generated input ");
  SayNumber(g_current.generated_index);
  Say(" (-seed=");
  SayNumber(g_current.prng_seed);
  Say("), ");
  SayNumber(g_current.size);
  Say(" bytes");
  if (g_current.size <= 1024) {
    Say(":\n");
    SayHex(g_current.data, g_current.size);
  } else {
    Say("\n");
  }
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  WriteAll(fd, g_current.data, g_current.size);
  close(fd);
  Say("fuzz_main: saved as ");
  Say(g_crash_path);
  Say(g_saved_note);
  Say("\nfuzz_main: run it alone with: ");
  Say(g_rerun);
  Say(g_crash_path);
  Say("\n");
}

void OnFatalSignal(int sig) {
  ReportCrash();
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashReporting(const char* argv0) {
  // Bazel tests keep files written here; `bazel run` starts in the runfiles,
  // so prefer the directory it was started from.
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (dir != nullptr) {
    g_saved_note = " (after the test: in bazel-testlogs/PACKAGE/NAME/test.outputs/outputs.zip)";
  }
  if (dir == nullptr) dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (dir == nullptr) dir = "/tmp";
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/fuzz-crash-%d", dir,
                static_cast<int>(getpid()));
  // Bazel names the test; its libFuzzer twin is NAME_libfuzzer (fuzz.bzl).
  static std::string rerun;
  const char* target = std::getenv("TEST_TARGET");
  rerun = target != nullptr ? std::string("bazel run ") + target + "_libfuzzer -- "
                            : std::string(argv0) + " ";
  g_rerun = rerun.c_str();
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(ReportCrash);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnFatalSignal);
}

int RunOne(const Input& in) {
  // An exact-size heap copy: a read one past the end is a heap overflow.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[in.size()]);
  std::copy(in.begin(), in.end(), copy.get());
  g_current.data = copy.get();
  g_current.size = in.size();
  const int rc = LLVMFuzzerTestOneInput(copy.get(), in.size());
  g_current.data = nullptr;
  return rc;
}

bool ReadFile(const std::string& path, Input* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

// splitmix64: a small, fixed, portable generator, so a seed names the same
// inputs on every machine.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, n); REQUIRES: n > 0.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }
  uint8_t Byte() { return static_cast<uint8_t>(Next()); }

 private:
  uint64_t state_;
};

// Values that sit on the edges of length and flag checks.
constexpr uint8_t kInterestingBytes[] = {0x00, 0x01, 0x04, 0x05, 0x06, 0x0f, 0x10, 0x11,
                                         0x14, 0x40, 0x45, 0x7f, 0x80, 0xfe, 0xff};
constexpr uint16_t kInterestingWords[] = {0x0000, 0x0001, 0x0008, 0x0014, 0x001c, 0x0800,
                                          0x2000, 0x4000, 0x7fff, 0x8000, 0x8100, 0xfffe,
                                          0xffff};

// Changes `in` in one of a few ways a byte-oriented mutator would.
void MutateOnce(Input& in, const std::vector<Input>& pool, size_t max_len, Prng& rng) {
  const size_t n = in.size();
  switch (rng.Below(11)) {
    case 0:  // flip a bit
      if (n != 0) in[rng.Below(n)] ^= static_cast<uint8_t>(1u << rng.Below(8));
      break;
    case 1:  // a random byte
      if (n != 0) in[rng.Below(n)] = rng.Byte();
      break;
    case 2:  // an interesting byte
      if (n != 0) in[rng.Below(n)] = kInterestingBytes[rng.Below(std::size(kInterestingBytes))];
      break;
    case 3:  // an interesting big-endian word, or the length near by
      if (n >= 2) {
        const size_t at = rng.Below(n - 1);
        uint16_t v = kInterestingWords[rng.Below(std::size(kInterestingWords))];
        if (rng.Below(3) == 0) v = static_cast<uint16_t>(n - at + rng.Below(5) - 2);
        in[at] = static_cast<uint8_t>(v >> 8);
        in[at + 1] = static_cast<uint8_t>(v);
      }
      break;
    case 4:  // add or subtract a little from a byte
      if (n != 0) in[rng.Below(n)] += static_cast<uint8_t>(rng.Below(9) - 4);
      break;
    case 5:  // truncate
      in.resize(rng.Below(n + 1));
      break;
    case 6:  // grow with random bytes
      for (size_t k = rng.Below(64) + 1; k > 0 && in.size() < max_len; --k) in.push_back(rng.Byte());
      break;
    case 7:  // erase a range
      if (n != 0) {
        const size_t at = rng.Below(n);
        in.erase(in.begin() + static_cast<ptrdiff_t>(at),
                 in.begin() + static_cast<ptrdiff_t>(at + rng.Below(n - at) + 1));
      }
      break;
    case 8: {  // insert random bytes
      const size_t at = rng.Below(n + 1);
      const size_t k = std::min(rng.Below(16) + 1, max_len > n ? max_len - n : 0);
      // Open a gap of k bytes at `at` and fill it (vector::insert of a
      // range trips GCC 12's -Wstringop-overflow at -O3).
      in.resize(n + k);
      std::memmove(in.data() + at + k, in.data() + at, n - at);
      for (size_t i = 0; i < k; ++i) in[at + i] = rng.Byte();
      break;
    }
    case 9:  // copy a chunk over another place
      if (n >= 2) {
        const size_t from = rng.Below(n);
        const size_t to = rng.Below(n);
        const size_t k = rng.Below(std::min(n - from, n - to)) + 1;
        std::memmove(in.data() + to, in.data() + from, k);
      }
      break;
    default: {  // splice: our head, another input's tail
      const Input& other = pool[rng.Below(pool.size())];
      const size_t head = rng.Below(n + 1);
      const size_t tail_from = rng.Below(other.size() + 1);
      in.resize(head);
      in.insert(in.end(), other.begin() + static_cast<ptrdiff_t>(tail_from), other.end());
      break;
    }
  }
  if (in.size() > max_len) in.resize(max_len);
}

// The next generated input: mostly stacked mutations of the seeds or of
// earlier mutants, sometimes plain random bytes.
Input Generate(std::vector<Input>& pool, size_t max_len, Prng& rng) {
  Input in;
  if (pool.empty() || rng.Below(8) == 0) {
    const size_t r = rng.Below(10);
    const size_t len = r < 5 ? rng.Below(64) : r < 9 ? rng.Below(1024) : rng.Below(max_len + 1);
    in.resize(std::min(len, max_len));
    for (uint8_t& b : in) b = rng.Byte();
  } else {
    in = pool[rng.Below(pool.size())];
    for (size_t k = rng.Below(4) + 1; k > 0; --k) MutateOnce(in, pool, max_len, rng);
  }
  // Keep a few mutants as bases for further mutation, bounded.
  constexpr size_t kMaxPool = 256;
  if (pool.size() < kMaxPool) {
    pool.push_back(in);
  } else if (rng.Below(4) == 0) {
    pool[rng.Below(kMaxPool)] = in;
  }
  return in;
}

bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  for (const char* prefix : {"-", "--"}) {
    const size_t p = std::strlen(prefix);
    if (std::strncmp(arg, prefix, p) == 0 && std::strncmp(arg + p, name, len) == 0 &&
        arg[p + len] == '=') {
      *value = arg + p + len + 1;
      return true;
    }
  }
  return false;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The regular files of dir, sorted so the order does not depend on the file system.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string path = dir + "/" + e->d_name;
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  uint64_t runs = 20000;
  uint64_t prng_seed = 1;
  size_t max_len = 4096;
  bool runs_given = false;
  std::vector<std::string> seed_files;
  std::vector<std::string> file_args;
  bool dir_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (ParseFlag(argv[i], "runs", &v)) {
      runs = std::strtoull(v.c_str(), nullptr, 10);
      runs_given = true;
    } else if (ParseFlag(argv[i], "seed", &v)) {
      prng_seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (ParseFlag(argv[i], "max_len", &v)) {
      max_len = std::max<size_t>(1, std::strtoull(v.c_str(), nullptr, 10));
    } else if (ParseFlag(argv[i], "seed_inputs", &v)) {
      for (size_t pos = 0; pos <= v.size();) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        if (comma > pos) seed_files.push_back(v.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "fuzz_main: ignoring %s (a libFuzzer flag this runner lacks)\n",
                   argv[i]);
    } else if (IsDirectory(argv[i])) {
      dir_given = true;
      for (std::string& f : FilesIn(argv[i])) seed_files.push_back(std::move(f));
    } else {
      file_args.push_back(argv[i]);
    }
  }
  InstallCrashReporting(argv[0]);

  // Only files: run just them, as libFuzzer does.
  const bool reproduce = !file_args.empty() && !dir_given;
  if (reproduce && !runs_given) runs = 0;
  seed_files.insert(seed_files.end(), file_args.begin(), file_args.end());

  const auto start = std::chrono::steady_clock::now();
  std::vector<Input> pool;
  for (const std::string& path : seed_files) {
    Input in;
    if (!ReadFile(path, &in)) {
      std::fprintf(stderr, "fuzz_main: cannot read seed input %s\n", path.c_str());
      return 1;
    }
    g_current.seed_path = path.c_str();
    RunOne(in);
    if (reproduce) std::fprintf(stderr, "fuzz_main: %s: ran %zu bytes\n", path.c_str(), in.size());
    pool.push_back(std::move(in));
  }
  g_current.seed_path = nullptr;
  g_current.prng_seed = prng_seed;
  Prng rng(prng_seed);
  for (uint64_t i = 0; i < runs; ++i) {
    g_current.generated_index = i;
    RunOne(Generate(pool, max_len, rng));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  std::fprintf(stderr,
               "fuzz_main: %zu seed inputs and %llu generated (-seed=%llu -max_len=%zu) in %lld "
               "ms, no crash\n",
               seed_files.size(), static_cast<unsigned long long>(runs),
               static_cast<unsigned long long>(prng_seed), max_len, static_cast<long long>(ms));
  return 0;
}
