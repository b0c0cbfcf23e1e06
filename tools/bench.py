#!/usr/bin/env python3
"""bench: where bypass stands, in one run.

Runs the bare DPDK memif ping-pong (tools/bare), bypass's raw, rdm and fi
layers (tools/pingpong, every size and mode in one run), Debian's fi_pingpong over the bypass
provider (libbypass-fi.so), and libfabric's own shm and tcp providers, in
alternating repetitions (A B C ... A B C ...) so that the machine's noise
hits all of them alike. Prints the medians with ratios to the bare baseline
and to shm, writes JSON and a gnuplot PNG of latency against size. A second
table does the same across two network namespaces joined by veth pairs:
bypass over af_xdp (a pair at MTU 3502, the largest both af_xdp's
page-sized buffers and XDP on veth take: --xdp_mtu),
and bypass's default domain (kernel UDP) against libfabric's tcp over the
kernel, both on a pair with jumbo frames (--veth_mtu, 9000) (root only).

  bazel run -c opt //tools:bench                      full run (about 6 minutes here)
  bazel run -c opt //tools:bench -- --quick           under two minutes
  bazel run -c opt //tools:bench -- --json=out.json --plot=lat.png --markdown

A benchmark, not a test: a failing column shows its one-line reason and the
run goes on; timings never make it fail. Standard library only.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

FI_LIB_TARGET = "//fabric/fi:libbypass-fi.so"
FI_LIB_MISSING = "n/a (build %s)" % FI_LIB_TARGET
# The largest MTU of bypass's af_xdp device with 4 KiB pages (AfXdpMaxMtu in
# driver/dpdk/af_xdp.h), which XDP on veth takes too.
XDP_MTU = 3502
KIB = 1024
MIB = 1024 * 1024
FI_PP_NO_WINDOW = "fi_pingpong measures no windowed rate"


def fail(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.exit(2)


# ---------------------------------------------------------------- parsing ---
# Every tool's output is parsed here; --selftest checks these parsers against
# the shapes the tools print before it measures anything.

def last_json_line(text):
    """The last line of `text` that is a JSON object, decoded, or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def parse_pingpong(text):
    """Latency figures from `pingpong --json` or `memif_pingpong --json`.

    Accepts the flat schema ({"p50_ns":..,"mean_ns":..,"msg_rate":..}) and the
    nested one ({"rtt_ns":{"p50":..},"msgs_per_sec":..}). Returns a dict with
    p50_ns, p99_ns, mean_ns (round trip) or raises ValueError.
    """
    j = last_json_line(text)
    if j is None:
        raise ValueError("printed no JSON line")
    out = {}
    if "p50_ns" in j:
        for k in ("p50", "p90", "p99", "p999", "max"):
            if k + "_ns" in j:
                out[k + "_ns"] = float(j[k + "_ns"])
        rate = j.get("msg_rate")
        mean = j.get("mean_ns")
    elif isinstance(j.get("rtt_ns"), dict):
        for k in ("p50", "p90", "p99", "p999", "max"):
            if k in j["rtt_ns"]:
                out[k + "_ns"] = float(j["rtt_ns"][k])
        rate = j.get("msgs_per_sec")
        mean = None
    else:
        raise ValueError("JSON has neither p50_ns nor rtt_ns: %s" % sorted(j)[:8])
    if mean is None and rate:
        mean = 1e9 / float(rate)  # round trips per second, one in flight
    if mean is None or out.get("p50_ns", 0) <= 0:
        raise ValueError("JSON has no positive round trip")
    out["mean_ns"] = float(mean)
    return out


def parse_runs(text):
    """{("latency"|"rate", size): figures} from a --mode=latency,rate --sizes run.

    pingpong and memif_pingpong print one JSON line per size and mode;
    latency figures are as parse_pingpong's, rate figures msg_rate and
    mbytes_per_s; a size the tool skipped maps to {"error": its reason}.
    Raises ValueError when no line is understood.
    """
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            j = json.loads(line)
        except ValueError:
            continue
        mode, size = j.get("mode"), j.get("size")
        if mode not in ("latency", "rate") or not isinstance(size, int):
            continue
        tool = "memif_pingpong" if j.get("layer") == "bare-dpdk" else "pingpong"
        if j.get("skipped"):
            out[(mode, size)] = {"error": "%s: %s" % (tool, j["skipped"])}
        elif mode == "latency":
            out[(mode, size)] = parse_pingpong(line)
        else:
            rate = float(j.get("msg_rate") or 0)
            if rate <= 0:
                out[(mode, size)] = {"error": "%s: no message arrived" % tool}
            else:
                out[(mode, size)] = {"msg_rate": rate,
                                     "mbytes_per_s": float(j.get("mbytes_per_s") or rate * size / 1e6)}
    if not out:
        raise ValueError("printed no result line")
    return out


_FI_ROW = re.compile(
    r"^\s*(\S+)\s+(\S+)\s+([=+-]\S+)\s+(\S+)\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$")


def parse_fi_pingpong(text):
    """The last result row of fi_pingpong's table.

    Columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec. A
    transfer is one message one way, so the round trip is two of them.
    Returns mean_ns (round trip), xfers_per_s and mbytes_per_s, and the
    printed MB/sec and Mxfers/sec as fi_mbytes_per_s and fi_mxfers_per_s.
    """
    seen_header = False
    row = None
    for line in text.splitlines():
        if "usec/xfer" in line:
            seen_header = True
            continue
        m = _FI_ROW.match(line)
        if seen_header and m:
            row = m
    if row is None:
        raise ValueError("printed no result row" if seen_header else "printed no result table")
    if not row.group(3).startswith("="):
        raise ValueError("acknowledged %s of %s messages" % (row.group(3)[1:], row.group(2)))
    usec = float(row.group(7))
    if usec <= 0:
        raise ValueError("usec/xfer is %s" % row.group(7))
    return {
        "mean_ns": 2000.0 * usec,
        "xfers_per_s": 1e6 / usec,
        "fi_mbytes_per_s": float(row.group(6)),
        "fi_mxfers_per_s": float(row.group(8)),
    }


_NOISE = re.compile(r"^(EAL:|TELEMETRY:|rte_pmd_|xdp_|libxdp:|libbpf:|\s*$)")


def reason_of(text, tool):
    """The one line of a tool's output that says why it failed."""
    lines = [l.strip() for l in text.splitlines() if not _NOISE.match(l)]
    for l in reversed(lines):
        if l.startswith(tool + ":"):
            return l
    for l in reversed(lines):
        if "error" in l.lower() or "fail" in l.lower() or "cannot" in l.lower():
            return "%s: %s" % (tool, l)
    return "%s: %s" % (tool, lines[-1]) if lines else "%s: failed with no message" % tool


# --------------------------------------------------------------- processes ---

_CHILDREN = set()  # process groups this bench started and has not reaped


def _kill(p):
    """Ends a process group this bench started: TERM, then KILL."""
    if p.poll() is not None:
        _CHILDREN.discard(p)
        return
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    _CHILDREN.discard(p)


class Outcome:
    """What one tool invocation printed, or why it did not."""

    def __init__(self, ok, out="", reason="", tool=""):
        self.ok, self.out, self.reason, self.tool = ok, out, reason, tool


VERBOSE = False


def log(msg):
    if VERBOSE:
        sys.stderr.write("\r\033[Kbench: %s\n" % msg)


def run_one(cmd, env, timeout, tool):
    """Runs `cmd` in its own process group with a timeout."""
    t0 = time.monotonic()
    res = _run_one(cmd, env, timeout, tool)
    res.tool = tool
    log("%.2f s %s: %s" % (time.monotonic() - t0, "ok" if res.ok else res.reason, " ".join(cmd)))
    return res


def _run_one(cmd, env, timeout, tool):
    with tempfile.TemporaryFile("w+") as f:
        try:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        except OSError as e:
            return Outcome(False, reason="%s: cannot start: %s" % (tool, e.strerror))
        _CHILDREN.add(p)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(p)
            for name in ("bypass-pingpong", "bypass-bare"):  # what --local leaves when killed
                for suffix in (".sock", ".sock.lock"):
                    try:
                        os.unlink("/tmp/%s-%d%s" % (name, p.pid, suffix))
                    except OSError:
                        pass
            return Outcome(False, reason="%s: no result within the %g s timeout" % (tool, timeout))
        _CHILDREN.discard(p)
        f.seek(0)
        out = f.read()
    if rc != 0:
        return Outcome(False, out, reason_of(out, tool))
    return Outcome(True, out)


