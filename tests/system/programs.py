"""What the program acceptance tests share: a daemon per test, running an
rdma-core pingpong example between uroce0 and uroce1 and checking what it
reports, and running perftest pairs and checking their result tables.

Every program must be installed (tools/install-deps installs ibverbs-utils
and perftest): a missing one fails the test. Each run's time goes to
stderr.
"""


import dataclasses
import re
import shutil
import subprocess
import sys
import time
import unittest

import harness
from harness import DEFAULT_DEVICES

SERVER, CLIENT = "uroce0", "uroce1"

# --- the pingpong examples (libibverbs/examples/*_pingpong.c) -----------------

PINGPONG_DEFAULT_SIZE = 4096
PINGPONG_TIMEOUT = 120.0
# Its summary, printed by both sides: bytes = size * iters * 2.
PINGPONG_BYTES = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$", re.M)
PINGPONG_ITERS = re.compile(r"^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$", re.M)
PINGPONG_ADDRESS = re.compile(
    r"^\s*(local|remote) address:\s+LID 0x[0-9a-f]+, QPN 0x[0-9a-f]+, PSN 0x[0-9a-f]+[,:] "
    r"GID (\S+)$", re.M)


def elapsed(what, seconds):
    """Run times for the log of the test run (ctest keeps stderr)."""
    sys.stderr.write("[%6.1f s] %s\n" % (seconds, what))
    sys.stderr.flush()


def diagnostics(daemon):
    """The daemon's counters and log, for failure messages."""
    try:
        counters = daemon.stats_text()
    except (OSError, AssertionError) as error:
        counters = "(none: %s)\n" % error
    return "--- uroced counters\n%s%s" % (counters, daemon.log())


def require(program):
    """The program's path; a missing program is a failure, not a skip."""
    path = shutil.which(program)
    if not path:
        raise AssertionError("%s is not installed (tools/install-deps installs it)" % program)
    return path


def skip_unless_ucx_has_verbs(test):
    """Skips `test` where the installed UCX was built without its verbs
    transports (Debian sid's 1.23.0~rc1 has only rocm, cma and ze): no
    device, uroce or a NIC, is usable through it there. docs/ci.md lists
    where."""
    built = subprocess.run([require("ucx_info"), "-b"], capture_output=True, text=True)
    modules = re.search(r'uct_MODULES\s+"([^"]*)"', built.stdout)
    if modules and "ib" not in modules.group(1).split(":"):
        test.skipTest("this UCX has no verbs transports (uct modules %s)" % modules.group(1))


def ucx_perftest_mode_options():
    """UCX 1.18's ucx_perftest runs as an MPI program unless told `-P 0`;
    older ones have no -P (and refuse it)."""
    usage = subprocess.run([require("ucx_perftest"), "-h"], capture_output=True, text=True,
                           timeout=60)
    return ["-P", "0"] if re.search(r"(?m)^\s*-P <0\|1>", usage.stdout + usage.stderr) else []


class DaemonPerTest(unittest.TestCase):
    """A private daemon (with the class's daemon_args) for each test, so
    that a failure leaves nothing to the next test and the counters in a
    failure message are that test's alone. It must stop cleanly."""

    daemon_args = ()

    def setUp(self):
        self.daemon = harness.Daemon(self.daemon_args)
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()

    def tearDown(self):
        self.assertEqual(self.daemon.stop(), 0, self.daemon.log())


class PingPongCases:
    """An rdma-core pingpong example between uroce0 (server) and uroce1
    (client), -g 0 -c; the concrete classes choose the program and the
    daemon's options."""

    program = "ibv_rc_pingpong"

    @classmethod
    def setUpClass(cls):
        require(cls.program)
        super().setUpClass()

    def pingpong(self, size, iters, events, *extra):
        args = ["-c"] + (["-e"] if events else []) + list(extra)
        started = time.monotonic()
        server, client = harness.run_pingpong(
            self.daemon.env(), SERVER, CLIENT, iters, size, program=self.program,
            timeout=PINGPONG_TIMEOUT, log=lambda: diagnostics(self.daemon), extra_args=args)
        elapsed("%s -g 0 -s %d -n %d %s (%s)" % (
            self.program, size, iters, " ".join(args), " ".join(self.daemon_args) or "shortcut"),
            time.monotonic() - started)
        peers = {SERVER: CLIENT, CLIENT: SERVER}
        outputs = "".join("\n--- %s on %s, exit status %d, %.1f s\n%s" % (
            self.program, side.device, side.returncode, side.seconds, side.output)
            for side in (server, client))
        for side in (server, client):
            context = "%s -s %d -n %d %s, checking %s\n%s\n%s" % (
                self.program, size, iters, " ".join(args), side.device, outputs,
                diagnostics(self.daemon))
            self.assertEqual(side.returncode, 0, context)
            # Both ends addressed each other with GID 0 of the other device.
            addresses = dict((m.group(1), m.group(2))
                             for m in PINGPONG_ADDRESS.finditer(side.output))
            self.assertEqual(addresses, {
                "local": harness.gid0_for(DEFAULT_DEVICES[side.device]),
                "remote": harness.gid0_for(DEFAULT_DEVICES[peers[side.device]])}, context)
            byte_lines = PINGPONG_BYTES.findall(side.output)
            iter_lines = PINGPONG_ITERS.findall(side.output)
            self.assertEqual(len(byte_lines), 1, context)
            self.assertEqual(len(iter_lines), 1, context)
            self.assertEqual(int(byte_lines[0][0]), 2 * size * iters, context)
            self.assertEqual(int(iter_lines[0][0]), iters, context)
            # -c: the client compares what it received with what the server
            # wrote and prints one line per bad page (the exit status stays 0).
            self.assertNotIn("invalid data", side.output, context)
            # Whatever the examples could not do, even when they go on
            # ("Couldn't prefetch MR ... Continue anyway").
            self.assertNotIn("Couldn't", side.output, context)
        self.daemon.wait_until_idle()
        return server, client


