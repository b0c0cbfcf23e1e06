// Test hosts on one machine: two network namespaces joined by a veth pair,
// created for a test and removed after it. Needs root and iproute2.
#ifndef BYPASS_TEST_NETNS_H_
#define BYPASS_TEST_NETNS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace bypass::test {

// Two namespaces "<prefix>a" and "<prefix>b", veth "<prefix>0" in a with
// 10.201.N.1/24 and "<prefix>1" in b with 10.201.N.2/24, both up. Removed
// (namespaces and the pair) on destruction.
class VethPair {
 public:
  static absl::StatusOr<std::unique_ptr<VethPair>> Create(const std::string& prefix);
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;
  ~VethPair();

  const std::string& ns_a() const { return ns_a_; }
  const std::string& ns_b() const { return ns_b_; }
  const std::string& if_a() const { return if_a_; }
  const std::string& if_b() const { return if_b_; }
  const std::string& ip_a() const { return ip_a_; }
  const std::string& ip_b() const { return ip_b_; }

  // Moves the calling thread into namespace a or b (setns). Do it before
  // DPDK starts, in a process that serves one side only.
  absl::Status EnterA() const;
  absl::Status EnterB() const;

 private:
  VethPair() = default;
  std::string ns_a_, ns_b_, if_a_, if_b_, ip_a_, ip_b_;
};

// Runs a shell command; its output goes to stderr when it fails.
absl::Status Run(const std::string& command);

}  // namespace bypass::test

#endif  // BYPASS_TEST_NETNS_H_
