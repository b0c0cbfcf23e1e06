// Traffic classes (fi_domain(3) / fi_endpoint(3) tclass, FI_TC_*) as the
// DSCP of the IPv4 header of every packet an endpoint sends (RFC 4594's
// service classes):
//
//   FI_TC_UNSPEC            the domain's class, else DSCP 0
//   FI_TC_DSCP | n          n (fi_tc_dscp_set; 0..63)
//   FI_TC_BEST_EFFORT       0  (CS0, default forwarding)
//   FI_TC_LOW_LATENCY       46 (EF, expedited forwarding)
//   FI_TC_DEDICATED_ACCESS  34 (AF41, assured forwarding class 4)
//   FI_TC_BULK_DATA         10 (AF11, high-throughput data)
//   FI_TC_SCAVENGER         8  (CS1, lower effort)
//   FI_TC_NETWORK_CTRL      48 (CS6, network control)
//
// A class is per endpoint (tx_attr->tclass, else domain_attr->tclass): no
// fi_msg carries one per operation. No device here tags VLANs (no PCP) or
// has several transmit queues of different priority; on the intra-host
// device each pair of endpoints has one ring, which classes do not reorder
// (README.md).
#ifndef BYPASS_FABRIC_FI_TCLASS_H_
#define BYPASS_FABRIC_FI_TCLASS_H_

#include <cstdint>
#include <optional>

namespace bypass::fi {

// The DSCP of a traffic class; nullopt for FI_TC_UNSPEC; nullopt with *bad
// set for a value that is no class (a DSCP above 63, an unknown label).
std::optional<uint8_t> DscpOfTclass(uint32_t tclass, bool* bad);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_TCLASS_H_