# --- perftest --------------------------------------------------------------------

PERFTEST_ITERS = 5  # perftest's minimum (MIN_ITER)
# perftest times with the TSC, calibrated against gettimeofday when it
# reports; when the calibration's samples do not line up (the process was
# descheduled on a busy machine), it prints this, "Can't produce a report"
# and exits 1, whatever the device did. Such a pair runs again.
CALIBRATION_FAILED = "Correlation coefficient r^2:"
CALIBRATION_ATTEMPTS = 3
PERFTEST_TIMEOUT = 120.0  # one pair; a latency test with -a takes 20-30 s
ALL_SIZES = [1 << n for n in range(1, 24)]  # -a: 2 to 2^23 bytes
ATOMIC_SIZE = 8
MAX_SANE_LATENCY_USEC = 10e6  # no message waits seconds for its peer

# perftest 23.x reports MB/sec; 25.01 (6.24) MiB/sec.
BW_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(MB|MiB)/sec\]\s+"
                       r"BW average\[(MB|MiB)/sec\]\s+MsgRate\[Mpps\]\s*$")
LAT_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+"
                        r"t_typical\[usec\]\s+t_avg\[usec\]\s+t_stdev\[usec\]\s+"
                        r"99% percentile\[usec\]\s+99\.9% percentile\[usec\]\s*$")
NUMBER = r"(\d+(?:\.\d+)?)"
# A latency when perftest could not calibrate its clock: "inf" or "-nan".
TIME = r"(\d+(?:\.\d+)?|inf|-?nan)"
# What perftest prints when that calibration failed.
UNCALIBRATED = "Correlation coefficient r^2"


def run_calibrated(pair, program, between=lambda: None):
    """`pair()` (a perftest server and client: (server, client) PairSide)
    again, after `between()`, while a side failed only because perftest's
    clock calibration did (CALIBRATION_FAILED), at most CALIBRATION_ATTEMPTS
    times in all. Programs other than perftest never print it."""
    for attempt in range(CALIBRATION_ATTEMPTS):
        sides = pair()
        miscalibrated = [side for side in sides
                         if side.returncode != 0 and CALIBRATION_FAILED in side.output]
        if not miscalibrated or attempt + 1 == CALIBRATION_ATTEMPTS:
            return sides
        sys.stderr.write("%s: perftest's clock calibration failed (%s), running the pair "
                         "again\n" % (program, CALIBRATION_FAILED))
        between()


@dataclasses.dataclass
class BwRow:
    size: int
    iters: int
    peak: float  # MB/sec or MiB/sec
    average: float  # likewise
    msg_rate: float  # Mpps


@dataclasses.dataclass
class LatRow:
    size: int
    iters: int
    t_min: float  # usec
    t_max: float
    typical: float
    average: float
    stdev: float
    p99: float
    p999: float


def parse_table(output, kind):
    """The rows of a perftest result table, or None without a table."""
    header, row_type = (BW_HEADER, BwRow) if kind == "bw" else (LAT_HEADER, LatRow)
    columns = len(dataclasses.fields(row_type))
    # Size and iterations are counts; a latency table's times may be inf.
    cells = [NUMBER] * columns if kind == "bw" else [NUMBER] * 2 + [TIME] * (columns - 2)
    row = re.compile(r"^\s*" + r"\s+".join(cells) + r"\s*$")
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if header.match(line)]
    if not starts:
        return None
    if len(starts) > 1:
        raise AssertionError("%d result tables" % len(starts))
    rows = []
    for line in lines[starts[0] + 1:]:
        m = row.match(line)
        if not m:
            break
        values = m.groups()
        rows.append(row_type(int(values[0]), int(values[1]), *map(float, values[2:])))
    return rows


@dataclasses.dataclass
class Perftest:
    program: str
    kind: str  # "bw" or "lat"
    all_sizes: bool  # takes -a; the atomic tests have one size and refuse it
    # What its server prints: "all" rows (it measures too), the "last" one
    # (the client's final report, sent over TCP) or None (no table).
    server_table: str


