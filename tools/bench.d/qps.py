"""tools/bench helper: connects PAIRS RC QP pairs between uroce0 and uroce1
in this one process (both ends brought to RTS by tests/system's pyverbs
scripts' rc.py: GID index 0, path MTU 1024, PSNs 0), and measures the daemon
(DAEMON_PID) while they exist:
  - VmRSS of the daemon right before the first QP is created and after the
    last one is connected (kB, and kB per QP);
  - with --idle S: the daemon's CPU time (utime+stime) over S seconds while
    every QP sits idle in RTS, as % of one core.
Prints one line of key=value fields; a QP that cannot be created or
connected ends the loop and is reported in `error=` (everything created
until then is still measured). Exits 0 when all PAIRS were connected, 1
otherwise.

Usage: uroce exec -- python3 qps.py PAIRS DAEMON_PID [--idle S]"""

import argparse
import os
import sys
import time

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD

# The RC QPs of the project's pyverbs scripts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "system", "pyverbs_scripts"))
from rc import rc_qp, rts_attr  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as stat:
        # The command name may hold spaces: the fields start after its ')'.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pairs", type=int)
    parser.add_argument("daemon_pid", type=int)
    parser.add_argument("--idle", type=float, default=0)
    args = parser.parse_args()

    a_ctx, b_ctx = Context(name="uroce0"), Context(name="uroce1")
    a_gid, b_gid = a_ctx.query_gid(1, 0), b_ctx.query_gid(1, 0)
    a_pd, b_pd = PD(a_ctx), PD(b_ctx)
    # One CQ per side for all QPs: nothing is sent, so it never fills.
    a_cq, b_cq = CQ(a_ctx, 16), CQ(b_ctx, 16)

    rss_before = rss_kb(args.daemon_pid)
    start = time.monotonic()
    qps = []  # kept alive until the measurements are done
    connected = 0
    error = ""
    try:
        for _ in range(args.pairs):
            a = rc_qp(a_pd, a_cq)
            qps.append(a)
            b = rc_qp(b_pd, b_cq)
            qps.append(b)
            a.to_rts(rts_attr(b.qp_num, b_gid))
            b.to_rts(rts_attr(a.qp_num, a_gid))
            connected += 1
    except Exception as exc:  # reported, not hidden: the row shows it
        error = "after %d QPs: %s" % (len(qps), " ".join(str(exc).split()))
    setup = time.monotonic() - start
    rss_after = rss_kb(args.daemon_pid)

    fields = {
        "pairs": connected,
        "qps": len(qps),
        "setup_s": "%.1f" % setup,
        "rss_before_kb": rss_before,
        "rss_after_kb": rss_after,
        "rss_per_qp_kb": "%.1f" % ((rss_after - rss_before) / max(1, len(qps))),
    }
    if args.idle > 0:
        cpu0, t0 = cpu_seconds(args.daemon_pid), time.monotonic()
        time.sleep(args.idle)
        cpu1, t1 = cpu_seconds(args.daemon_pid), time.monotonic()
        fields["cpu_pct"] = "%.3f" % (100 * (cpu1 - cpu0) / (t1 - t0))
    print(" ".join("%s=%s" % kv for kv in fields.items()) + (" error=" + error if error else ""),
          flush=True)
    # Exiting without destroying them is deliberate: the daemon cleans up a
    # client's objects when it exits, which is quicker than 2*PAIRS destroys.
    os._exit(0 if not error else 1)


if __name__ == "__main__":
    main()