def run_pair(server_cmd, client_cmd, env_s, env_c, timeout, tool, ready):
    """Starts a server, waits until `ready(pid)` says it listens, runs the client."""
    with tempfile.TemporaryFile("w+") as sf:
        try:
            s = subprocess.Popen(server_cmd, stdout=sf, stderr=subprocess.STDOUT, env=env_s,
                                 start_new_session=True)
        except OSError as e:
            return Outcome(False, reason="%s: cannot start: %s" % (tool, e.strerror))
        _CHILDREN.add(s)
        log("server: " + " ".join(server_cmd))
        try:
            deadline = time.monotonic() + min(timeout, 15.0)
            while not ready(s.pid):
                if s.poll() is not None:
                    sf.seek(0)
                    return Outcome(False, reason="server " + reason_of(sf.read(), tool))
                if time.monotonic() > deadline:
                    return Outcome(False, reason="%s: the server did not come up in %g s"
                                   % (tool, min(timeout, 15.0)))
                time.sleep(0.02)
            res = run_one(client_cmd, env_c, timeout, tool)
            try:
                s.wait(timeout=3.0)  # it ends when the client says it is done
            except subprocess.TimeoutExpired:
                pass
            if not res.ok and s.poll() is not None and s.returncode != 0:
                sf.seek(0)
                server_reason = reason_of(sf.read(), tool)
                res.reason = "%s (server: %s)" % (res.reason, server_reason)
            return res
        finally:
            _kill(s)


def tcp_listening(pid, port):
    """True if process `pid`'s network namespace has a TCP listener on `port`."""
    want = ":%04X" % port
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                for line in f.readlines()[1:]:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(want) and parts[3] == "0A":
                        return True
        except OSError:
            return False
    return False