PERFTESTS = {p.program: p for p in (
    Perftest("ib_send_bw", "bw", True, "all"),
    Perftest("ib_write_bw", "bw", True, "last"),
    Perftest("ib_read_bw", "bw", True, "last"),
    Perftest("ib_atomic_bw", "bw", False, "last"),
    Perftest("ib_send_lat", "lat", True, "all"),
    Perftest("ib_write_lat", "lat", True, "all"),
    Perftest("ib_read_lat", "lat", True, None),
    Perftest("ib_atomic_lat", "lat", False, None),
)}


class PerftestCases:
    """Runs perftest pairs against the test's daemon."""

    @classmethod
    def setUpClass(cls):
        for program in PERFTESTS:
            require(program)
        super().setUpClass()

    def run_pair(self, program, *options):
        """Server on uroce0, client on uroce1 connecting to localhost, with
        their own TCP port. Returns (server, client, context): the sides as
        harness.PairSide and, for failure messages, both outputs, the
        daemon's counters and its log."""
        path = require(program)
        started = time.monotonic()

        def pair():
            port = harness.free_tcp_port()
            common = ["-x", "0", "-p", str(port), *options]
            return harness.run_server_client(
                self.daemon.env(), [path, "-d", SERVER, *common],
                [path, "-d", CLIENT, *common, "localhost"], port, timeout=PERFTEST_TIMEOUT,
                log=lambda: diagnostics(self.daemon))

        server, client = run_calibrated(pair, program, self.daemon.wait_until_idle)
        elapsed("%s %s (%s)" % (program, " ".join(options),
                                " ".join(self.daemon_args) or "shortcut"),
                time.monotonic() - started)
        context = "".join("\n--- %s on %s, exit status %d, %.1f s: %s\n%s" % (
            which, device, side.returncode, side.seconds, " ".join(side.args), side.output)
            for which, device, side in (("server", SERVER, server),
                                        ("client", CLIENT, client)))
        context += "\n" + diagnostics(self.daemon)
        return server, client, context

    def check_perftest(self, program, *extra, max_size=ALL_SIZES[-1]):
        """The pair exits 0 and the client's result table lists every size
        the options promise (with -a, up to max_size: UD's is the MTU),
        each with PERFTEST_ITERS iterations and sane numbers; so does the
        server's, as far as it prints one."""
        spec = PERFTESTS[program]
        options = (["-a"] if spec.all_sizes else []) + ["-n", str(PERFTEST_ITERS), *extra]
        for attempt in range(2):
            server, client, context = self.run_pair(program, *options)
            # perftest calibrates its clock against the CPU's; on a loaded
            # machine that fails and its times come out wrong (an "inf" row).
            # Its measurement, not the device: run it once more.
            if UNCALIBRATED not in server.output + client.output or attempt:
                break
            sys.stderr.write("%s: perftest could not calibrate its clock; once more\n" % program)
        self.assertEqual((server.returncode, client.returncode), (0, 0), context)
        sizes = [s for s in ALL_SIZES if s <= max_size] if spec.all_sizes else [ATOMIC_SIZE]
        expected = {"client": sizes, "server": {"all": sizes, "last": sizes[-1:],
                                                None: None}[spec.server_table]}
        for which, side in (("server", server), ("client", client)):
            rows = parse_table(side.output, spec.kind)
            if expected[which] is None:
                continue
            self.assertIsNotNone(rows, "no result table from the %s\n%s" % (which, context))
            self.assertEqual([row.size for row in rows], expected[which],
                             "sizes in the %s's table\n%s" % (which, context))
            for row in rows:
                what = "%s, size %d\n%s" % (which, row.size, context)
                self.assertEqual(row.iters, PERFTEST_ITERS, what)
                if spec.kind == "bw":
                    self.check_bw_row(row, what)
                elif UNCALIBRATED not in side.output:
                    # Twice uncalibrated (a loaded machine), the times are
                    # perftest's error: every size and iteration still counts.
                    self.check_lat_row(row, what)
        self.daemon.wait_until_idle()

    def check_bw_row(self, row, what):
        # MsgRate has six decimals: any completed message shows. Average
        # bandwidth has two; at 64 KiB and up it is never 0.00 unless the
        # 5 messages took a minute.
        self.assertGreater(row.msg_rate, 0, what)
        self.assertGreaterEqual(row.peak, 0, what)
        if row.size >= 65536:
            self.assertGreater(row.average, 0, what)

    def check_lat_row(self, row, what):
        epsilon = 0.01  # the columns are rounded to two decimals
        self.assertGreater(row.t_min, 0, what)
        self.assertGreaterEqual(row.stdev, 0, what)
        for value in (row.typical, row.average, row.p99, row.p999):
            self.assertLessEqual(row.t_min, value + epsilon, what)
            self.assertLessEqual(value, row.t_max + epsilon, what)
        self.assertLessEqual(row.p99, row.p999 + epsilon, what)
        self.assertLess(row.t_max, MAX_SANE_LATENCY_USEC, what)
