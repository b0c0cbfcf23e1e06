// Two processes over bypass's default domain (no configuration: shm:+udp:)
// and over libfabric's shm for the reference: traffic both ways, and a peer
// that dies (SIGKILL) with an operation toward it pending.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fabric/fi/conformance/conformance.h"

namespace bypass::fi::conformance {
namespace {

struct Child {
  pid_t pid;
  int to;    // parent -> child
  int from;  // child -> parent
};

using ChildBody = std::function<void(Ctx&, Ep&, fi_addr_t parent, int from_parent)>;

// The child's side: its own endpoint on its own fabric, names swapped over
// the pipes, then `body`; its verdict goes back as the last message.
[[noreturn]] void ChildMain(const std::string& prov, const ChildBody& body, int in, int out) {
  std::string verdict = "ok";
  {
    Ctx c(prov);
    try {
      fi_info* i = c.Info(c.Hints(FI_MSG | FI_TAGGED));
      Ep e = c.OpenEp(c.Domain(c.Fabric(i), i), i);
      WriteMsg(out, std::string(e.name.begin(), e.name.end()));
      const std::string parent = ReadMsg(in, "the parent's address");
      const fi_addr_t to_parent = c.Insert(e.av, std::vector<char>(parent.begin(), parent.end()));
      body(c, e, to_parent, in);
    } catch (const Failure& f) {
      verdict = "child: " + f.what;
    } catch (const Refused& r) {
      verdict = "child: " + r.what;
    }
    try {
      WriteMsg(out, verdict);
    } catch (const Failure&) {
    }
  }
  _exit(0);
}

// Forks the peer before this process touches libfabric.
Child Spawn(const std::string& prov, const ChildBody& body) {
  int down[2], up[2];
  CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe failed");
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    ChildMain(prov, body, down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  return {pid, down[1], up[0]};
}

// fi_addr of the child in `e`'s AV, after swapping names.
fi_addr_t Meet(Ctx& c, const Child& child, const Ep& e) {
  const std::string name = ReadMsg(child.from, "the child's address");
  WriteMsg(child.to, std::string(e.name.begin(), e.name.end()));
  return c.Insert(e.av, std::vector<char>(name.begin(), name.end()));
}

void Await(const Child& child) {
  const std::string verdict = ReadMsg(child.from, "the child's verdict");
  int status;
  waitpid(child.pid, &status, 0);
  CHECK(verdict == "ok", verdict);
}

std::vector<char> Pattern(size_t len, char seed) {
  std::vector<char> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<char>(seed + i % 101);
  return v;
}

void Receive(Ctx& c, Ep& e, uint64_t tag, size_t len, char seed) {
  std::vector<char> in(len);
  CHECK_RET(fi_trecv(e.ep, in.data(), len, nullptr, FI_ADDR_UNSPEC, tag, 0, nullptr), 0);
  const Completion r = c.Wait(e.rx, "a message from the other process");
  CHECK(!r.error, "a receive failed: " << Err(-r.err.err));
  CHECK(r.entry.len == len && in == Pattern(len, seed), "a message from the other process arrived damaged");
}

void Send(Ctx& c, Ep& e, fi_addr_t to, uint64_t tag, size_t len, char seed) {
  const std::vector<char> out = Pattern(len, seed);
  c.Post("fi_tsend", [&] { return fi_tsend(e.ep, out.data(), len, nullptr, to, tag, nullptr); });
  const Completion s = c.Wait(e.tx, "a send to the other process");
  CHECK(!s.error, "a send to the other process failed: " << Err(-s.err.err));
}

constexpr size_t kBig = 1 << 20;

}  // namespace

// Two processes exchange small and 1 MiB messages both ways.
CONFORMANCE_CASE(mp_two_processes, kShm) {
  const Child child = Spawn(c.prov(), [](Ctx& cc, Ep& e, fi_addr_t parent, int) {
    Receive(cc, e, 1, 8, 'a');
    Receive(cc, e, 2, kBig, 'b');
    Send(cc, e, parent, 3, 8, 'c');
    Send(cc, e, parent, 4, kBig, 'd');
  });
  fi_info* i = c.Info(c.Hints(FI_MSG | FI_TAGGED));
  Ep e = c.OpenEp(c.Domain(c.Fabric(i), i), i);
  const fi_addr_t peer = Meet(c, child, e);
  Send(c, e, peer, 1, 8, 'a');
  Send(c, e, peer, 2, kBig, 'b');
  Receive(c, e, 3, 8, 'c');
  Receive(c, e, 4, kBig, 'd');
  Await(child);
}

// A peer SIGKILLed: a send toward it completes once (it cannot hang), and
// the endpoint still reaches another peer.
CONFORMANCE_CASE(mp_peer_dies, kShm) {
  const Child child = Spawn(c.prov(), [](Ctx& cc, Ep& e, fi_addr_t parent, int) {
    Receive(cc, e, 1, 8, 'a');
    Send(cc, e, parent, 2, 8, 'b');
    for (;;) pause();  // until killed
  });
  Pair p = c.OpenPair(c.Hints(FI_MSG | FI_TAGGED));
  const fi_addr_t peer = Meet(c, child, p.a);
  Send(c, p.a, peer, 1, 8, 'a');
  Receive(c, p.a, 2, 8, 'b');
  kill(child.pid, SIGKILL);
  int status;
  waitpid(child.pid, &status, 0);
  const std::vector<char> out = Pattern(65536, 'x');
  int ctx;
  c.Post("fi_tsend to the dead peer", [&] { return fi_tsend(p.a.ep, out.data(), out.size(), nullptr, peer, 5, &ctx); });
  const Completion s = c.Wait(p.a.tx, "the send to the dead peer");
  CHECK((s.error ? s.err.op_context : s.entry.op_context) == &ctx, "the completion has another op_context");
  Completion extra;
  CHECK(!c.Poll(p.a.tx, &extra, 200), "a second completion for the send to the dead peer");
  Send(c, p.a, p.a_to_b, 6, 8, 'y');
  Receive(c, p.b, 6, 8, 'y');
}

// (Issue 21, fabric/fi/README.md "Silent and dead peers"; these two are
// here to share this file's two-process harness.) A peer that makes no
// libfabric call for longer than the peer timeout (2.5 s; the harness sets
// FI_BYPASS_PEER_TIMEOUT_MS=2000) while our send waits for it, an MPI rank
// computing: the send completes, without error, once it progresses.
CONFORMANCE_CASE(mp_silent_peer_waited_for, kShm) {
  const Child child = Spawn(c.prov(), [](Ctx& cc, Ep& e, fi_addr_t parent, int) {
    Receive(cc, e, 1, 8, 'a');
    Send(cc, e, parent, 2, 8, 'b');
    usleep(2'500'000);  // no call at all
    Receive(cc, e, 3, 8, 'c');
  });
  fi_info* i = c.Info(c.Hints(FI_MSG | FI_TAGGED));
  Ep e = c.OpenEp(c.Domain(c.Fabric(i), i), i);
  const fi_addr_t peer = Meet(c, child, e);
  Send(c, e, peer, 1, 8, 'a');
  Receive(c, e, 2, 8, 'b');
  Send(c, e, peer, 3, 8, 'c');  // waits for the silent peer; fails on a timeout
  Await(child);
}

// A peer SIGKILLed with our send toward it pending: the send fails with
// FI_ECONNRESET (the peer is gone), once, with its op_context.
CONFORMANCE_CASE(mp_killed_peer_resets, kShm) {
  const Child child = Spawn(c.prov(), [](Ctx& cc, Ep& e, fi_addr_t parent, int) {
    Receive(cc, e, 1, 8, 'a');
    Send(cc, e, parent, 2, 8, 'b');
    for (;;) pause();  // until killed
  });
  fi_info* i = c.Info(c.Hints(FI_MSG | FI_TAGGED));
  Ep e = c.OpenEp(c.Domain(c.Fabric(i), i), i);
  const fi_addr_t peer = Meet(c, child, e);
  Send(c, e, peer, 1, 8, 'a');
  Receive(c, e, 2, 8, 'b');
  kill(child.pid, SIGKILL);
  int status;
  waitpid(child.pid, &status, 0);
  const std::vector<char> out = Pattern(64, 'x');
  int ctx;
  c.Post("fi_tsend to the killed peer",
         [&] { return fi_tsend(e.ep, out.data(), out.size(), nullptr, peer, 5, &ctx); });
  const Completion s = c.Wait(e.tx, "the send to the killed peer");
  CHECK(s.error, "the send to the killed peer completed without error");
  CHECK(s.err.op_context == &ctx, "the error has another op_context");
  CHECK(s.err.err == FI_ECONNRESET, "the error is " << Err(s.err.err) << ", not FI_ECONNRESET");
  Completion extra;
  CHECK(!c.Poll(e.tx, &extra, 200), "a second completion for the send to the killed peer");
}

}  // namespace bypass::fi::conformance