def xdp_attached(netns, ifname):
    """True once a program sits on `ifname`'s XDP hook (the af_xdp server is up)."""
    try:
        r = subprocess.run(["ip", "-n", netns, "-d", "link", "show", "dev", ifname],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0 and re.search(r"\bxdp(generic|drv|offload)?\b.*\bid \d+|prog/xdp", r.stdout) is not None


# ------------------------------------------------------------------ hosts ---

class Veth:
    """Two network namespaces joined by three veth pairs, removed by close().

    The data pair carries af_xdp at `xdp_mtu` (3502 by default: af_xdp's
    buffers are a page each and Debian's DPDK 22.11 af_xdp has no
    multi-buffer frames, and XDP on veth refuses an MTU above about 3.5 KB). The kernel pair carries what goes through the kernel: the
    kernel's TCP for libfabric's tcp and bypass's default domain (kernel
    UDP, whose address is that of the default route's interface: this one),
    with jumbo frames (`mtu`, as a cluster's fabric would have them). The
    control pair carries the TCP address exchange of the fi tools
    (fi_pingpong's, pingpong --layer=fi's), since af_xdp takes every frame
    of the interface it binds.
    """

    def __init__(self, mtu=9000, xdp_mtu=XDP_MTU):
        tag = "bnch%d_" % (os.getpid() % 10000)
        self.ns = (tag + "a", tag + "b")
        self.ifs = (tag + "0", tag + "1")
        self.ctrl_ifs = (tag + "c0", tag + "c1")
        net = os.getpid() % 200 + 1
        self.ips = ("10.203.%d.1" % net, "10.203.%d.2" % net)
        self.ctrl_ips = ("10.204.%d.1" % net, "10.204.%d.2" % net)
        self.kern_ifs = (tag + "k0", tag + "k1")
        self.kern_ips = ("10.206.%d.1" % net, "10.206.%d.2" % net)
        self.mtu = mtu
        self.xdp_mtu = xdp_mtu
        self.macs = ("", "")
        self.up = False

    def xdp_uri(self, i):
        """The af_xdp device of namespace i (0: a, 1: b), at the pair's MTU."""
        return "dpdk:net_af_xdp_bench%s,iface=%s,mtu=%d" % ("ab"[i], self.ifs[i], self.xdp_mtu)

    def _ip(self, *args):
        try:
            r = subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            raise RuntimeError("'ip %s' did not finish in 20 s" % " ".join(args))
        if r.returncode != 0:
            raise RuntimeError("'ip %s' failed: %s" % (" ".join(args), r.stderr.strip()))
        return r.stdout

    def create(self):
        self.close()
        self.up = True
        a, b = self.ns
        self._ip("netns", "add", a)
        self._ip("netns", "add", b)
        for ends in (self.ifs, self.ctrl_ifs, self.kern_ifs):
            self._ip("link", "add", ends[0], "netns", a, "type", "veth", "peer", "name",
                     ends[1], "netns", b)
        for i, ns in enumerate(self.ns):
            for knob in ("all", "default"):  # no IPv6 neighbour discovery on the wire
                self._ip("netns", "exec", ns, "sh", "-c",
                         "echo 1 > /proc/sys/net/ipv6/conf/%s/disable_ipv6" % knob)
            self._ip("-n", ns, "link", "set", "dev", self.kern_ifs[i], "mtu", str(self.mtu))
            self._ip("-n", ns, "link", "set", "dev", self.ifs[i], "mtu", str(self.xdp_mtu))
            for ifname, ip in ((self.ifs[i], self.ips[i]), (self.ctrl_ifs[i], self.ctrl_ips[i]),
                               (self.kern_ifs[i], self.kern_ips[i])):
                self._ip("-n", ns, "addr", "add", ip + "/24", "dev", ifname)
                self._ip("-n", ns, "link", "set", ifname, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            # bypass's default domain binds the default route's address.
            self._ip("-n", ns, "route", "add", "default", "dev", self.kern_ifs[i])
        macs = []
        for ns, ifname in zip(self.ns, self.ifs):
            m = re.search(r"link/ether ([0-9a-f:]{17})", self._ip("-n", ns, "link", "show", ifname))
            if not m:
                raise RuntimeError("no MAC address on %s" % ifname)
            macs.append(m.group(1))
        self.macs = tuple(macs)

    def close(self):
        for ns in self.ns:
            try:
                subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=20)
            except subprocess.TimeoutExpired:
                sys.stderr.write("bench: 'ip netns del %s' did not finish in 20 s; remove it by hand\n" % ns)
        self.up = False


# ---------------------------------------------------------------- columns ---

class Column:
    """One thing measured: a tool, a layer and, for fi, a provider."""

    def __init__(self, key, label, tool, layer=None, provider=None, device=None):
        self.key, self.label, self.tool = key, label, tool
        self.layer, self.provider = layer, provider
        self.device = device  # "default": bypass's default domain (FI_BYPASS_DEVICES unset)
        self.unavailable = None  # the reason it cannot run at all


# The native pingpong reaches libfabric's shm and tcp through the same
# fi layer as bypass's provider (so p50s compare like for like); Debian's
# fi_pingpong runs bypass's provider and libfabric's own as a second opinion.
LOCAL_COLUMNS = [
    Column("bare", "bare DPDK memif", "bare"),
    Column("raw", "bypass raw", "pingpong", "raw"),
    Column("rdm", "bypass rdm", "pingpong", "rdm"),
    Column("fi", "bypass fi", "pingpong", "fi", "bypass"),
    Column("fi_host", "bypass fi default (shm)", "pingpong", "fi", "bypass", "default"),
    Column("shm", "libfabric shm", "pingpong", "fi", "shm"),
    Column("tcp", "libfabric tcp", "pingpong", "fi", "tcp"),
    Column("fi_pingpong", "fi_pingpong bypass", "fi_pingpong", None, "bypass"),
    Column("shm_fi_pingpong", "fi_pingpong shm", "fi_pingpong", None, "shm"),
    Column("tcp_fi_pingpong", "fi_pingpong tcp", "fi_pingpong", None, "tcp"),
]

NETNS_COLUMNS = [
    Column("raw", "bypass raw af_xdp", "pingpong", "raw"),
    Column("rdm", "bypass rdm af_xdp", "pingpong", "rdm"),
    Column("fi", "bypass fi af_xdp", "pingpong", "fi", "bypass"),
    Column("fi_udp", "bypass fi default (kernel UDP)", "pingpong", "fi", "bypass", "default"),
    Column("tcp", "libfabric tcp (kernel)", "pingpong", "fi", "tcp"),
    Column("fi_pingpong", "fi_pingpong bypass af_xdp", "fi_pingpong", None, "bypass"),
    Column("tcp_fi_pingpong", "fi_pingpong tcp (kernel)", "fi_pingpong", None, "tcp"),
]
COLUMN_KEYS = ["bare", "raw", "rdm", "fi", "fi_host", "fi_udp", "shm", "tcp", "fi_pingpong",
               "shm_fi_pingpong", "tcp_fi_pingpong"]


class Cell:
    """The samples of one column at one size, for one metric."""

    def __init__(self):
        self.samples = []   # dicts from the parsers
        self.error = None   # the latest one-line failure
        self.failures = 0
        self.dead = False   # failed twice alike: not tried again

    def skip(self, reason):
        """The tool cannot carry this size: it says why, and is not asked again."""
        self.error, self.dead = reason, True

    def record_failure(self, reason):
        # Alike up to numbers (process ids, ports in device names).
        same = self.error is not None and re.sub(r"\d+", "#", self.error) == re.sub(r"\d+", "#", reason)
        self.dead = self.dead or same
        self.error = reason
        self.failures += 1


def median_of(samples, key):
    vals = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(vals) if vals else None


# ---------------------------------------------------------------- the run ---

class Bench:
    """Runs the columns of each section in alternating repetitions and keeps the samples."""

    def __init__(self, args, tools):
        self.a = args
        self.tools = tools
        self.port = 20000 + (os.getpid() * 7) % 20000
        self.progress_on = args.progress
        self.step = 0
        self.total = 0
        self.t0 = time.monotonic()
        self.fi_dir = None      # a directory with libbypass-fi.so alone, for FI_PROVIDER_PATH
        self.providers = set()  # what fi_info -l lists
        self.fi_lib_sanitized = False  # libbypass-fi.so needs a sanitizer runtime
        self.veth = None

    # ---- progress: one line on stderr, rewritten in place
    def progress(self, what):
        if not self.progress_on:
            return
        self.step += 1
        elapsed = time.monotonic() - self.t0
        eta = ""
        if self.step > 3 and self.total:
            eta = "  about %ds left" % max(0, elapsed / self.step * (self.total - self.step))
        line = "[%d/%d] %s%s" % (self.step, self.total, what, eta)
        sys.stderr.write("\r\033[K" + line[:150])
        sys.stderr.flush()

    def progress_done(self):
        if self.progress_on:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def next_port(self):
        self.port = 20000 + (self.port - 20000 + 1) % 20000
        return self.port

    # ---- environment of each kind of process
    def env(self, col, device_list=None, tcp_iface=None):
        e = dict(os.environ)
        if col.provider == "bypass" and self.fi_dir:
            e["FI_PROVIDER_PATH"] = self.fi_dir
        if device_list:
            e["FI_BYPASS_DEVICES"] = device_list
        elif col.provider == "bypass":
            e.pop("FI_BYPASS_DEVICES", None)  # the default domain
        if tcp_iface:
            e["FI_TCP_IFACE"] = tcp_iface
        return e

    # ---- iteration counts: about `seconds` of measuring per run
    def lat_iters(self, cell, col, size):
        est = median_of(cell.samples, "mean_ns")
        if est is None:  # a first guess, on the slow side: the next repetitions know better
            base = 150e3 if col.provider == "tcp" else 20e3
            est = base + size * 1.5
        n = int(self.a.seconds * 1e9 / est)
        return max(self.a.min_iters, min(n, 1000000))

    # ---- one run of one column: every size given, latency and windowed rate
    def measure(self, col, sizes, modes, where):
        """Runs col's tool once over `sizes` in `modes`; (Outcome, parser)."""
        size_arg = "--sizes=" + ",".join(str(x) for x in sizes)
        run_args = ["--json", "--mode=" + ",".join(modes),
                    "--duration_ms=%d" % max(10, round(self.a.seconds * 1000)),
                    "--warmup=%d" % self.a.warmup]
        # --timeout, plus the measuring: each size and mode for --seconds
        # after a warm-up (a latency warm-up: a quarter of that, at least 50 ms).
        t = self.a.timeout + len(sizes) * len(modes) * (1.5 * self.a.seconds + 0.05)
        if col.tool == "bare":
            cmd = [self.tools["bare"], "--local", size_arg] + run_args
            return run_one(cmd, self.env(col), t, "memif_pingpong"), parse_runs
        common = ["--layer=" + col.layer, size_arg, "--window=%d" % self.a.window]
        if self.a.more:
            common.append("--more")
        if col.provider:
            common.append("--provider=" + col.provider)
        if where["name"] == "local":
            if col.device:
                common.append("--device=" + col.device)
            cmd = [self.tools["pingpong"], "--local"] + common + run_args
            return run_one(cmd, self.env(col), t, "pingpong"), parse_runs
        return self.netns_pair(col, self.tools["pingpong"], common, run_args, "pingpong",
                               timeout=t), parse_runs

    def netns_pair(self, col, binary, common, client_only, tool, timeout=None):
        """A server in namespace b and a client in a: af_xdp for bypass, the kernel for tcp."""
        v = self.veth
        uris = (v.xdp_uri(0), v.xdp_uri(1))
        ns_a = ["ip", "netns", "exec", v.ns[0], binary]
        ns_b = ["ip", "netns", "exec", v.ns[1], binary]
        if col.layer == "fi":
            port = self.next_port()
            server = ns_b + ["--server", "--oob_port=%d" % port] + common
            if col.provider == "bypass":  # the address exchange on the control pair
                client = ns_a + ["--connect=%s:%d" % (v.ctrl_ips[1], port)] + common
                if col.device == "default":  # no configuration: the kernel UDP device
                    server.append("--device=default")
                    client.append("--device=default")
                    env_s = env_c = self.env(col)
                else:
                    server.append("--device=" + uris[1])
                    client.append("--device=" + uris[0])
                    env_s, env_c = self.env(col, uris[1]), self.env(col, uris[0])
            else:  # libfabric's tcp through the kernel on the kernel pair
                server.append("--fi_node=" + v.kern_ips[1])
                client = ns_a + ["--connect=%s:%d" % (v.kern_ips[1], port),
                                 "--fi_node=" + v.kern_ips[0]] + common
                env_s = self.env(col, tcp_iface=v.kern_ifs[1])
                env_c = self.env(col, tcp_iface=v.kern_ifs[0])
            return run_pair(server, client + client_only, env_s, env_c,
                            timeout or self.a.timeout, tool, lambda pid: tcp_listening(pid, port))
        server = ns_b + ["--server", "--device=" + uris[1], "--ip=" + v.ips[1]] + common
        client = ns_a + ["--device=" + uris[0], "--ip=" + v.ips[0],
                         "--connect=%s/%s" % (v.macs[1], v.ips[1])] + common + client_only
        return run_pair(server, client, self.env(col), self.env(col), timeout or self.a.timeout,
                        tool, lambda pid: xdp_attached(v.ns[1], v.ifs[1]))

    def fi_pingpong(self, col, size, iters, where):
        port = self.next_port()
        base = [self.tools["fi_pingpong"], "-p", col.provider, "-e", "rdm",
                "-I", str(iters), "-S", str(size)]
        if where["name"] == "local":
            # bypass with no configuration: its default domain (shared memory here)
            server, client = base + ["-B", str(port)], base + ["-P", str(port), "127.0.0.1"]
            env_s = env_c = self.env(col)
        else:
            v = self.veth
            server = ["ip", "netns", "exec", v.ns[1]] + base + ["-B", str(port)]
            # bypass: fi_pingpong's control connection on the control pair
            ctrl = v.ctrl_ips[1] if col.provider == "bypass" else v.kern_ips[1]
            client = ["ip", "netns", "exec", v.ns[0]] + base + ["-P", str(port), ctrl]
            if col.provider == "bypass":
                env_s = self.env(col, v.xdp_uri(1))
                env_c = self.env(col, v.xdp_uri(0))
            else:
                env_s = self.env(col, tcp_iface=v.kern_ifs[1])
                env_c = self.env(col, tcp_iface=v.kern_ifs[0])
        return run_pair(server, client, env_s, env_c, self.a.timeout, "fi_pingpong",
                        lambda pid: tcp_listening(pid, port))

    # ---- sections
    def new_section(self, name, columns, baseline, reference):
        cells = {"lat": {}, "rate": {}}
        for c in columns:
            for s in self.a.sizes:
                cells["lat"][(c.key, s)] = Cell()
                cells["rate"][(c.key, s)] = Cell()
        return {"name": name, "columns": columns, "baseline": baseline,
                "reference": reference, "cells": cells, "skipped": None}

    def check_columns(self, section):
        for c in section["columns"]:
            c.unavailable = None
            if c.provider == "bypass" and not self.fi_dir:
                c.unavailable = FI_LIB_MISSING
            elif c.tool == "fi_pingpong" and c.provider == "bypass" and self.fi_lib_sanitized:
                c.unavailable = ("n/a (libbypass-fi.so is sanitizer-built: Debian's fi_pingpong "
                                 "cannot load it)")
            elif c.tool == "fi_pingpong" and not self.tools.get("fi_pingpong"):
                c.unavailable = "n/a (fi_pingpong is missing: tools/setup.sh installs libfabric-bin)"
            elif c.provider and c.provider != "bypass" and c.provider not in self.providers:
                c.unavailable = "n/a (libfabric here has no %s provider: fi_info -l)" % c.provider
            elif c.key in self.a.skip:
                c.unavailable = "n/a (left out with --skip)"

    def plan_count(self, sections):
        n = 0
        for sec in sections:
            for c in sec["columns"]:
                if not c.unavailable:
                    n += len(self.a.sizes) if c.tool == "fi_pingpong" else 1
        return n * self.a.reps

    @staticmethod
    def take(outcome_and_parse):
        """(what the parser made of a run's output, None) or (None, why it failed)."""
        outcome, parse = outcome_and_parse
        if outcome.ok and parse is not None:
            try:
                return parse(outcome.out), None
            except (ValueError, KeyError, TypeError) as e:
                return None, "%s output not understood: %s" % (outcome.tool, e)
        return None, outcome.reason

    def run_rep(self, sec, rep):
        for col in [c for c in sec["columns"] if not c.unavailable]:
            if col.tool == "fi_pingpong":
                self.run_fi_pingpong(sec, col, rep)
            else:
                self.run_column(sec, col, rep)

    def run_fi_pingpong(self, sec, col, rep):
        """Debian's fi_pingpong: one run per size (its transfer rate comes from these)."""
        for size in self.a.sizes:
            cell = sec["cells"]["lat"][(col.key, size)]
            if cell.dead:
                continue
            self.progress("rep %d/%d %s %s %s" % (rep + 1, self.a.reps, sec["name"], col.label,
                                                   size_str(size)))
            for _ in range(2):  # once more at once: a failed run is tried again
                iters = self.lat_iters(cell, col, size)
                got, err = self.take((self.fi_pingpong(col, size, iters, sec), parse_fi_pingpong))
                if got is not None:
                    cell.samples.append(got)
                    break
                cell.record_failure(err)
                if cell.dead:
                    break

    def run_column(self, sec, col, rep):
        """One run of every size in both modes. A failed run is split by size,
        and a size that fails alone is tried once more at once, so that one
        size cannot sink the others."""
        cells = sec["cells"]

        def cell(mode, size):
            return cells["lat" if mode == "latency" else "rate"][(col.key, size)]

        def alive(size):
            return [m for m in ("latency", "rate") if not cell(m, size).dead]

        todo = [s for s in self.a.sizes if alive(s)]
        groups = [(todo, False)] if todo else []  # (sizes, tried once already)
        while groups:
            group, retried = groups.pop(0)
            modes = sorted({m for s in group for m in alive(s)})
            if not modes:
                continue
            self.progress("rep %d/%d %s %s %s" % (rep + 1, self.a.reps, sec["name"], col.label,
                                                   ", ".join(size_str(s) for s in group)))
            got, err = self.take(self.measure(col, group, modes, sec))
            if got is None and len(group) > 1:
                groups = [([s], False) for s in group] + groups
                continue
            if got is None:
                for m in modes:
                    cell(m, group[0]).record_failure(err)
                if not retried and alive(group[0]):
                    groups.insert(0, (group, True))
                continue
            for s in group:
                for m in modes:
                    fig = got.get((m, s))
                    if fig is None:
                        cell(m, s).record_failure("%s printed no %s result for %s"
                                                  % (col.tool, m, size_str(s)))
                    elif "error" in fig:
                        cell(m, s).skip(fig["error"])
                    else:
                        cell(m, s).samples.append(fig)


def size_str(n):
    if n >= MIB and n % MIB == 0:
        return "%d MiB" % (n // MIB)
    if n >= KIB and n % KIB == 0:
        return "%d KiB" % (n // KIB)
    return "%d B" % n


def time_str(ns):
    if ns is None:
        return "-"
    if ns >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    return "%.2f us" % (ns / 1e3)


def ratio_str(r):
    if r is None:
        return "-"
    return "%.2fx" % r if r >= 0.1 else sig3(r) + "x"


# ---------------------------------------------------------------- results ---

def summarize(sec, sizes):
    """Medians and ratios of a section, as plain data (the JSON's rows)."""
    cols = sec["columns"]
    rows = []
    med = {}
    for c in cols:
        for s in sizes:
            lat = sec["cells"]["lat"][(c.key, s)]
            rate = sec["cells"]["rate"][(c.key, s)]
            m = {
                "p50_ns": median_of(lat.samples, "p50_ns"),
                "p99_ns": median_of(lat.samples, "p99_ns"),
                "mean_ns": median_of(lat.samples, "mean_ns"),
                "lat_reps": len(lat.samples),
                "msg_rate": median_of(rate.samples, "msg_rate"),
                "mbytes_per_s": median_of(rate.samples, "mbytes_per_s"),
                "rate_reps": len(rate.samples),
            }
            if c.tool == "fi_pingpong":
                m["fi_mbytes_per_s"] = median_of(lat.samples, "fi_mbytes_per_s")
                m["fi_mxfers_per_s"] = median_of(lat.samples, "fi_mxfers_per_s")
            # Transfers per second of the ping-pong (one message one way each),
            # as fi_pingpong counts them: comparable across all columns.
            m["pp_xfers_per_s"] = 2e9 / m["mean_ns"] if m["mean_ns"] else None
            m["pp_mbytes_per_s"] = m["pp_xfers_per_s"] * s / 1e6 if m["pp_xfers_per_s"] else None
            med[(c.key, s)] = m

    def lat_ratio(a, b):
        if a["p50_ns"] and b["p50_ns"]:
            return a["p50_ns"] / b["p50_ns"]
        if a["mean_ns"] and b["mean_ns"]:
            return a["mean_ns"] / b["mean_ns"]
        return None

    def cost(a, b, key):  # rates: cost relative to b, so 2.00x is half b's rate
        return b[key] / a[key] if a.get(key) and b.get(key) else None

    for s in sizes:
        for c in cols:
            m = med[(c.key, s)]
            lat_cell = sec["cells"]["lat"][(c.key, s)]
            rate_cell = sec["cells"]["rate"][(c.key, s)]
            row = {"column": c.key, "label": c.label, "size": s}
            row.update({k: v for k, v in m.items()})
            row["lat_failures"], row["rate_failures"] = lat_cell.failures, rate_cell.failures
            row["last_failure"] = lat_cell.error or rate_cell.error  # even where others succeeded
            row["latency_error"] = None if lat_cell.samples else (c.unavailable or lat_cell.error or "not run")
            if c.tool == "fi_pingpong":
                row["rate_error"] = FI_PP_NO_WINDOW
            else:
                row["rate_error"] = None if rate_cell.samples else (c.unavailable or rate_cell.error or "not run")
            base = med.get((sec["baseline"], s)) if sec["baseline"] else None
            ref = med.get((sec["reference"], s)) if sec["reference"] else None
            if base:
                row["latency_vs_" + sec["baseline"]] = lat_ratio(m, base)
                row["rate_vs_" + sec["baseline"]] = cost(m, base, "msg_rate")
            if ref:
                row["latency_vs_" + sec["reference"]] = lat_ratio(m, ref)
                row["rate_vs_" + sec["reference"]] = cost(m, ref, "msg_rate")
                row["pp_rate_vs_" + sec["reference"]] = cost(m, ref, "pp_xfers_per_s")
            rows.append(row)
    return rows


def sig3(v):
    """Three significant digits, without exponents."""
    if v == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return "%.*f" % (digits, v)


def fmt_rate(v):
    return "-" if v is None else sig3(v / 1e6)


def fmt_mbs(v):
    return "-" if v is None else ("%.0f" % v if v >= 100 else "%.1f" % v)


def short(reason, width):
    reason = reason or ""
    return reason if len(reason) <= width else reason[:width - 3] + "..."


def render(sec, rows, reps, markdown, more=True):
    """The section's two tables as text lines (or Markdown)."""
    out = []
    b, r = sec["baseline"], sec["reference"]
    lat_head = ["size", "column", "p50", "mean", "p99"] + (["x " + b] if b else []) + \
        (["x " + r] if r else []) + ["note"]
    rate_head = ["size", "column", "windowed Mmsg/s", "MB/s"] + (["x " + b] if b else []) + \
        (["x " + r] if r else []) + ["ping-pong Mxfer/s", "MB/s"] + (["x " + r] if r else []) + ["note"]

    def table(title, head, body):
        out.append(title)
        out.append("")
        if markdown:
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "|".join("---" for _ in head) + "|")
            for line in body:
                out.append("| " + " | ".join(x.replace("|", "/") for x in line) + " |")
            out.append("")
            return
        widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(head)]
        widths[-1] = 0  # the note trails the row

        def fmt(cells):
            return "  ".join((x.ljust(w) if i < 2 or i == len(cells) - 1 else x.rjust(w))
                             for i, (x, w) in enumerate(zip(cells, widths))).rstrip()
        out.append(fmt(head))
        for line in body:
            out.append(fmt(line))
        out.append("")

    lat_body, rate_body = [], []
    last = None
    for row in rows:
        size = size_str(row["size"]) if row["size"] != last else ""
        last = row["size"]
        lat = [size, row["label"]]
        if row["latency_error"]:
            lat += ["n/a"] * (len(lat_head) - 3) + [short(row["latency_error"], 110)]
        else:
            lat += [time_str(row["p50_ns"]), time_str(row["mean_ns"]), time_str(row["p99_ns"])]
            if b:
                lat.append(ratio_str(row.get("latency_vs_" + b)))
            if r:
                lat.append(ratio_str(row.get("latency_vs_" + r)))
            lat.append("" if not row["lat_failures"] else short(
                "%d failed run%s, e.g. %s" % (row["lat_failures"], "" if row["lat_failures"] == 1 else "s",
                                              row["last_failure"]), 110))
        lat_body.append(lat)

        rate = [size, row["label"]]
        note = ""
        fi_pp = row["rate_error"] == FI_PP_NO_WINDOW
        if row["rate_error"]:
            rate += ["-", "-"] if fi_pp else ["n/a", "n/a"]
            if not fi_pp:
                note = row["rate_error"]
        else:
            rate += [fmt_rate(row["msg_rate"]), fmt_mbs(row["mbytes_per_s"])]
        if b:
            rate.append(ratio_str(row.get("rate_vs_" + b)))
        if r:
            rate.append(ratio_str(row.get("rate_vs_" + r)))
        if row["pp_xfers_per_s"]:
            rate += [fmt_rate(row["pp_xfers_per_s"]), fmt_mbs(row["pp_mbytes_per_s"])]
        else:
            rate += ["n/a", "n/a"]
            note = note or row["latency_error"] or ""
        if r:
            rate.append(ratio_str(row.get("pp_rate_vs_" + r)))
        rate.append(short(note, 110))
        rate_body.append(rate)

    note_b = ("x %s: cost relative to %s in the same run (latency: ours / theirs, on p50s, "
              "on means where a side has no p50; rates: theirs / ours); 1.00x is equal, "
              "above 1 is slower." % (b, b)) if b else ""
    note_r = ("x %s: the same against libfabric %s through the same fi layer (on means where "
              "fi_pingpong, which reports a mean only, is a side)." % (r, r)) if r else ""
    if r and not b:
        note_r = ("x %s: cost relative to libfabric %s in the same run (latency: ours / theirs, on "
                  "p50s, on means where fi_pingpong, which reports a mean only, is a side; rates: "
                  "theirs / ours); 1.00x is equal, above 1 is slower." % (r, r))
    lead = "" if markdown else "  "
    notes = [n for n in (note_b, note_r) if n]
    table("Round trip: medians of %d alternating repetition%s.\n%s"
          % (reps, "" if reps == 1 else "s", "\n".join(lead + n for n in notes)), lat_head, lat_body)
    table("Message rate and bandwidth, medians.\n" + lead +
          "windowed: pingpong --mode=rate, --window messages outstanding, " +
          ("all but a window's last send with FI_MORE (--more)" if more else "every send alone") +
          " (raw and bare DPDK: bursts of 32 frames); ping-pong: one message in flight, "
          "a transfer is one message one way (as fi_pingpong counts them).", rate_head, rate_body)
    return out


# One colour per provider family; fi_pingpong's columns dashed in their provider's colour.
PLOT_STYLE = {"bare": ("#000000", 1), "raw": ("#9400d3", 2), "rdm": ("#009e73", 4),
              "fi": ("#0072b2", 6), "fi_pingpong": ("#0072b2", 6 * 100),
              "shm": ("#e69f00", 8), "shm_fi_pingpong": ("#e69f00", 8 * 100),
              "tcp": ("#d62728", 10), "tcp_fi_pingpong": ("#d62728", 10 * 100)}


def gnuplot_png(path, sections):
    """Latency against size, one line per column, one panel per section."""
    gp = shutil.which("gnuplot")
    if not gp:
        return "no plot: gnuplot is missing (apt-get install gnuplot-nox, or tools/setup.sh)"
    live = [(sec, rows) for sec, rows in sections if not sec["skipped"]]
    if not live:
        return "no plot: nothing was measured"
    tmp = tempfile.mkdtemp(prefix="bench-plot-")
    try:
        script = ["set terminal pngcairo size %d,600 noenhanced font ',10'" % (900 * len(live)),
                  "set output '%s'" % path.replace("'", "''"),
                  "set logscale xy", "set grid", "set key top left",
                  "set xlabel 'message size (bytes)'",
                  "set ylabel 'round trip (us): p50, fi_pingpong its mean'",
                  "set multiplot layout 1,%d" % len(live)]
        for i, (sec, rows) in enumerate(live):
            plots = []
            for c in sec["columns"]:
                pts = [(row["size"], (row["p50_ns"] or row["mean_ns"]) / 1e3) for row in rows
                       if row["column"] == c.key and (row["p50_ns"] or row["mean_ns"])]
                if not pts:
                    continue
                f = os.path.join(tmp, "%d-%s.dat" % (i, c.key))
                with open(f, "w") as fh:
                    for x, y in pts:
                        fh.write("%d %.4f\n" % (x, y))
                color, pt = PLOT_STYLE.get(c.key, ("#7f7f7f", 100))
                dashed = pt >= 100
                plots.append("'%s' using 1:2 with linespoints lw 2 lc rgb '%s' pt %d dt %d title '%s'"
                             % (f, color, pt // 100 if dashed else pt, 2 if dashed else 1, c.label))
            script.append("set title '%s'" % sec["title"].replace("'", ""))
            if plots:
                script.append("plot " + ", ".join(plots))
        script.append("unset multiplot")
        r = subprocess.run([gp], input="\n".join(script) + "\n", text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        if r.returncode != 0:
            return "no plot: gnuplot failed: %s" % (r.stderr.strip().splitlines() or ["?"])[-1]
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    os_name = platform.system()
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(), "os": os_name,
            "loadavg_1min_before": None, "loadavg_1min_after": None}


def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# ------------------------------------------------------------------ tools ---

def runfiles_roots():
    roots = []
    for k in ("RUNFILES_DIR", "TEST_SRCDIR"):
        if os.environ.get(k):
            roots.append(os.environ[k])
    here = os.path.abspath(__file__)
    while here != "/":
        here = os.path.dirname(here)
        if here.endswith(".runfiles"):
            roots.append(here)
            break
    roots.append(os.path.join(os.path.abspath(sys.argv[0]) + ".runfiles"))
    return roots


def find_tool(rel):
    for root in runfiles_roots():
        p = os.path.join(root, "bypass", rel)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


FI_LIB_USED = None  # the libbypass-fi.so this run loads, for the report


def sanitizer_built(lib):
    """Whether lib needs a sanitizer runtime (--config=asan/tsan): a program
    that is not instrumented, such as Debian's fi_pingpong, cannot load it."""
    nm = shutil.which("nm")
    if not lib or not nm:
        return False
    try:
        r = subprocess.run([nm, "-D", "--undefined-only", lib], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return any(w in r.stdout for w in ("__asan_init", "__tsan_init", "__tsan_func_entry"))


def find_fi_lib(explicit):
    """A directory holding only libbypass-fi.so (for FI_PROVIDER_PATH), or None."""
    global FI_LIB_USED
    cands = [explicit] if explicit else []
    ws = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if ws:
        cands.append(os.path.join(ws, "bazel-bin/fabric/fi/libbypass-fi.so"))
    for root in runfiles_roots():
        cands.append(os.path.join(root, "bypass/fabric/fi/libbypass-fi.so"))
    for c in cands:
        if c and os.path.isfile(c):
            d = tempfile.mkdtemp(prefix="bench-fi-")
            FI_LIB_USED = os.path.realpath(c)
            os.symlink(FI_LIB_USED, os.path.join(d, "libbypass-fi.so"))
            return d
    if explicit:
        fail("--fi_lib=%s does not exist: build %s or leave the flag out" % (explicit, FI_LIB_TARGET))
    return None


def fi_providers():
    """libfabric's own providers (bypass's is found by find_fi_lib): fi_info
    lists them without loading ours, which it may not be able to (a
    sanitizer-built libbypass-fi.so)."""
    exe = shutil.which("fi_info")
    if not exe:
        return set()
    env = dict(os.environ)
    env.pop("FI_PROVIDER_PATH", None)
    try:
        r = subprocess.run([exe, "-l"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, env=env, timeout=20)
    except subprocess.TimeoutExpired:
        return set()
    return {l[:-1].strip() for l in r.stdout.splitlines() if l.endswith(":") and not l.startswith(" ")}


# ---------------------------------------------------------------- selftest ---

def selftest_parsers():
    """The parsers against the shapes the tools print; exits on a mismatch."""
    nested = ('{"layer":"raw","device":"memif:/tmp/x","mode":"latency","size":64,"iters":20000,'
              '"rtt_ns":{"p50":1477,"p90":1644,"p99":1910,"p999":24058,"max":116342},'
              '"msgs_per_sec":645432,"resent":0}')
    flat = ('{"tool":"pingpong","layer":"fi","provider":"shm","device":"d","size":8,"iters":5,'
            '"p50_ns":900,"p90_ns":1000,"p99_ns":1500,"p999_ns":2000,"max_ns":3000,'
            '"mean_ns":950.5,"msg_rate":1052000}')
    runs = ("EAL: noise\n"
            '{"tool":"pingpong","layer":"raw","mode":"latency","size":64,"iters":9,"p50_ns":900,'
            '"p99_ns":1500,"mean_ns":950.5,"msg_rate":1052000}\n'
            '{"tool":"pingpong","layer":"raw","mode":"latency","size":4096,"iters":0,"p50_ns":null,'
            '"mean_ns":null,"msg_rate":0,"skipped":"too big"}\n'
            '{"tool":"pingpong","layer":"raw","mode":"rate","size":64,"iters":1000,"p50_ns":null,'
            '"window":32,"seconds":0.5,"mbytes_per_s":0.128,"received":1000,"sent":1000,"msg_rate":2000}\n'
            '{"tool":"pingpong","layer":"bare-dpdk","mode":"rate","size":4096,"iters":0,"msg_rate":0,'
            '"skipped":"one mbuf"}\n')
    fipp = ("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
            "64      1k      =1k      125k        0.13s      0.98      65.19       0.02\n")
    checks = [
        (parse_pingpong("EAL: noise\n" + nested)["p50_ns"], 1477.0),
        (round(parse_pingpong(nested)["mean_ns"], 3), round(1e9 / 645432, 3)),
        (parse_pingpong(flat)["mean_ns"], 950.5),
        (parse_pingpong(flat)["p99_ns"], 1500.0),
        (parse_runs(runs)[("latency", 64)]["mean_ns"], 950.5),
        (parse_runs(runs)[("latency", 4096)], {"error": "pingpong: too big"}),
        (parse_runs(runs)[("rate", 64)]["msg_rate"], 2000.0),
        (parse_runs(runs)[("rate", 4096)], {"error": "memif_pingpong: one mbuf"}),
        (round(parse_fi_pingpong(fipp)["mean_ns"], 3), 130380.0),
        (parse_fi_pingpong(fipp)["fi_mxfers_per_s"], 0.02),
        (reason_of("EAL: x\npingpong: --size=9000 does not fit\nEAL: y\n", "pingpong"),
         "pingpong: --size=9000 does not fit"),
    ]
    def row(key, rate, err=None):
        return {"column": key, "label": key, "size": RATE_SIZE, "msg_rate": rate, "rate_error": err}
    rt, _ = rate_table([row("bare", 8e6), row("raw", 6e6), row("rdm", 2e6), row("fi", 1.2e6),
                        row("shm", 1e6), row("tcp", 1e5), row("fi_host", None, "not run")],
                       [RATE_SIZE])
    checks += [
        ([r["column"] for r in rt["rows"]], ["bare", "raw", "rdm", "fi", "fi_host", "shm"]),
        ([(g["ours"], g["ratio"], g["met"]) for g in rt["goals"]],
         [("rdm", 0.25, False), ("fi", 1.2, True)]),
        (rt["rows"][4]["msg_rate"], None),
        (rate_table([row("bare", 8e6)], [8])[1],
         "skipped: the rate table is at 64 B; add 64 to --sizes"),
    ]
    for got, want in checks:
        if got != want:
            fail("selftest: a parser gave %r where %r was expected" % (got, want))
    for bad, parser in (("no json here", parse_pingpong), ("EAL: no result\n", parse_runs),
                        (fipp.replace("=1k", "+10"), parse_fi_pingpong)):
        try:
            parser(bad)
        except ValueError:
            continue
        fail("selftest: a parser accepted %r" % bad)


# ------------------------------------------------------------------- main ---

class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fail("%s (see --help)" % message)


def parse_args(argv):
    p = OneLineParser(prog="bench", description=__doc__.split("\n\n")[1],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer sizes, iterations and repetitions (< 2 min)")
    p.add_argument("--selftest", action="store_true",
                   help="check the parsers, then a tiny run for CI (2 sizes, 2 repetitions)")
    p.add_argument("--reps", type=int, help="alternating repetitions (default 5, --quick 3, --selftest 2)")
    p.add_argument("--sizes", help="comma-separated message sizes in bytes "
                   "(default 8,64,512,4096,65536,1048576,4194304; --quick 64,65536; --selftest 64,4096)")
    p.add_argument("--seconds", type=float, help="measuring time per size and mode, and per "
                   "fi_pingpong run (default 0.5, --quick 0.1)")
    p.add_argument("--min_iters", type=int, help="fewest round trips per fi_pingpong run (default 100)")
    p.add_argument("--warmup", type=int, default=1000,
                   help="warm-up messages per size and mode, at most a quarter of --seconds "
                   "(default 1000)")
    p.add_argument("--window", type=int, default=32,
                   help="messages in flight for the windowed rate (default 32)")
    p.add_argument("--no_more", action="store_false", dest="more",
                   help="windowed rate: post every send alone (by default every send of a window "
                   "but its last goes with FI_MORE, rdm's kSendMore, as bare DPDK and raw send "
                   "bursts of 32 frames; pingpong --more)")
    p.add_argument("--timeout", type=float, help="seconds per tool invocation (default 60, --quick 20)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="write the results as JSON to FILE (or stdout: then the tables go to stderr)")
    p.add_argument("--plot", metavar="FILE", help="the PNG to write (default bench_latency.png; "
                   "--plot= for none)")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--no_netns", action="store_true", help="skip the two-namespace table")
    p.add_argument("--veth_mtu", type=int, default=9000,
                   help="MTU of the namespaces' kernel pair (bypass's kernel UDP, libfabric tcp); "
                        "af_xdp's pair has --xdp_mtu")
    p.add_argument("--xdp_mtu", type=int, default=XDP_MTU,
                   help="MTU of the namespaces' af_xdp pair and of bypass's af_xdp device (the "
                        "largest its page-sized buffers take: %d; 1500 was the default before)" % XDP_MTU)
    p.add_argument("--no_scale", action="store_true",
                   help="skip the scale table (peers vs latency and memory, about 40 s)")
    p.add_argument("--skip", default="", help="comma-separated columns to leave out (%s)"
                   % ",".join(COLUMN_KEYS))
    p.add_argument("--fi_lib", help="libbypass-fi.so to use (default: bazel-bin/fabric/fi/)")
    p.add_argument("--verbose", action="store_true", help="log every command, its time and outcome")
    p.add_argument("--progress", action="store_true", default=None, help="force the progress line")
    p.add_argument("--no_progress", action="store_false", dest="progress", help="no progress line")
    a = p.parse_args(argv)
    if a.selftest:
        defaults = dict(reps=2, sizes="64,4096", seconds=0.02, min_iters=20, timeout=20)
        a.no_scale = True  # 1024 endpoints take longer than a self-test may
    elif a.quick:
        defaults = dict(reps=3, sizes="64,65536", seconds=0.1, min_iters=30, timeout=20)
    else:
        defaults = dict(reps=5, sizes="8,64,512,4096,65536,1048576,4194304", seconds=0.5, min_iters=100,
                        timeout=60)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    try:
        a.sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()})
    except ValueError:
        fail("--sizes=%s: give comma-separated byte counts, e.g. --sizes=64,4096" % a.sizes)
    if not a.sizes or a.sizes[0] < 1 or a.sizes[-1] > 256 * MIB:
        fail("--sizes: each size must be 1 B .. 256 MiB")
    if a.reps < 1 or a.reps > 100:
        fail("--reps must be 1..100")
    if a.seconds <= 0 or a.min_iters < 1 or a.timeout <= 0 or a.warmup < 0 or not 1 <= a.window <= 1024:
        fail("--seconds, --min_iters and --timeout must be positive, --warmup at least 0 and "
             "--window 1..1024")
    if not 1280 <= a.veth_mtu <= 65535:
        fail("--veth_mtu=%d: give 1280 .. 65535 (veth's largest)" % a.veth_mtu)
    if not 1280 <= a.xdp_mtu <= XDP_MTU:
        fail("--xdp_mtu=%d: give 1280 .. %d (af_xdp's page-sized buffers)" % (a.xdp_mtu, XDP_MTU))
    known = set(COLUMN_KEYS)
    a.skip = {s for s in a.skip.split(",") if s}
    if a.skip - known:
        fail("--skip: unknown column(s) %s; the columns are %s"
             % (",".join(sorted(a.skip - known)), ",".join(sorted(known))))
    wd = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    if a.json and a.json != "-":
        a.json = os.path.join(wd, a.json)
    if a.plot is None:
        a.plot = os.path.join(wd, "bench_latency.png")
    elif a.plot:
        a.plot = os.path.join(wd, a.plot)
    if a.progress is None:
        a.progress = sys.stderr.isatty() and not a.json  # quiet with --json, as pingpong
    return a


SCALE_PEERS = (2, 16, 64, 256, 1024)


def scale_table(binary, timeout):
    """The scale table (issue 22): fabric/rdm's engine_benchmark with a hub
    endpoint and N idle handshaked peers on loopback in this process: the 8 B
    round trip to one of them, the hub's heap per peer and an idle progress
    pass, against N. Returns (rows, None) or (None, why)."""
    fd, out = tempfile.mkstemp(prefix="bypass-scale-", suffix=".json")
    os.close(fd)
    try:
        r = run_one([binary, "--benchmark_filter=BM_(PingPong|IdleProgress)Peers/(%s)$"
                     % "|".join(str(n) for n in SCALE_PEERS),
                     "--benchmark_min_time=0.2", "--benchmark_out=" + out,
                     "--benchmark_out_format=json"], os.environ.copy(), timeout, "engine_benchmark")
        if not r.ok:
            return None, r.reason or "engine_benchmark failed"
        with open(out) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return None, "engine_benchmark's JSON: %s" % e
    finally:
        os.unlink(out)
    rows = {}
    for b in doc.get("benchmarks", []):
        name, _, n = b.get("name", "").partition("/")
        if not n.isdigit():
            continue
        row = rows.setdefault(int(n), {"peers": int(n)})
        if name == "BM_PingPongPeers":
            row["rtt_cpu_ns"] = b.get("cpu_time")
            row["hub_bytes"] = b.get("hub_bytes")
        elif name == "BM_IdleProgressPeers":
            row["idle_pass_cpu_ns"] = b.get("cpu_time")
    rows = [rows[n] for n in sorted(rows)]
    if not rows or "rtt_cpu_ns" not in rows[0]:
        return None, "engine_benchmark printed no scale rows"
    prev = None
    for row in rows:
        row["rtt_ratio"] = row.get("rtt_cpu_ns", 0) / rows[0]["rtt_cpu_ns"]
        row["added_bytes_per_peer"] = None if prev is None else (
            (row.get("hub_bytes", 0) - prev.get("hub_bytes", 0)) / (row["peers"] - prev["peers"]))
        prev = row
    return rows, None


# The rate table (issue 22, part 5): windowed message rates at one size, on
# this host, against the bare DPDK memif packet rate and libfabric's shm
# through the same pingpong --layer=fi --mode=rate path.
RATE_SIZE = 64
RATE_COLUMNS = ["bare", "raw", "rdm", "fi", "fi_host", "shm"]
# (ours, theirs, goal): ours' rate / theirs' rate should be at least goal.
RATE_GOALS = [("rdm", "bare", 0.5), ("fi", "shm", 1.0)]


def rate_table(rows, sizes):
    """The rate table from the local section's summarized rows: (table, None)
    or (None, why). Ratios are rates, ours / theirs: above 1.00x is faster."""
    if RATE_SIZE not in sizes:
        return None, "skipped: the rate table is at %d B; add %d to --sizes" % (RATE_SIZE, RATE_SIZE)
    by_key = {r["column"]: r for r in rows if r["size"] == RATE_SIZE}

    def rate(key):
        r = by_key.get(key)
        return r["msg_rate"] if r and not r["rate_error"] and r["msg_rate"] else None

    def ratio(a, b):
        return rate(a) / rate(b) if rate(a) and rate(b) else None

    table = {"size": RATE_SIZE, "rows": [], "goals": []}
    for key in RATE_COLUMNS:
        r = by_key.get(key)
        if r is None:
            continue
        table["rows"].append({"column": key, "label": r["label"], "msg_rate": rate(key),
                              "vs_bare": ratio(key, "bare"), "vs_shm": ratio(key, "shm"),
                              "error": r["rate_error"]})
    for ours, theirs, goal in RATE_GOALS:
        v = ratio(ours, theirs)
        table["goals"].append({"ours": ours, "theirs": theirs, "ratio": v, "goal": goal,
                               "met": None if v is None else v >= goal})
    if not any(row["msg_rate"] for row in table["rows"]):
        return None, "no column measured a rate at %d B" % RATE_SIZE
    return table, None


def render_rate(table, markdown):
    head = ["column", "windowed Mmsg/s", "x bare", "x shm", "note"]
    body = []
    for r in table["rows"]:
        body.append([r["label"], fmt_rate(r["msg_rate"]), ratio_str(r["vs_bare"]),
                     ratio_str(r["vs_shm"]), short(r["error"] or "", 60)])
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(b) + " |" for b in body]
    else:
        widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
        lines += ["  ".join(x[i].ljust(widths[i]) if i in (0, 4) else x[i].rjust(widths[i])
                            for i in range(len(head))).rstrip() for x in [head] + body]
    lines.append("")
    for g in table["goals"]:
        verdict = "not measured" if g["met"] is None else ("met" if g["met"] else "not met")
        lines.append("%s / %s: %s (goal at least %.2fx): %s" % (
            g["ours"], g["theirs"], ratio_str(g["ratio"]), g["goal"], verdict))
    return lines


def render_scale(rows, markdown):
    head = ["peers", "8 B round trip (CPU)", "vs %d peers" % rows[0]["peers"], "hub heap / peer",
            "added per peer", "idle pass (CPU)"]
    body = []
    for r in rows:
        added = r["added_bytes_per_peer"]
        body.append([str(r["peers"]), "%.2f us" % (r.get("rtt_cpu_ns", 0) / 1e3),
                     "%.2fx" % r["rtt_ratio"], "%.0f B" % (r.get("hub_bytes", 0) / r["peers"]),
                     "-" if added is None else "%.0f B" % added,
                     "%.1f ns" % r.get("idle_pass_cpu_ns", 0)])
    if markdown:
        return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    return ["  ".join(x[i].rjust(widths[i]) for i in range(len(head))) for x in [head] + body]


def main(argv):
    global VERBOSE
    a = parse_args(argv)
    VERBOSE = a.verbose
    if a.selftest:
        selftest_parsers()
    tools = {
        "bare": find_tool("tools/bare/memif_pingpong"),
        "pingpong": find_tool("tools/pingpong/pingpong"),
        "fi_pingpong": shutil.which("fi_pingpong"),
        "engine_benchmark": find_tool("fabric/rdm/engine_benchmark"),
    }
    for k in ("bare", "pingpong"):
        if not tools[k]:
            fail("cannot find %s in the runfiles: run bench with bazel run //tools:bench" % k)
    b = Bench(a, tools)
    b.fi_dir = find_fi_lib(a.fi_lib)
    b.providers = fi_providers()
    b.fi_lib_sanitized = sanitizer_built(FI_LIB_USED)

    local = b.new_section("local", LOCAL_COLUMNS, "bare", "shm")
    local["title"] = ("two processes on this host (memif, and bypass's default domain: shared memory; "
                      "shm and tcp over loopback)")
    netns = b.new_section("netns", NETNS_COLUMNS, None, "tcp")
    netns["title"] = ("two network namespaces over veth pairs (af_xdp at MTU %d; bypass's default "
                      "domain, kernel UDP, and tcp through the kernel at MTU %d)" % (a.xdp_mtu, a.veth_mtu))
    b.check_columns(local)
    b.check_columns(netns)
    if a.no_netns:
        netns["skipped"] = "skipped (--no_netns)"
    elif os.geteuid() != 0:
        netns["skipped"] = "skipped: af_xdp over veth in two network namespaces needs root (run bench as root)"
    elif not shutil.which("ip"):
        netns["skipped"] = "skipped: iproute2's ip is missing (tools/setup.sh installs it)"
    sections = [local] + ([netns] if not netns["skipped"] else [])

    def cleanup(*_):
        for p in list(_CHILDREN):
            _kill(p)
        if b.veth:
            b.veth.close()
        if b.fi_dir:
            shutil.rmtree(b.fi_dir, ignore_errors=True)
        for suffix in (".sock", ".sock.lock"):  # fi_pingpong's memif device on this host
            try:
                os.unlink("/tmp/bypass-bench-%d%s" % (os.getpid(), suffix))
            except OSError:
                pass

    def on_signal(signum, _frame):
        b.progress_done()
        cleanup()
        sys.stderr.write("bench: interrupted; namespaces and processes removed\n")
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = datetime.datetime.now().astimezone()
    load_before = loadavg()
    try:
        if not netns["skipped"]:
            b.veth = Veth(a.veth_mtu, a.xdp_mtu)
            try:
                b.veth.create()
            except RuntimeError as e:
                netns["skipped"] = "skipped: could not create the namespaces (%s)" % e
                b.veth.close()
                sections = [local]
        b.total = b.plan_count(sections)
        for rep in range(a.reps):  # alternating: every column once per repetition
            for sec in sections:
                b.run_rep(sec, rep)
    finally:
        b.progress_done()
        cleanup()

    scale_rows, scale_why = None, "skipped (--no_scale)"
    if not a.no_scale:
        if tools["engine_benchmark"]:
            if b.progress_on:
                sys.stderr.write("scale table (engine_benchmark: 1024 endpoints in this process)\r")
            scale_rows, scale_why = scale_table(tools["engine_benchmark"], max(a.timeout, 300))
            b.progress_done()
        else:
            scale_why = "skipped: fabric/rdm/engine_benchmark is not in the runfiles"

    results = []
    for sec in (local, netns):
        rows = summarize(sec, a.sizes) if not sec["skipped"] else []
        results.append((sec, rows))
    plot_note = gnuplot_png(a.plot, results) if a.plot else None

    m = machine()
    m["loadavg_1min_before"], m["loadavg_1min_after"] = load_before, loadavg()
    elapsed = time.monotonic() - b.t0
    text = ["bypass bench, %s: %d CPUs (%s), %s, Linux %s" % (
                started.strftime("%Y-%m-%d %H:%M %Z"), m["cpus"], m["cpu_model"], m["os"], m["kernel"]),
            "%d alternating repetition%s%s in %.0f s; load average %s before, %s after "
            "(busy-polling pairs want 2 idle cores)" % (
                a.reps, "" if a.reps == 1 else "s",
                " (--quick)" if a.quick else (" (--selftest)" if a.selftest else ""), elapsed,
                "?" if load_before is None else "%.2f" % load_before,
                "?" if m["loadavg_1min_after"] is None else "%.2f" % m["loadavg_1min_after"]),
            "bypass fi provider: %s" % (FI_LIB_USED or "not built (%s)" % FI_LIB_TARGET), ""]
    for sec, rows in results:
        text.append(("## " if a.markdown else "== ") + "%s: %s" % (sec["name"], sec["title"]))
        text.append("")
        if sec["skipped"]:
            text.append(sec["skipped"])
            text.append("")
            continue
        text += render(sec, rows, a.reps, a.markdown, a.more)
    rate_rows, rate_why = rate_table(results[0][1], a.sizes) if results[0][1] else (
        None, local["skipped"] or "no local rows")
    text.append(("## " if a.markdown else "== ") + "rate at %d B: windowed messages per second "
                "(pingpong --mode=rate, --window %d%s; bare DPDK and raw: bursts of 32 frames), "
                "medians; ratios are rates, ours / theirs"
                % (RATE_SIZE, a.window, ", FI_MORE on all but a window's last send (--more)"
                   if a.more else ", every send alone (--no_more)"))
    text.append("")
    text += render_rate(rate_rows, a.markdown) if rate_rows else [rate_why]
    text.append("")
    text.append(("## " if a.markdown else "== ") + "scale: one endpoint with N idle handshaked "
                "peers (fabric/rdm engine_benchmark, loopback in one process; CPU time per op)")
    text.append("")
    text += render_scale(scale_rows, a.markdown) if scale_rows else [scale_why]
    text.append("")
    if a.plot:
        text.append(plot_note or "plot: %s" % a.plot)
    stream = sys.stderr if a.json == "-" else sys.stdout
    stream.write("\n".join(text) + "\n")

    if a.json:
        doc = {
            "tool": "bench",
            "date": started.isoformat(timespec="seconds"),
            "machine": m,
            "seconds": round(elapsed, 1),
            "config": {"quick": a.quick, "selftest": a.selftest, "reps": a.reps, "sizes": a.sizes,
                       "seconds_per_run": a.seconds, "min_iters": a.min_iters, "warmup": a.warmup,
                       "window": a.window, "more": a.more, "timeout_s": a.timeout,
                       "fi_lib": FI_LIB_USED},
            "sections": [],
            "plot": a.plot if a.plot and not plot_note else None,
            "scale": {"rows": scale_rows, "skipped": None if scale_rows else scale_why},
            "rate": rate_rows if rate_rows else {"size": RATE_SIZE, "skipped": rate_why},
        }
        for sec, rows in results:
            doc["sections"].append({
                "name": sec["name"], "title": sec["title"], "skipped": sec["skipped"],
                "baseline": sec["baseline"], "reference": sec["reference"],
                "columns": [{"key": c.key, "label": c.label, "tool": c.tool, "layer": c.layer,
                             "provider": c.provider, "unavailable": c.unavailable}
                            for c in sec["columns"]],
                "rows": rows,
            })
        body = json.dumps(doc, indent=1, sort_keys=False) + "\n"
        if a.json == "-":
            sys.stdout.write(body)
        else:
            with open(a.json, "w") as f:
                f.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
