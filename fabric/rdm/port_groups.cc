// The Port's multicast groups: which inboxes joined which group:port, and
// the copies that give each of them a frame sent to it.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fabric/rdm/inbox.h"
#include "fabric/rdm/rdm.h"

namespace bypass::rdm {

absl::Status Port::JoinGroup(driver::Ipv4Address group, uint16_t udp_port, Inbox* inbox) {
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JoinGroup(", group.ToString(), "): not an IPv4 multicast address (224.0.0.0/4)"));
  }
  for (uint32_t i = 0; i < member_count_; ++i) {
    const GroupMember& m = members_[i];
    if (m.group == group.value && m.udp_port == udp_port && m.inbox == inbox) {
      return absl::AlreadyExistsError(absl::StrCat("JoinGroup(", group.ToString(), ":", udp_port,
                                                   "): this endpoint has joined it already"));
    }
  }
  if (member_count_ == kMaxGroupMembers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        info_.uri, " already has ", kMaxGroupMembers, " multicast memberships on this queue"));
  }
  // The queue joins once per group, for its first member.
  if (Members(group.value, udp_port) == 0) {
    if (absl::Status s = qp_.JoinGroup(group, udp_port); !s.ok()) return s;
  }
  members_[member_count_++] = GroupMember{group.value, udp_port, inbox};
  return absl::OkStatus();
}

uint32_t Port::Members(uint32_t group, uint16_t udp_port) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < member_count_; ++i) {
    n += members_[i].group == group && members_[i].udp_port == udp_port;
  }
  return n;
}

void Port::LeaveGroup(driver::Ipv4Address group, uint16_t udp_port, Inbox* inbox) {
  for (uint32_t i = 0; i < member_count_; ++i) {
    const GroupMember& m = members_[i];
    if (m.group != group.value || m.udp_port != udp_port || m.inbox != inbox) continue;
    members_[i] = members_[--member_count_];
    if (Members(group.value, udp_port) == 0) qp_.LeaveGroup(group, udp_port);
    return;
  }
}

void Port::LoopToGroup(const driver::Packet& frame) {
  if (member_count_ > 0 && !qp_.LoopsMulticast()) DeliverToGroup(const_cast<driver::Packet*>(&frame), /*loop=*/true);
}

bool Port::DeliverToGroup(driver::Packet* p, bool loop) {
  const std::optional<UdpDst> dst = PeekUdpDst(p->data, p->len);
  if (!dst || !driver::Ipv4Address{dst->ip}.IsMulticast()) return false;
  bool given = loop;  // whether p itself is no longer ours to hand out
  for (uint32_t i = 0; i < member_count_; ++i) {
    const GroupMember& m = members_[i];
    if (m.group != dst->ip || m.udp_port != dst->port) continue;
    driver::Packet* out = p;
    if (given) {
      // A further member: a copy of the frame from the queue's pool.
      if (!qp_.AllocBulk({&out, 1})) {
        ++counters_.inbox_full;
        continue;
      }
      if (p->len > out->capacity) {  // a pool of smaller buffers than the frame's
        qp_.FreeBulk({&out, 1});
        ++counters_.inbox_full;
        continue;
      }
      std::memcpy(out->data, p->data, p->len);
      out->len = p->len;
      out->ol_flags = p->ol_flags;
      ++counters_.group_copies;
    }
    if (!m.inbox->Push(out)) {
      ++counters_.inbox_full;
      if (out != p) qp_.FreeBulk({&out, 1});  // p itself goes to the next member
      continue;
    }
    given = true;
  }
  if (!given) {
    ++counters_.no_endpoint;
    qp_.FreeBulk({&p, 1});
  }
  return true;
}

}  // namespace bypass::rdm
