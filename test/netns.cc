#include "test/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bypass::test {
namespace {

absl::Status Enter(const std::string& ns) {
  const std::string path = "/var/run/netns/" + ns;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  int rc = setns(fd, CLONE_NEWNET);
  int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("setns into ", ns, ": ", std::strerror(err), " (run the test as root)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Run(const std::string& command) {
  const std::string quiet = command + " 2>/tmp/bypass-netns.err";
  int rc = std::system(quiet.c_str());
  if (rc != 0) {
    std::string err;
    if (FILE* f = std::fopen("/tmp/bypass-netns.err", "r")) {
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      buf[n] = 0;
      err = buf;
      std::fclose(f);
    }
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return absl::UnavailableError(absl::StrCat("'", command, "' failed: ", err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<VethPair>> VethPair::Create(const std::string& prefix) {
  if (geteuid() != 0) {
    return absl::PermissionDeniedError(
        "network namespaces need root: run the test as root (CI does)");
  }
  if (std::system("command -v ip >/dev/null 2>&1") != 0) {
    return absl::UnavailableError("iproute2's `ip` is missing: run tools/setup.sh");
  }
  std::unique_ptr<VethPair> v(new VethPair);
  v->ns_a_ = prefix + "a";
  v->ns_b_ = prefix + "b";
  v->if_a_ = prefix + "0";
  v->if_b_ = prefix + "1";
  const unsigned net = static_cast<unsigned>(getpid() % 200) + 1;
  v->ip_a_ = absl::StrCat("10.201.", net, ".1");
  v->ip_b_ = absl::StrCat("10.201.", net, ".2");
  // Leftovers of a killed run with the same prefix go first.
  Run(absl::StrCat("ip netns del ", v->ns_a_)).IgnoreError();
  Run(absl::StrCat("ip netns del ", v->ns_b_)).IgnoreError();
  for (const std::string& cmd : {
           absl::StrCat("ip netns add ", v->ns_a_),
           absl::StrCat("ip netns add ", v->ns_b_),
           absl::StrCat("ip link add ", v->if_a_, " netns ", v->ns_a_, " type veth peer name ",
                        v->if_b_, " netns ", v->ns_b_),
           // No IPv6: its neighbour discovery would put frames on the wire
           // that the tests did not send.
           absl::StrCat("ip netns exec ", v->ns_a_, " sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'"),
           absl::StrCat("ip netns exec ", v->ns_b_, " sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'"),
           absl::StrCat("ip netns exec ", v->ns_a_, " sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'"),
           absl::StrCat("ip netns exec ", v->ns_b_, " sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'"),
           absl::StrCat("ip -n ", v->ns_a_, " addr add ", v->ip_a_, "/24 dev ", v->if_a_),
           absl::StrCat("ip -n ", v->ns_b_, " addr add ", v->ip_b_, "/24 dev ", v->if_b_),
           absl::StrCat("ip -n ", v->ns_a_, " link set ", v->if_a_, " up"),
           absl::StrCat("ip -n ", v->ns_b_, " link set ", v->if_b_, " up"),
           absl::StrCat("ip -n ", v->ns_a_, " link set lo up"),
           absl::StrCat("ip -n ", v->ns_b_, " link set lo up"),
       }) {
    if (absl::Status s = Run(cmd); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "network namespaces are unavailable here (", s.message(),
          "): the test needs root and a kernel with netns and veth"));
    }
  }
  return v;
}

VethPair::~VethPair() {
  // Deleting a namespace deletes the veth end in it, and so the pair.
  Run(absl::StrCat("ip netns del ", ns_a_)).IgnoreError();
  Run(absl::StrCat("ip netns del ", ns_b_)).IgnoreError();
}

absl::Status VethPair::EnterA() const { return Enter(ns_a_); }
absl::Status VethPair::EnterB() const { return Enter(ns_b_); }

}  // namespace bypass::test
