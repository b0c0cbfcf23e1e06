// fi_av(3): insert, insertsvc, insertsym, remove, lookup, straddr; FI_AV_TABLE
// indices; removal with work in flight. Addresses are FI_SOCKADDR_IN, so the
// reference is tcp (shm's addresses are strings).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

fid_av* OpenAv(Ctx& c, fi_av_type type, size_t* addrlen) {
  fi_info* h = c.Hints();
  h->addr_format = FI_SOCKADDR_IN;
  fi_info* i = c.Info(h);
  *addrlen = i->src_addrlen != 0 ? i->src_addrlen : sizeof(sockaddr_in);
  return c.Av(c.Domain(c.Fabric(i), i), type);
}

// A:port in the provider's address size (sockaddr_in first).
std::vector<char> Addr(size_t len, uint32_t host, uint16_t port) {
  std::vector<char> a(len, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(host);
  std::memcpy(a.data(), &sin, sizeof sin);
  return a;
}

sockaddr_in Lookup(fid_av* av, fi_addr_t a, size_t len) {
  std::vector<char> buf(len + 16, 0);
  size_t got = buf.size();
  CHECK_RET(fi_av_lookup(av, a, buf.data(), &got), 0);
  CHECK(got >= sizeof(sockaddr_in), "fi_av_lookup answers " << got << " bytes");
  sockaddr_in sin;
  std::memcpy(&sin, buf.data(), sizeof sin);
  CHECK(sin.sin_family == AF_INET, "the looked-up address's family is " << sin.sin_family);
  return sin;
}

void CheckIs(const sockaddr_in& sin, uint32_t host, uint16_t port) {
  CHECK(ntohl(sin.sin_addr.s_addr) == host && ntohs(sin.sin_port) == port,
        "the address is " << inet_ntoa(sin.sin_addr) << ":" << ntohs(sin.sin_port) << ", want port " << port);
}

// Not an address of this host: an AV stores addresses, it does not resolve
// them, and a provider may name its own host differently.
constexpr uint32_t kLo = 0x0a0b0c0d;  // 10.11.12.13

}  // namespace

// "the index of the first address inserted into an FI_AV_TABLE will be 0,
// and successive insertions will be given sequential indices ... across
// insertion calls".
CONFORMANCE_CASE(av_table_indices, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  std::vector<char> two = Addr(len, kLo, 47401);
  const std::vector<char> second = Addr(len, kLo, 47402);
  two.insert(two.end(), second.begin(), second.end());
  fi_addr_t a[2], b;
  CHECK_RET(fi_av_insert(av, two.data(), 2, a, 0, nullptr), 2);
  CHECK_RET(fi_av_insert(av, Addr(len, kLo, 47403).data(), 1, &b, 0, nullptr), 1);
  CHECK(a[0] == 0 && a[1] == 1 && b == 2, "indices " << a[0] << ", " << a[1] << ", " << b << "; want 0, 1, 2");
}

// FI_AV_MAP: each address gets its own fi_addr, and fi_av_lookup answers
// the address inserted.
CONFORMANCE_CASE(av_map_insert_lookup, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_MAP, &len);
  fi_addr_t a, b;
  CHECK_RET(fi_av_insert(av, Addr(len, kLo, 47411).data(), 1, &a, 0, nullptr), 1);
  CHECK_RET(fi_av_insert(av, Addr(len, kLo, 47412).data(), 1, &b, 0, nullptr), 1);
  CHECK(a != b, "two addresses share fi_addr " << a);
  CheckIs(Lookup(av, a, len), kLo, 47411);
  CheckIs(Lookup(av, b, len), kLo, 47412);
}

// "If the actual address is larger than what can fit into the buffer, it
// will be truncated. On output, addrlen is set to the size ... needed".
CONFORMANCE_CASE(av_lookup_truncates, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  fi_addr_t a;
  CHECK_RET(fi_av_insert(av, Addr(len, kLo, 47421).data(), 1, &a, 0, nullptr), 1);
  char buf[8];
  std::memset(buf, 0x5a, sizeof buf);
  size_t got = 4;
  fi_av_lookup(av, a, buf, &got);
  CHECK(got == len, "addrlen is " << got << " after a short lookup; the address needs " << len);
  for (size_t k = 4; k < sizeof buf; ++k) CHECK(buf[k] == 0x5a, "the lookup wrote past the 4 bytes given");
}

// A removed fi_addr "is invalid until it is returned again by a new
// fi_av_insert": its lookup fails.
CONFORMANCE_CASE(av_remove_invalidates, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  fi_addr_t a;
  CHECK_RET(fi_av_insert(av, Addr(len, kLo, 47431).data(), 1, &a, 0, nullptr), 1);
  CHECK_RET(fi_av_remove(av, &a, 1, 0), 0);
  std::vector<char> buf(len);
  size_t got = len;
  const int r = fi_av_lookup(av, a, buf.data(), &got);
  CHECK(r < 0, "fi_av_lookup of a removed address returned " << Err(r));
}

