// Secret keys on disk: a key file the user configures (checked as ssh checks
// its private keys: a regular file of ours that group and others cannot
// read), and the per-user key of the intra-host device, created at random
// by the first process that needs it and read by every later one. Shared by
// the shm device and the libfabric provider. Randomness and hashing are
// libsodium's.
#ifndef BYPASS_DRIVER_SHM_KEYS_H_
#define BYPASS_DRIVER_SHM_KEYS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace bypass::driver::shm {

inline constexpr size_t kKeyBytes = 32;
using Key = std::array<uint8_t, kKeyBytes>;

// The most a key file may hold (a key is bytes, not a document).
inline constexpr size_t kMaxKeyFileBytes = 4096;

// The bytes of key file `path`: a regular file (a symlink to one is
// followed only with follow_symlink) owned by this user, with no access for
// group or others, of min_bytes..max_bytes. Else one line naming the path
// and what to do (chmod 600, chown, a longer key); NotFound if it does not
// exist.
absl::StatusOr<std::string> ReadKeyFile(const std::string& path, size_t min_bytes,
                                        size_t max_bytes, bool follow_symlink);

// A 32-byte key from key material of at least 32 bytes: 32 bytes as they
// are; longer ones hashed to 32 (libsodium's crypto_generichash, BLAKE2b).
// REQUIRES: material.size() >= kKeyBytes.
Key KeyFromBytes(absl::Span<const uint8_t> material);

// A short public name of a key, for logs: 8 hex digits of a MAC of a
// constant under the key (tells keys apart, gives nothing of them away).
std::string KeyId(const Key& key);

// Where the per-user key of the registry directory `registry_dir` lives:
// next to it, "<parent>/u<uid>.key" (/run/bypass/u<uid>.key for the
// default directories).
std::string UserKeyPath(const std::string& registry_dir);

// The per-user key: read from UserKeyPath(registry_dir) (exactly 32 bytes,
// ours, mode 0600, not a symlink); when it does not exist, 32 random bytes
// (randombytes_buf) written to a 0600 temporary file in registry_dir (0700,
// ours: Registry::Open checks it) and linked to its name without
// overwriting, so that processes racing to create it all end up with the
// first one's. One-line error on a key file of the wrong owner, mode or size.
absl::StatusOr<Key> UserKey(const std::string& registry_dir);

// libsodium's sodium_init, once per process (aborts with a message if the
// library cannot start: without it there are no keys).
void InitSodium();

}  // namespace bypass::driver::shm

#endif  // BYPASS_DRIVER_SHM_KEYS_H_
