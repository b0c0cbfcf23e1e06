#!/usr/bin/env python3
"""netns_counts: what one round trip across two network namespaces costs, in counts.

Runs the ping-pong of bench's two-namespace table (tools/bench.py: veth
pairs, bypass raw, rdm and fi over af_xdp at MTU 3502, fi's default domain
over kernel UDP, libfabric's tcp) once per variant and size, each process
under `perf stat`, and prints per round trip what a loaded machine does not
change: the frames each side sent (the veth pair's counters) and the system
calls of the send and receive paths (sendto: af_xdp's TX kick, tcp's send;
sendmmsg, recvmmsg: the kernel UDP device; poll, recvfrom: tcp and the af_xdp
PMD's RX wakeups; futex: threads). Latency here is noise; these counts are not.

  bazel build -c opt //tools:netns_counts && \\
    bazel-bin/tools/netns_counts --sizes=64,4096 --iters=3000

Root only (namespaces, af_xdp, perf's syscall tracepoints). The round trips
are --iters plus --warmup; start-up makes a few of these calls too (a few
sendto and futex), which a longer run dilutes.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the namespaces, the pair runner, the tool finder)

SYSCALLS = ("sendto", "recvfrom", "poll", "ppoll", "sendmmsg", "recvmmsg", "sendmsg", "recvmsg",
            "futex")
VARIANTS = ("raw", "rdm", "fi", "default", "tcp")


def fail(msg):
    sys.stderr.write("netns_counts: %s\n" % msg)
    sys.exit(2)


def parse_perf_stat(text):
    """{syscall: count} from `perf stat -x,` output of syscalls:sys_enter_* events."""
    counts = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 3 or not parts[2].startswith("syscalls:sys_enter_"):
            continue
        name = parts[2][len("syscalls:sys_enter_"):]
        try:
            counts[name] = int(parts[0])
        except ValueError:  # "<not counted>", "<not supported>"
            continue
    return counts


def parse_link_stats(text):
    """(tx packets, rx packets) of `ip -s -j link show dev X`."""
    doc = json.loads(text)
    if not doc or "stats64" not in doc[0]:
        raise ValueError("no stats64 in the output of ip -s -j link show")
    s = doc[0]["stats64"]
    return int(s["tx"]["packets"]), int(s["rx"]["packets"])


def link_stats(netns, ifname):
    r = subprocess.run(["ip", "-n", netns, "-s", "-j", "link", "show", "dev", ifname],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=20)
    if r.returncode != 0:
        raise RuntimeError("ip -n %s link show %s: %s" % (netns, ifname, r.stderr.strip()))
    return parse_link_stats(r.stdout)


def per_rt(counts, rts):
    return {k: counts.get(k, 0) / rts for k in SYSCALLS}


def row_text(variant, size, rts, frames, cli, srv):
    calls = lambda c: " ".join("%s %.2f" % (k, v) for k, v in c.items() if v >= 0.005)
    return ("%-8s %7d B  %6d rts  frames/rt: client %.2f server %.2f\n"
            "    client calls/rt: %s\n    server calls/rt: %s"
            % (variant, size, rts, frames[0], frames[1], calls(cli) or "-", calls(srv) or "-"))


def selftest():
    stat = ("4008,,syscalls:sys_enter_sendto,1000,100.00,,\n"
            "<not counted>,,syscalls:sys_enter_poll,0,0.00,,\n"
            "12,,syscalls:sys_enter_futex,1000,100.00,,\n"
            "# started on Thu\n17258,,raw_syscalls:sys_enter,1000,100.00,,\n")
    got = parse_perf_stat(stat)
    assert got == {"sendto": 4008, "futex": 12}, got
    link = '[{"ifname":"x0","stats64":{"rx":{"bytes":1,"packets":4000},"tx":{"bytes":2,"packets":4001}}}]'
    assert parse_link_stats(link) == (4001, 4000)
    try:
        parse_link_stats('[{"ifname":"x0"}]')
        raise AssertionError("no stats64 accepted")
    except ValueError:
        pass
    r = per_rt({"sendto": 4000, "futex": 2}, 4000)
    assert r["sendto"] == 1.0 and r["futex"] == 0.0005 and r["poll"] == 0.0, r
    text = row_text("raw", 64, 4000, (1.0, 1.0), r, r)
    assert "sendto 1.00" in text and "futex" not in text, text
    print("netns_counts: selftest ok")
    return 0


def run(a):
    pingpong = a.pingpong or bench.find_tool("tools/pingpong/pingpong")
    if not pingpong:
        fail("no pingpong: bazel build -c opt //tools:netns_counts (or give --pingpong)")
    fi_dir = bench.find_fi_lib(a.fi_lib)
    events = []
    for s in SYSCALLS:
        events += ["-e", "syscalls:sys_enter_" + s]
    v = bench.Veth()
    v.create()
    tmp = tempfile.mkdtemp(prefix="netns-counts-")
    port = 23000 + os.getpid() % 1000
    try:
        for variant in a.variants:
            for size in a.sizes:
                port += 1
                out = (os.path.join(tmp, "srv"), os.path.join(tmp, "cli"))
                perf = lambda f: ["perf", "stat", "-x,", "-o", f] + events
                common = ["--sizes=%d" % size, "--iters=%d" % a.iters, "--warmup=%d" % a.warmup,
                          "--link_timeout_ms=60000"]
                env = dict(os.environ)
                if variant in ("raw", "rdm"):
                    ifs = v.ifs
                    common.append("--layer=" + variant)
                    server = ["--server", "--device=" + v.xdp_uri(1), "--ip=" + v.ips[1]]
                    client = ["--device=" + v.xdp_uri(0), "--ip=" + v.ips[0],
                              "--connect=%s/%s" % (v.macs[1], v.ips[1])]
                    ready = lambda pid: bench.xdp_attached(v.ns[1], v.ifs[1])
                    envs = (env, env)
                else:
                    common += ["--layer=fi", "--oob_port=%d" % port]
                    ready = lambda pid, p=port: bench.tcp_listening(pid, p)
                    if variant == "tcp":
                        ifs = v.kern_ifs
                        common.append("--provider=tcp")
                        server = ["--server", "--fi_node=" + v.kern_ips[1]]
                        client = ["--connect=%s:%d" % (v.kern_ips[1], port),
                                  "--fi_node=" + v.kern_ips[0]]
                        envs = tuple(dict(env, FI_TCP_IFACE=i) for i in (v.kern_ifs[1], v.kern_ifs[0]))
                    else:
                        if not fi_dir:
                            fail("no libbypass-fi.so: build //fabric/fi:libbypass-fi.so or give --fi_lib")
                        env["FI_PROVIDER_PATH"] = fi_dir
                        common.append("--provider=bypass")
                        client = ["--connect=%s:%d" % (v.ctrl_ips[1], port)]
                        server = ["--server"]
                        if variant == "default":
                            ifs = v.kern_ifs
                            env.pop("FI_BYPASS_DEVICES", None)
                            server.append("--device=default")
                            client.append("--device=default")
                            envs = (env, env)
                        else:
                            ifs = v.ifs
                            server.append("--device=" + v.xdp_uri(1))
                            client.append("--device=" + v.xdp_uri(0))
                            envs = (dict(env, FI_BYPASS_DEVICES=v.xdp_uri(1)),
                                    dict(env, FI_BYPASS_DEVICES=v.xdp_uri(0)))
                before = (link_stats(v.ns[0], ifs[0]), link_stats(v.ns[1], ifs[1]))
                res = bench.run_pair(
                    ["ip", "netns", "exec", v.ns[1]] + perf(out[0]) + [pingpong] + server + common,
                    ["ip", "netns", "exec", v.ns[0]] + perf(out[1]) + [pingpong] + client + common,
                    envs[0], envs[1], a.timeout, "pingpong", ready)
                after = (link_stats(v.ns[0], ifs[0]), link_stats(v.ns[1], ifs[1]))
                if not res.ok:
                    print("%-8s %7d B  failed: %s" % (variant, size, res.reason))
                    continue
                rts = a.iters + a.warmup
                counts = []
                for f in out:
                    with open(f) as fh:
                        counts.append(parse_perf_stat(fh.read()))
                frames = tuple((after[i][0] - before[i][0]) / rts for i in (0, 1))
                print(row_text(variant, size, rts, frames, per_rt(counts[1], rts),
                               per_rt(counts[0], rts)))
                sys.stdout.flush()
    finally:
        v.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="64,4096", help="payload bytes, comma-separated")
    p.add_argument("--iters", type=int, default=3000, help="measured round trips per run")
    p.add_argument("--warmup", type=int, default=1000, help="round trips before measuring")
    p.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    p.add_argument("--pingpong", default="", help="the pingpong binary (default: the runfiles')")
    p.add_argument("--fi_lib", default="", help="libbypass-fi.so (default: the runfiles')")
    p.add_argument("--timeout", type=float, default=300, help="seconds per run")
    p.add_argument("--selftest", action="store_true", help="check the parsers and exit")
    a = p.parse_args(argv)
    if a.selftest:
        return selftest()
    try:
        a.sizes = [int(x) for x in a.sizes.split(",") if x]
    except ValueError:
        fail("--sizes=%s: give payload bytes, comma-separated" % a.sizes)
    a.variants = [x for x in a.variants.split(",") if x]
    unknown = sorted(set(a.variants) - set(VARIANTS))
    if unknown:
        fail("--variants: unknown %s (of %s)" % (",".join(unknown), ",".join(VARIANTS)))
    if a.iters < 1 or a.warmup < 0 or not a.sizes or min(a.sizes) < 1:
        fail("--iters >= 1, --warmup >= 0 and sizes >= 1")
    if os.geteuid() != 0:
        fail("needs root (namespaces, af_xdp, perf's syscall tracepoints)")
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