// A failed insertion: the count of those inserted, FI_ADDR_NOTAVAIL for it.
CONFORMANCE_CASE(av_insert_bad_address, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  std::vector<char> two = Addr(len, kLo, 47441);
  std::vector<char> bad(len, 0);
  bad[0] = 0x7f;  // sa_family 0x7f7f-ish: no address family
  bad[1] = 0x7f;
  two.insert(two.end(), bad.begin(), bad.end());
  fi_addr_t a[2] = {0, 0};
  const int r = fi_av_insert(av, two.data(), 2, a, 0, nullptr);
  CHECK(r == 1, "fi_av_insert of a good and a bad address returned " << Err(r) << ", want 1");
  CHECK(a[0] != FI_ADDR_NOTAVAIL, "the good address got FI_ADDR_NOTAVAIL");
  CHECK(a[1] == FI_ADDR_NOTAVAIL, "the bad address got " << a[1] << ", not FI_ADDR_NOTAVAIL");
}

// fi_av_insertsvc: node and service as strings.
CONFORMANCE_CASE(av_insertsvc, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  fi_addr_t a;
  CHECK_RET(fi_av_insertsvc(av, "10.11.12.13", "47451", &a, 0, nullptr), 1);
  CheckIs(Lookup(av, a, len), kLo, 47451);
}

// fi_av_insertsym: "{service, service + svccnt - 1} ... All service
// addresses for a node will be inserted before the next node".
CONFORMANCE_CASE(av_insertsym, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  fi_addr_t a[4];
  CHECK_RET(fi_av_insertsym(av, "10.11.12.13", 2, "47461", 2, a, 0, nullptr), 4);
  CheckIs(Lookup(av, a[0], len), kLo, 47461);
  CheckIs(Lookup(av, a[1], len), kLo, 47462);
  CheckIs(Lookup(av, a[2], len), kLo + 1, 47461);
  CheckIs(Lookup(av, a[3], len), kLo + 1, 47462);
}

// fi_av_straddr: a string in buf; len set to the size needed; truncated
// (still returning buf) when buf is short.
CONFORMANCE_CASE(av_straddr, kTcp) {
  size_t len;
  fid_av* av = OpenAv(c, FI_AV_TABLE, &len);
  const std::vector<char> addr = Addr(len, kLo, 47471);
  char buf[128];
  size_t n = sizeof buf;
  CHECK(fi_av_straddr(av, addr.data(), buf, &n) == buf, "fi_av_straddr does not return buf");
  const size_t need = n;
  CHECK(std::strlen(buf) > 0 && need >= std::strlen(buf) + 1, "len " << need << " for \"" << buf << "\"");
  char small[5];
  std::memset(small, 'x', sizeof small);
  n = 4;
  CHECK(fi_av_straddr(av, addr.data(), small, &n) == small, "a short fi_av_straddr does not return buf");
  CHECK(n == need, "a short fi_av_straddr sets len " << n << ", not the " << need << " needed");
  CHECK(small[4] == 'x', "fi_av_straddr wrote past the 4 bytes given");
}

// "The behavior of operations in progress that reference the removed
// addresses is undefined": bypass promises the pending send completes once
// (well or not), nothing breaks, and the peer inserted again is reachable.
CONFORMANCE_CASE(av_remove_in_flight, kShm) {
  Pair p = c.OpenPair(c.Hints(FI_TAGGED));
  const size_t len = 1 << 20;
  char* big = c.Buf(len, 'r');
  char* in = c.Buf(len);
  int sctx;
  c.Post("fi_tsend", [&] { return fi_tsend(p.a.ep, big, len, nullptr, p.a_to_b, 1, &sctx); });
  CHECK_RET(fi_av_remove(p.a.av, &p.a_to_b, 1, 0), 0);
  CHECK_RET(fi_trecv(p.b.ep, in, len, nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr), 0);
  const Completion s = c.Wait(p.a.tx, "the send pending when its address was removed");
  CHECK(s.error ? s.err.op_context == &sctx || s.err.op_context == nullptr : s.entry.op_context == &sctx,
        "the pending send's completion has another op_context");
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 200), "a second completion for the pending send");
  // Whatever became of it, the peer is reachable again once inserted.
  const fi_addr_t again = c.Insert(p.a.av, p.b.name);
  char* ping = c.Buf(8, 'p');
  char* got = c.Buf(8);
  int rctx;
  CHECK_RET(fi_trecv(p.b.ep, got, 8, nullptr, FI_ADDR_UNSPEC, 2, 0, &rctx), 0);
  c.Post("fi_tsend", [&] { return fi_tsend(p.a.ep, ping, 8, nullptr, again, 2, nullptr); });
  for (;;) {
    // The first message's receive may complete (or fail) on the way.
    const Completion r = c.Wait(p.b.rx, "the message after re-insertion");
    if (!r.error && r.entry.op_context == &rctx) break;
    CHECK(!r.error || r.err.op_context != &rctx, "the receive after re-insertion failed: " << Err(-r.err.err));
    CHECK(r.error || r.entry.tag == 1, "an unexpected receive completion");
  }
  CHECK(std::memcmp(got, ping, 8) == 0, "the message after re-insertion differs");
}

}  // namespace bypass::fi::conformance
