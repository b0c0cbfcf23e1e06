// The table of a named AV (fi_av(3) attr->name), shared by the processes of
// one user on one host: a file in /dev/shm in which fi_addr i is entry i,
// so an fi_addr one process's fi_av_insert returned names the same peer in
// every process that opened the AV by that name. Entries are appended
// under an exclusive flock and read under a shared one; the file is read
// and written with pread/pwrite (inserts and lookups are the slow path).
//
// File: /dev/shm/bypass-av.u<uid>.<name> (0600, the user's, regular; the
// name's characters other than [A-Za-z0-9._-] as %XX), a 64-byte header
// ("BYPASSAV", version, entry size, count) and 24-byte entries. It is made
// whole under a temporary name and linked into place, so an opener never
// sees it half made. The process that created it unlinks the name when it
// closes the AV: processes that have it open keep using it; opening the
// name later makes a new one.
#ifndef BYPASS_FABRIC_FI_AV_SHARED_H_
#define BYPASS_FABRIC_FI_AV_SHARED_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fabric/rdm/types.h"

namespace bypass::fi {

class SharedAvTable {
 public:
  // Opens the table `name` (read_only: FI_READ, it must exist: -FI_ENOENT),
  // creating it otherwise. 0 or -FI_*; one log line says why.
  static int Open(const char* name, bool read_only, std::unique_ptr<SharedAvTable>* out);
  SharedAvTable(const SharedAvTable&) = delete;
  SharedAvTable& operator=(const SharedAvTable&) = delete;
  ~SharedAvTable();  // the creator unlinks the name

  bool read_only() const { return read_only_; }
  const std::string& path() const { return path_; }

  // Held across a read and the append that depends on it.
  class Lock {
   public:
    Lock(const SharedAvTable& t, bool exclusive);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };

  // REQUIRES: a Lock. Entries [mirror->size(), count) appended to *mirror
  // (a removed one as nullopt); false on an I/O error (logged).
  bool ReadNew(std::vector<std::optional<rdm::Address>>* mirror) const;
  // REQUIRES: an exclusive Lock, and *mirror read up to count (ReadNew).
  // Appends a as entry mirror->size(); false on an I/O error (logged).
  bool Append(const rdm::Address& a) const;
  // REQUIRES: an exclusive Lock. Marks entry i removed.
  bool MarkRemoved(size_t i) const;

 private:
  SharedAvTable(int fd, bool owner, bool read_only, std::string path)
      : fd_(fd), owner_(owner), read_only_(read_only), path_(std::move(path)) {}
  bool ReadCount(uint64_t* count) const;

  int fd_;
  bool owner_;
  bool read_only_;
  std::string path_;
};

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_AV_SHARED_H_
