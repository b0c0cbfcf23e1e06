// fi_getinfo(3): hints matching and refusal, attributes reported, FI_SOURCE,
// node/service forms, address formats.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

int Count(const fi_info* list) {
  int n = 0;
  for (; list != nullptr; list = list->next) ++n;
  return n;
}

const sockaddr_in* In(const void* addr, size_t len) {
  CHECK(addr != nullptr, "the address is null");
  CHECK(len >= sizeof(sockaddr_in), "the address is " << len << " bytes, shorter than a sockaddr_in");
  const auto* sin = static_cast<const sockaddr_in*>(addr);
  CHECK(sin->sin_family == AF_INET, "the address's family is " << sin->sin_family << ", not AF_INET");
  return sin;
}

}  // namespace

// "prov_name ... the name of the provider": only that provider's entries.
CONFORMANCE_CASE(getinfo_prov_name_selects, kShm) {
  for (const fi_info* i = c.Info(c.Hints()); i != nullptr; i = i->next) {
    CHECK(c.prov() == i->fabric_attr->prov_name,
          "an entry of provider " << i->fabric_attr->prov_name << " answers hints naming " << c.prov());
  }
}

// Every entry offers at least the capabilities asked for.
CONFORMANCE_CASE(getinfo_caps_superset, kShm) {
  const uint64_t want = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
  for (const fi_info* i = c.Info(c.Hints(want)); i != nullptr; i = i->next) {
    CHECK((i->caps & want) == want, "an entry's caps 0x" << std::hex << i->caps << " lack 0x" << (want & ~i->caps));
  }
}

// "If no matching fabric information is available, fi_getinfo returns
// -FI_ENODATA": an endpoint type the provider does not offer.
CONFORMANCE_CASE(getinfo_refuses_ep_type, kShm) {
  fi_info* h = c.Hints();
  h->ep_attr->type = FI_EP_SOCK_DGRAM;
  fi_info* out;
  CHECK_RET(c.TryInfo(h, &out), -FI_ENODATA);
}

// An attribute beyond the provider's limit is refused, not lowered.
CONFORMANCE_CASE(getinfo_refuses_limits, kShm) {
  fi_info* h = c.Hints();
  h->tx_attr->inject_size = size_t{1} << 40;
  fi_info* out;
  CHECK_RET(c.TryInfo(h, &out), -FI_ENODATA);
}

// Entries satisfy the sizes asked for (tx size, inject size).
CONFORMANCE_CASE(getinfo_attrs_at_least_hints, kShm) {
  fi_info* h = c.Hints();
  h->tx_attr->inject_size = 64;
  h->tx_attr->size = 16;
  h->rx_attr->size = 16;
  for (const fi_info* i = c.Info(h); i != nullptr; i = i->next) {
    CHECK(i->tx_attr->inject_size >= 64, "inject_size " << i->tx_attr->inject_size << " < 64 asked");
    CHECK(i->tx_attr->size >= 16 && i->rx_attr->size >= 16, "tx/rx size below the hints");
  }
}

// "mode ... bits the application supports": an entry needs no mode bit
// the hints did not offer, and its mr_mode only bits the hints allowed.
CONFORMANCE_CASE(getinfo_mode_subset_of_hints, kShm) {
  fi_info* h = c.Hints();
  h->mode = 0;
  const uint64_t allowed = h->domain_attr->mr_mode;
  for (const fi_info* i = c.Info(h); i != nullptr; i = i->next) {
    CHECK(i->mode == 0, "an entry requires mode 0x" << std::hex << i->mode << " the hints did not offer");
    CHECK((i->domain_attr->mr_mode & ~allowed) == 0,
          "an entry requires mr_mode 0x" << std::hex << (i->domain_attr->mr_mode & ~allowed) << " not in the hints");
  }
}

// "FI_SOURCE: the node and service parameters specify the local source
// address": src_addr is that address and dest_addr is not set.
CONFORMANCE_CASE(getinfo_fi_source_node_service, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  const fi_info* i = c.Info(h, "127.0.0.1", "47123", FI_SOURCE);
  const sockaddr_in* sin = In(i->src_addr, i->src_addrlen);
  CHECK(ntohs(sin->sin_port) == 47123, "src_addr's port is " << ntohs(sin->sin_port) << ", not 47123");
  CHECK(sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "src_addr is not 127.0.0.1");
  CHECK(i->dest_addr == nullptr, "dest_addr is set although FI_SOURCE was given");
}

// Without FI_SOURCE, node and service name the destination.
CONFORMANCE_CASE(getinfo_node_service_dest, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  const fi_info* i = c.Info(h, "127.0.0.1", "47124");
  const sockaddr_in* sin = In(i->dest_addr, i->dest_addrlen);
  CHECK(ntohs(sin->sin_port) == 47124, "dest_addr's port is " << ntohs(sin->sin_port) << ", not 47124");
  CHECK(sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "dest_addr is not 127.0.0.1");
}

