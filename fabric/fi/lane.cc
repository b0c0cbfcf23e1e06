// Device queues (lane.h): the process's opens of devices that deliver by
// frame, shared by URI, and the queues domains and contexts take of them.
#include "fabric/fi/lane.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/uri.h"

namespace bypass::fi {

// One open of a device and which of its queues lanes hold. Registered by
// URI (`key`) while open when the device delivers by frame.
struct SharedOpen {
  std::string key;  // empty: not registered (an instance of its own)
  std::unique_ptr<driver::Device> dev;
  std::mutex mu;  // guards what follows; never held while a Lane dies
  std::vector<bool> taken;
  std::weak_ptr<Lane> for_domains;  // a domain's, which others share when no queue is free
  std::set<uint16_t> ports;    // claimed by engine endpoints of any lane
  ~SharedOpen();
};

namespace {

std::mutex g_opens_mu;
// Serializes the domains' opens, so two threads opening one URI at once
// share one open of it (not two ports).
std::mutex g_open_serial;
// URI -> the process's open of it (devices that deliver by frame).
std::map<std::string, std::weak_ptr<SharedOpen>>& Opens() {
  static auto* opens = new std::map<std::string, std::weak_ptr<SharedOpen>>();
  return *opens;
}

// Queues lanes may take: all with steering, else queue 0 alone (frames
// would arrive on whichever queue the device's hashing picks).
uint16_t UsableQueues(const driver::DeviceInfo& info) {
  return info.can_steer ? info.num_queues : 1;
}

absl::StatusOr<std::unique_ptr<driver::Device>> OpenWithFallback(const std::string& uri,
                                                                 std::string* note) {
  note->clear();
  absl::StatusOr<std::unique_ptr<driver::Device>> dev = driver::OpenDevice(uri);
  if (const size_t plus = driver::CompositeSplit(uri); !dev.ok() && plus != std::string::npos) {
    // LOCAL+REMOTE whose intra-host part cannot open (no writable run
    // directory, /dev/shm full): the remote device alone still reaches
    // every peer, this host's through the kernel.
    const std::string remote = uri.substr(plus + 1);
    absl::StatusOr<std::unique_ptr<driver::Device>> alone = driver::OpenDevice(remote);
    if (alone.ok()) {
      *note = absl::StrCat(uri, ": ", dev.status().message(), "; using ", remote,
                           " alone (this host's processes too)");
      dev = std::move(alone);
    }
  }
  return dev;
}

std::shared_ptr<SharedOpen> NewOpen(std::unique_ptr<driver::Device> dev) {
  auto open = std::make_shared<SharedOpen>();
  open->taken.resize(UsableQueues(dev->info()));
  open->dev = std::move(dev);
  return open;
}

// A free queue of open as a new lane, or null when none is.
std::shared_ptr<Lane> TakeFreeQueue(const std::shared_ptr<SharedOpen>& open, bool thread_safe) {
  std::lock_guard<std::mutex> l(open->mu);
  for (uint16_t q = 0; q < open->taken.size(); ++q) {
    if (open->taken[q]) continue;
    open->taken[q] = true;
    auto lane = std::make_shared<Lane>();
    lane->open = open;
    lane->dev = open->dev.get();
    lane->queue = q;
    lane->port = std::make_unique<rdm::Port>(open->dev->queue(q), open->dev->info());
    lane->lock.thread_safe = thread_safe;
    return lane;
  }
  return nullptr;
}

}  // namespace

SharedOpen::~SharedOpen() {
  // Closed under the registry's lock: a domain opening the URI meanwhile
  // waits for the port to be free rather than fail to open it.
  std::lock_guard<std::mutex> l(g_opens_mu);
  if (!key.empty()) {
    auto it = Opens().find(key);
    if (it != Opens().end() && it->second.expired()) Opens().erase(it);
  }
  dev.reset();
}

Lane::~Lane() {
  port.reset();
  if (open == nullptr) return;
  std::lock_guard<std::mutex> l(open->mu);
  if (queue < open->taken.size()) open->taken[queue] = false;
}

absl::StatusOr<std::shared_ptr<Lane>> OpenDomainLane(const std::string& uri, bool thread_safe,
                                                     bool lock_unlocked, std::string* note) {
  note->clear();
  std::lock_guard<std::mutex> serial(g_open_serial);
  std::shared_ptr<SharedOpen> open;
  {
    std::lock_guard<std::mutex> l(g_opens_mu);
    auto it = Opens().find(uri);
    if (it != Opens().end()) open = it->second.lock();
  }
  if (open == nullptr) {
    absl::StatusOr<std::unique_ptr<driver::Device>> dev = OpenWithFallback(uri, note);
    if (!dev.ok()) return dev.status();
    const bool by_frame = !(*dev)->info().host_address;
    open = NewOpen(*std::move(dev));
    if (by_frame) {
      std::lock_guard<std::mutex> l(g_opens_mu);
      open->key = uri;
      Opens()[uri] = open;
    }
  }
  if (std::shared_ptr<Lane> lane = TakeFreeQueue(open, thread_safe)) {
    std::lock_guard<std::mutex> l(open->mu);
    if (open->for_domains.expired()) open->for_domains = lane;
    return lane;
  }
  std::shared_ptr<Lane> first;
  {
    std::lock_guard<std::mutex> l(open->mu);
    first = open->for_domains.lock();
  }
  if (first != nullptr && !first->lock.thread_safe && lock_unlocked && thread_safe) {
    first->lock.thread_safe = true;  // from now on every call on the queue takes it
  }
  if (first == nullptr || !first->lock.thread_safe) {
    return absl::FailedPreconditionError(absl::StrCat(
        "every queue of ", uri, " is taken", first == nullptr ? "" : " by a domain opened with "
        "FI_THREAD_DOMAIN, which takes no lock to share its queue with",
        "; open the device with more queues (queues=N) or another threading level"));
  }
  // Domains share one queue (the first domain's), its port and its lock.
  return first;
}

std::shared_ptr<Lane> OpenContextLane(const Lane& of, bool thread_safe, std::string* why) {
  const driver::DeviceInfo& info = of.dev->info();
  if (info.host_address) {
    // Delivered by port: an instance of its own (its own sockets, its own
    // shared-memory area), the domain's device opened again.
    absl::StatusOr<std::unique_ptr<driver::Device>> dev = driver::OpenDevice(info.uri);
    if (!dev.ok()) {
      *why = absl::StrCat("cannot open another instance of ", info.uri, ": ",
                          dev.status().message());
      return nullptr;
    }
    return TakeFreeQueue(NewOpen(*std::move(dev)), thread_safe);
  }
  std::shared_ptr<Lane> lane = TakeFreeQueue(of.open, thread_safe);
  if (lane == nullptr) {
    *why = UsableQueues(info) > 1
               ? absl::StrCat("every queue of ", info.uri, " is taken")
               : absl::StrCat(info.uri, " has one queue it can steer to (queues=",
                              info.num_queues, ", steering ", info.can_steer ? "yes" : "no", ")");
  }
  return lane;
}

absl::Status ClaimPort(Lane& lane, uint16_t udp_port) {
  SharedOpen& open = *lane.open;
  std::lock_guard<std::mutex> l(open.mu);
  if (!open.ports.insert(udp_port).second) {
    return absl::AlreadyExistsError(absl::StrCat("UDP port ", udp_port, " of ",
                                                 open.dev->info().uri,
                                                 " has an endpoint of another domain"));
  }
  if (open.taken.size() > 1) {
    if (absl::Status s = open.dev->SteerUdpPort(udp_port, lane.queue); !s.ok()) {
      open.ports.erase(udp_port);
      return s;
    }
  }
  return absl::OkStatus();
}

void ReleasePort(Lane& lane, uint16_t udp_port) {
  std::lock_guard<std::mutex> l(lane.open->mu);
  lane.open->ports.erase(udp_port);
}

}  // namespace bypass::fi