// A service alone with FI_SOURCE: the local address with that port.
CONFORMANCE_CASE(getinfo_service_only_source, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  const fi_info* i = c.Info(h, nullptr, "47125", FI_SOURCE);
  const sockaddr_in* sin = In(i->src_addr, i->src_addrlen);
  CHECK(ntohs(sin->sin_port) == 47125, "src_addr's port is " << ntohs(sin->sin_port) << ", not 47125");
}

// hints->src_addr in FI_SOCKADDR_IN is honoured: entries carry it.
CONFORMANCE_CASE(getinfo_hints_src_addr, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  auto* sin = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
  sin->sin_family = AF_INET;
  sin->sin_port = htons(47126);
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  h->src_addr = sin;
  h->src_addrlen = sizeof *sin;
  const fi_info* i = c.Info(h);
  const sockaddr_in* got = In(i->src_addr, i->src_addrlen);
  CHECK(ntohs(got->sin_port) == 47126 && got->sin_addr.s_addr == sin->sin_addr.s_addr,
        "src_addr is not the hints' 127.0.0.1:47126");
}

// addr_format FI_SOCKADDR_IN asked: every entry is FI_SOCKADDR_IN.
CONFORMANCE_CASE(getinfo_addr_format_sockaddr_in, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  for (const fi_info* i = c.Info(h); i != nullptr; i = i->next) {
    CHECK(i->addr_format == FI_SOCKADDR_IN, "an entry's addr_format is " << i->addr_format);
  }
}

// FI_SOCKADDR, "a sockaddr ... determined at run time by its sa_family":
// entries are socket address formats.
CONFORMANCE_CASE(getinfo_addr_format_sockaddr, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR;
  for (const fi_info* i = c.Info(h); i != nullptr; i = i->next) {
    CHECK(i->addr_format == FI_SOCKADDR || i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6,
          "an entry's addr_format is " << i->addr_format << ", not a socket address");
  }
}

// A format the provider cannot use is refused.
CONFORMANCE_CASE(getinfo_refuses_addr_format, kTcp) {
  fi_info* h = c.Hints();
  h->addr_format = FI_ADDR_PSMX2;
  fi_info* out;
  CHECK_RET(c.TryInfo(h, &out), -FI_ENODATA);
}

// The threading level asked for is the one reported (or refused).
CONFORMANCE_CASE(getinfo_threading_safe, kShm) {
  fi_info* h = c.Hints();
  h->domain_attr->threading = FI_THREAD_SAFE;
  for (const fi_info* i = c.Info(h); i != nullptr; i = i->next) {
    CHECK(i->domain_attr->threading == FI_THREAD_SAFE, "threading " << i->domain_attr->threading
                                                                    << " reported for FI_THREAD_SAFE hints");
  }
}

// Each threading level asked for is refused, or reported as that level or
// one that asks less serialization of the application (SAFE over FID over
// ENDPOINT over COMPLETION over DOMAIN).
CONFORMANCE_CASE(getinfo_threading_levels, kShm) {
  auto rank = [](int level) {
    switch (level) {
      case FI_THREAD_SAFE:
        return 5;
      case FI_THREAD_FID:
        return 4;
      case FI_THREAD_ENDPOINT:
        return 3;
      case FI_THREAD_COMPLETION:
        return 2;
      case FI_THREAD_DOMAIN:
        return 1;
      default:
        return 0;
    }
  };
  int offered = 0;
  for (fi_threading level : {FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_ENDPOINT, FI_THREAD_COMPLETION,
                             FI_THREAD_DOMAIN}) {
    fi_info* h = c.Hints();
    h->domain_attr->threading = level;
    fi_info* out;
    const int r = c.TryInfo(h, &out);
    if (r == -FI_ENODATA) continue;
    CHECK(r == 0, "fi_getinfo with threading " << level << " returned " << Err(r));
    ++offered;
    for (const fi_info* i = out; i != nullptr; i = i->next) {
      CHECK(rank(i->domain_attr->threading) >= rank(level),
            "threading " << i->domain_attr->threading << " reported for hints asking " << level);
    }
  }
  CHECK(offered > 0, "every threading level is refused");
}

// fi_getinfo with no hints lists the provider (FI_PROVIDER selects it).
CONFORMANCE_CASE(getinfo_no_hints, kShm) {
  fi_info* out;
  CHECK_RET(c.TryInfo(nullptr, &out), 0);
  int mine = 0;
  for (const fi_info* i = out; i != nullptr; i = i->next) mine += c.prov() == i->fabric_attr->prov_name;
  CHECK(mine > 0, "no entry of " << c.prov() << " among " << Count(out) << " with no hints");
}

}  // namespace bypass::fi::conformance
