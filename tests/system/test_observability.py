"""`uroce stats`, `uroce fault` and `uroce trace` (docs/uroce.md) and the
protocol ops behind them: every refusal with its errno, message and exit
status; counters, fault settings and traces as the daemon reports them;
traces of real ibv_rc_pingpong traffic decoded by tshark; recovery from
injected loss, duplication and reordering."""

import collections
import errno
import os
import re
import resource
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest

import harness
from harness import Op

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3

PCAP_GLOBAL_HEADER = struct.Struct("<IHHiIII")  # magic, version, zone, sigfigs, snaplen, linktype
PCAP_MAGIC = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1

# IBA vol. 1 table 38 (RC opcodes) and section 9.7.5.1 (AETH syndrome).
RC_SEND_ONLY = 0x04
RC_ACKNOWLEDGE = 0x11
AETH_OPCODE_ACK = 0
PSN_SPACE = 1 << 24

TSHARK_FIELDS = ("frame.protocols", "ip.src", "ip.dst", "udp.dstport", "infiniband.bth.opcode",
                 "infiniband.bth.destqp", "infiniband.bth.psn",
                 "infiniband.aeth.syndrome.opcode", "infiniband.aeth.msn")
Packet = collections.namedtuple("Packet", "protocols src dst port opcode destqp psn aeth msn")


def require_tool(test):
    tool = harness.tool_path()
    if not tool:
        test.fail("the uroce command is not built (UROCE_TOOL is not set)")
    return tool


def read_trace_reply(reply):
    packets, write_failed, _, _ = harness.TRACE_REPLY.unpack(reply.body)
    return packets, write_failed


class ObservabilityTestCase(harness.DaemonTestCase):
    """A private daemon for the class, the uroce command pointed at it, and
    a scratch directory per test."""

    def setUp(self):
        self.tool = require_tool(self)
        self.scratch = tempfile.mkdtemp(prefix="uroce-obs-")
        self.addCleanup(shutil.rmtree, self.scratch, True)
        self.env = harness.tool_environment(self.daemon.runtime_dir)

    def path(self, name):
        return os.path.join(self.scratch, name)

    def uroce(self, *args, timeout=harness.RUN_TIMEOUT):
        return harness.run_program([self.tool, *args], env=self.env, timeout=timeout,
                                   log=self.daemon.log)

    def uroce_popen(self, *args):
        return subprocess.Popen([self.tool, *args], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def assert_exit(self, result, code, stderr_has=None):
        self.assertEqual(result.returncode, code, "uroce exited %d, expected %d:\n%s%s\n%s" % (
            result.returncode, code, result.stdout, result.stderr, self.daemon.log()))
        if stderr_has is not None:
            self.assertIn(stderr_has, result.stderr)

    def assert_refused(self, reply, error, *words):
        self.assertEqual(reply.error, error, "expected %s, got %s (%s)" % (
            errno.errorcode[error], errno.errorcode.get(reply.error, reply.error), reply.message))
        for word in words:
            self.assertIn(word, reply.message)

    def device_lines(self, device):
        """The status lines of one device, its header line excluded."""
        lines = self.daemon.status().text.split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith("device %s " % device))
        block = []
        for line in lines[start + 1:]:
            if not line.startswith("  "):
                break
            block.append(line)
        return block

    def faults_line(self, device):
        lines = [line for line in self.device_lines(device) if line.startswith("  faults ")]
        self.assertLessEqual(len(lines), 1)
        return lines[0] if lines else None

    def stats(self):
        with self.daemon.raw_client() as client:
            reply = client.call(Op.STATS, harness.device_body(""))
        self.assertEqual(reply.error, 0, reply.message)
        return harness.parse_stats(reply.body.split(b"\0", 1)[0].decode())

    def wait_for_tracing(self, device, tracing=True):
        harness.wait_for(
            lambda: any(line.startswith("  tracing (") for line in self.device_lines(device))
            == tracing, 10.0, "%s to be %straced" % (device, "" if tracing else "no longer "),
            self.daemon.log)

    def assert_log_has(self, pattern):
        harness.wait_for(lambda: re.search(pattern, self.daemon.log()), 5.0,
                         "the daemon log to match %r" % pattern, self.daemon.log)


class LargeStatusTest(ObservabilityTestCase):

    CLIENTS = 800

    def test_status_of_many_clients_arrives_whole(self):
        """With 800 clients the report is several times the control
        protocol's message limit: `uroce status` still prints every client
        line and the client count, page by page."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        needed = 2 * self.CLIENTS + 256
        if hard < needed:
            self.skipTest("the hard descriptor limit %d is below %d" % (hard, needed))
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        clients = []
        try:
            for _ in range(self.CLIENTS):
                client = self.daemon.raw_client()
                clients.append(client)
                reply = client.hello("uroce0")
                self.assertEqual(reply.error, 0, reply.message)
            result = self.uroce("status")
            self.assert_exit(result, 0)
            self.assertGreater(len(result.stdout), harness.MAX_MESSAGE)
            lines = [line for line in result.stdout.split("\n")
                     if line.startswith("client pid %d " % os.getpid())]
            self.assertEqual(len(lines), self.CLIENTS)
            self.assertIn("\nclients %d\n" % self.CLIENTS, result.stdout)
        finally:
            for client in clients:
                client.close()


class StatsTest(ObservabilityTestCase):

    def test_stats_lists_every_counter_of_every_device_in_order(self):
        """`uroce stats`: per device its status header line, then one
        `  name value` line per counter of stats.h, in the header's order."""
        result = self.uroce("stats")
        self.assert_exit(result, 0)
        stats = harness.parse_stats(result.stdout)
        self.assertEqual(list(stats), list(harness.DEFAULT_DEVICES))
        for device, counters in stats.items():
            self.assertEqual(list(counters), harness.counter_names(), device)
        status_headers = [line for line in self.daemon.status().text.split("\n")
                          if line.startswith("device ")]
        self.assertEqual([line for line in result.stdout.split("\n")
                          if line.startswith("device ")], status_headers)

    def test_stats_of_one_device(self):
        result = self.uroce("stats", "uroce1")
        self.assert_exit(result, 0)
        stats = harness.parse_stats(result.stdout)
        self.assertEqual(list(stats), ["uroce1"])
        self.assertEqual(list(stats["uroce1"]), harness.counter_names())

    def test_stats_of_an_unknown_device_is_enodev(self):
        self.assert_exit(self.uroce("stats", "nosuch"), EXIT_FAILURE, "no device named nosuch")
        self.assert_exit(self.uroce("stats", "x" * 100), EXIT_FAILURE, "no device named")
        self.assert_exit(self.uroce("stats", "uroce0", "uroce1"), EXIT_USAGE)
        with self.daemon.raw_client() as client:
            self.assert_refused(client.call(Op.STATS, harness.device_body("nosuch")),
                                errno.ENODEV, "nosuch")
            self.assert_refused(client.call(Op.STATS, b"\0" * 3), errno.EINVAL, "malformed")

    def test_stats_reply_is_fixed_size_text(self):
        with self.daemon.raw_client() as client:
            reply = client.call(Op.STATS, harness.device_body("uroce0"))
        self.assertEqual(reply.error, 0, reply.message)
        self.assertEqual(len(reply.body), harness.MAX_STATS_TEXT)
        self.assertIn(b"\0", reply.body)


class FaultTest(ObservabilityTestCase):

    def setUp(self):
        super().setUp()
        self.addCleanup(self.clear_faults)

    def clear_faults(self):
        with self.daemon.raw_client() as client:
            for device in harness.DEFAULT_DEVICES:
                client.call(Op.SET_FAULTS, harness.set_faults_body(device))

    def test_settings_show_in_status_and_clear_removes_them(self):
        result = self.uroce("fault", "uroce0", "--drop", "5%", "--duplicate", "0.01", "--reorder",
                            "2%", "--delay", "100")
        self.assert_exit(result, 0)
        self.assertEqual(self.faults_line("uroce0"),
                         "  faults drop 0.05 duplicate 0.01 reorder 0.02 delay 100us")
        self.assertIsNone(self.faults_line("uroce1"))

        # Options not given become 0.
        self.assert_exit(self.uroce("fault", "uroce0", "--drop", "1%"), 0)
        self.assertEqual(self.faults_line("uroce0"),
                         "  faults drop 0.01 duplicate 0 reorder 0 delay 0us")

        result = self.uroce("fault", "uroce0", "--clear")
        self.assert_exit(result, 0)
        self.assertIn("cleared", result.stdout)
        self.assertIsNone(self.faults_line("uroce0"))

        # All zero is no fault at all.
        self.assert_exit(self.uroce("fault", "uroce0", "--drop", "0", "--delay", "0"), 0)
        self.assertIsNone(self.faults_line("uroce0"))

    def test_boundaries_are_accepted(self):
        self.assert_exit(self.uroce("fault", "uroce1", "--drop", "100%", "--duplicate", "1",
                                    "--reorder", "0", "--delay", str(harness.MAX_FAULT_DELAY_US)),
                         0)
        self.assertEqual(self.faults_line("uroce1"),
                         "  faults drop 1 duplicate 1 reorder 0 delay %dus" %
                         harness.MAX_FAULT_DELAY_US)

    def test_invalid_settings_are_refused_and_change_nothing(self):
        with self.daemon.raw_client() as client:
            self.assertEqual(client.call(Op.SET_FAULTS,
                                         harness.set_faults_body("uroce0", drop=0.1)).error, 0)
            before = self.faults_line("uroce0")
            for settings, word in (
                    ({"drop": -0.01}, "drop"),
                    ({"drop": 1.0000001}, "drop"),
                    ({"drop": float("nan")}, "drop"),
                    ({"duplicate": float("inf")}, "duplicate"),
                    ({"duplicate": -1.0}, "duplicate"),
                    ({"reorder": float("nan")}, "reorder"),
                    ({"reorder": 2.0}, "reorder"),
                    ({"delay_us": -1}, "delay"),
                    ({"delay_us": harness.MAX_FAULT_DELAY_US + 1}, "delay"),
                    ({"delay_us": 1 << 62}, "delay")):
                with self.subTest(settings=settings):
                    reply = client.call(Op.SET_FAULTS,
                                        harness.set_faults_body("uroce0", **settings))
                    self.assert_refused(reply, errno.EINVAL, word)
                    self.assertEqual(self.faults_line("uroce0"), before)
            self.assert_refused(
                client.call(Op.SET_FAULTS, harness.set_faults_body("nosuch", drop=0.5)),
                errno.ENODEV, "nosuch")
            self.assert_refused(client.call(Op.SET_FAULTS, harness.device_body("uroce0")),
                                errno.EINVAL, "malformed")
            self.assertEqual(self.faults_line("uroce0"), before)

    def test_refusals_through_the_tool(self):
        for args, word in ((["--drop", "150%"], "not between 0 and 1"),
                           (["--drop", "nan"], "not between 0 and 1"),
                           (["--reorder", "-0.5"], "not between 0 and 1"),
                           (["--delay", "-5"], "delay"),
                           (["--delay", str(harness.MAX_FAULT_DELAY_US + 1)], "delay")):
            with self.subTest(args=args):
                self.assert_exit(self.uroce("fault", "uroce0", *args), EXIT_FAILURE, word)
        self.assert_exit(self.uroce("fault", "nosuch", "--drop", "1%"), EXIT_FAILURE,
                         "no device named nosuch")
        self.assertIsNone(self.faults_line("uroce0"))

    def test_usage_errors(self):
        for args in ([], ["uroce0"], ["--drop", "1%"], ["uroce0", "--drop"],
                     ["uroce0", "--drop", "abc"], ["uroce0", "--drop", "5%%"],
                     ["uroce0", "--delay", "1.5"], ["uroce0", "--delay", "99999999999999999999"],
                     ["uroce0", "--clear", "--drop", "1%"], ["uroce0", "--bogus", "1"]):
            with self.subTest(args=args):
                self.assert_exit(self.uroce("fault", *args), EXIT_USAGE, "usage:")

    def test_changes_are_logged_with_the_clients_pid(self):
        with self.daemon.raw_client() as client:
            client.call(Op.SET_FAULTS, harness.set_faults_body("uroce1", drop=0.5, delay_us=7))
            client.call(Op.SET_FAULTS, harness.set_faults_body("uroce1"))
        pid = os.getpid()
        self.assert_log_has(r"client pid %d set faults on uroce1: drop 0.5 duplicate 0 "
                            r"reorder 0 delay 7us" % pid)
        self.assert_log_has(r"client pid %d cleared the faults on uroce1" % pid)


class TraceTest(ObservabilityTestCase):

    def open_for_writing(self, name):
        return os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def start_trace(self, client, device, name):
        fd = self.open_for_writing(name)
        try:
            return client.call(Op.TRACE_START, harness.trace_start_body(device), fds=[fd])
        finally:
            os.close(fd)

    def assert_pcap_header_only(self, path):
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), PCAP_GLOBAL_HEADER.size)
        magic, major, minor, _, _, _, linktype = PCAP_GLOBAL_HEADER.unpack(data)
        self.assertEqual((magic, major, minor, linktype), (PCAP_MAGIC, 2, 4, LINKTYPE_ETHERNET))

    def test_trace_start_refusals(self):
        body = harness.device_body("uroce0")
        start = harness.trace_start_body("uroce0")
        with self.daemon.raw_client() as client:
            self.assert_refused(client.call(Op.TRACE_START, start), errno.EBADF,
                                "carries 0 file descriptors, not 1")
            both = harness.trace_start_body("uroce0", harness.TRACE_PACKETS | harness.TRACE_FAULTS)
            fd = self.open_for_writing("one.pcap")
            try:
                self.assert_refused(client.call(Op.TRACE_START, both, fds=[fd]), errno.EBADF,
                                    "carries 1 file descriptors, not 2")
                for files in (0, 4, 7):
                    self.assert_refused(
                        client.call(Op.TRACE_START, harness.trace_start_body("uroce0", files),
                                    fds=[fd]), errno.EINVAL, "are not packets (1), faults (2)")
            finally:
                os.close(fd)
            read_only = os.open(self.path("ro.pcap"), os.O_RDONLY | os.O_CREAT, 0o644)
            try:
                self.assert_refused(client.call(Op.TRACE_START, start, fds=[read_only]),
                                    errno.EBADF, "trace file for uroce0 is not open for writing")
                faults = harness.trace_start_body("uroce0", harness.TRACE_FAULTS)
                self.assert_refused(client.call(Op.TRACE_START, faults, fds=[read_only]),
                                    errno.EBADF, "fault record file for uroce0 is not open")
            finally:
                os.close(read_only)
            read_end, write_end = os.pipe()
            try:
                self.assert_refused(client.call(Op.TRACE_START, start, fds=[write_end]),
                                    errno.EINVAL, "not a regular file")
            finally:
                os.close(read_end)
                os.close(write_end)
            self.assert_refused(self.start_trace(client, "nosuch", "n.pcap"), errno.ENODEV,
                                "nosuch")
            self.assert_refused(client.call(Op.TRACE_START, b"\0" * 5), errno.EINVAL,
                                "malformed")
            for op in (Op.TRACE_STOP, Op.TRACE_QUERY):
                self.assert_refused(client.call(op, body), errno.EINVAL,
                                    "uroce0 is not being traced")
                self.assert_refused(client.call(op, harness.device_body("nosuch")),
                                    errno.ENODEV, "nosuch")
        self.assertFalse(any(line.startswith("  trac") for line in self.device_lines("uroce0")))

    def test_one_trace_per_device_and_only_its_owner_stops_it(self):
        body = harness.device_body("uroce0")
        path = os.path.realpath(self.path("a.pcap"))
        with self.daemon.raw_client() as owner, self.daemon.raw_client() as other:
            self.assertEqual(self.start_trace(owner, "uroce0", "a.pcap").error, 0)
            self.assert_pcap_header_only(path)
            self.assertIn("  tracing (0 packets) to %s for client pid %d" % (path, os.getpid()),
                          self.device_lines("uroce0"))

            self.assert_refused(self.start_trace(other, "uroce0", "b.pcap"), errno.EBUSY,
                                "already being traced", path)
            self.assert_refused(self.start_trace(owner, "uroce0", "b.pcap"), errno.EBUSY)
            # Another device traces independently.
            self.assertEqual(self.start_trace(other, "uroce1", "c.pcap").error, 0)
            self.assertEqual(other.call(Op.TRACE_STOP, harness.device_body("uroce1")).error, 0)

            reply = other.call(Op.TRACE_QUERY, body)
            self.assertEqual(reply.error, 0, reply.message)
            self.assertEqual(read_trace_reply(reply), (0, 0))
            self.assert_refused(other.call(Op.TRACE_STOP, body), errno.EPERM,
                                "belongs to client pid %d" % os.getpid())

            reply = owner.call(Op.TRACE_STOP, body)
            self.assertEqual(reply.error, 0, reply.message)
            self.assertEqual(read_trace_reply(reply), (0, 0))
            self.assert_refused(owner.call(Op.TRACE_STOP, body), errno.EINVAL,
                                "not being traced")
        self.assertFalse(any(line.startswith("  trac") for line in self.device_lines("uroce0")))
        self.assert_log_has(r"client pid %d started tracing uroce0 to %s" %
                            (os.getpid(), re.escape(path)))
        self.assert_log_has(r"client pid %d stopped tracing uroce0: 0 packets recorded to %s" %
                            (os.getpid(), re.escape(path)))

    def test_trace_stops_when_its_connection_closes(self):
        owner = self.daemon.raw_client()
        try:
            self.assertEqual(self.start_trace(owner, "uroce1", "gone.pcap").error, 0)
            self.wait_for_tracing("uroce1")
        finally:
            owner.close()
        self.wait_for_tracing("uroce1", False)
        self.assert_log_has(r"client pid %d disconnected: stopped tracing uroce1" % os.getpid())
        with self.daemon.raw_client() as client:
            self.assertEqual(self.start_trace(client, "uroce1", "again.pcap").error, 0)
            self.assertEqual(client.call(Op.TRACE_STOP, harness.device_body("uroce1")).error, 0)

    def test_uroce_trace_stops_on_sigint_and_sigterm(self):
        umask = os.umask(0)
        os.umask(umask)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                path = self.path("%s.pcap" % sig.name)
                trace = self.uroce_popen("trace", "uroce0", "--pcap", path)
                try:
                    self.wait_for_tracing("uroce0")
                    trace.send_signal(sig)
                    out, err = trace.communicate(timeout=10)
                finally:
                    if trace.poll() is None:
                        trace.kill()
                        trace.communicate()
                self.assertEqual(trace.returncode, 0, out + err)
                self.assertEqual(out, "0 packets recorded to %s\n" % path)
                self.assertIn("tracing uroce0 to %s" % path, err)
                self.assert_pcap_header_only(path)
                self.assertEqual(os.stat(path).st_mode & 0o777, 0o644 & ~umask)
                self.wait_for_tracing("uroce0", False)

    def test_uroce_trace_for_some_seconds(self):
        path = self.path("timed.pcap")
        began = time.monotonic()
        result = self.uroce("trace", "uroce1", "--pcap", path, "--seconds", "0.5")
        elapsed = time.monotonic() - began
        self.assert_exit(result, 0)
        self.assertEqual(result.stdout, "0 packets recorded to %s\n" % path)
        self.assertGreaterEqual(elapsed, 0.5)
        self.assertLess(elapsed, 5)
        self.assert_pcap_header_only(path)
        self.wait_for_tracing("uroce1", False)

    def test_killed_uroce_trace_leaves_no_trace_running(self):
        trace = self.uroce_popen("trace", "uroce0", "--pcap", self.path("killed.pcap"))
        try:
            self.wait_for_tracing("uroce0")
        finally:
            trace.kill()
            trace.communicate()
        self.wait_for_tracing("uroce0", False)
        result = self.uroce("trace", "uroce0", "--pcap", self.path("next.pcap"), "--seconds",
                            "0.1")
        self.assert_exit(result, 0)

    def test_refusals_and_usage_errors_through_the_tool(self):
        with self.daemon.raw_client() as owner:
            self.assertEqual(self.start_trace(owner, "uroce0", "held.pcap").error, 0)
            busy = self.path("busy.pcap")
            self.assert_exit(self.uroce("trace", "uroce0", "--pcap", busy, "--seconds", "1"),
                             EXIT_FAILURE, "already being traced")
            self.assertFalse(os.path.exists(busy), "a refused trace leaves no file behind")
        missing = self.path("nosuch.pcap")
        self.assert_exit(self.uroce("trace", "nosuch", "--pcap", missing), EXIT_FAILURE,
                         "no device named nosuch")
        self.assertFalse(os.path.exists(missing))
        self.assert_exit(self.uroce("trace", "uroce0", "--pcap",
                                    self.path("no/such/dir.pcap")), EXIT_FAILURE, "cannot open")
        pcap = self.path("u.pcap")
        for args in ([], ["--pcap", pcap], ["uroce0"], ["uroce0", "--pcap"],
                     ["uroce0", "--pcap", pcap, "--count", "0"],
                     ["uroce0", "--pcap", pcap, "--count", "-3"],
                     ["uroce0", "--pcap", pcap, "--count", "x"],
                     ["uroce0", "--pcap", pcap, "--seconds", "0"],
                     ["uroce0", "--pcap", pcap, "--seconds", "-1"],
                     ["uroce0", "--pcap", pcap, "--seconds", "inf"],
                     ["uroce0", "--pcap", pcap, "--bogus", "1"]):
            with self.subTest(args=args):
                self.assert_exit(self.uroce("trace", *args), EXIT_USAGE, "usage:")
        self.assertFalse(os.path.exists(pcap))


class NotRunningTest(unittest.TestCase):
    """Without a daemon the commands exit 3 with the usual hint."""

    def test_commands_say_the_daemon_is_not_running(self):
        tool = require_tool(self)
        base = tempfile.mkdtemp(prefix="uroce-obs-")
        self.addCleanup(shutil.rmtree, base, True)
        env = harness.tool_environment(os.path.join(base, "run"))
        pcap = os.path.join(base, "t.pcap")
        for args in (["stats"], ["stats", "uroce0"], ["fault", "uroce0", "--drop", "1%"],
                     ["trace", "uroce0", "--pcap", pcap]):
            with self.subTest(args=args):
                result = harness.run_program([tool, *args], env=env)
                self.assertEqual(result.returncode, EXIT_NOT_RUNNING,
                                 result.stdout + result.stderr)
                self.assertIn("uroce start", result.stderr)
        self.assertFalse(os.path.exists(pcap))


class PingpongTestCase(ObservabilityTestCase):
    """Real RC traffic from ibv_rc_pingpong between uroce0 (server) and
    uroce1 (client), and what records it."""

    def udp_port(self):
        return int(self.daemon.args[self.daemon.args.index("--udp-port") + 1])

    def pingpong(self, iters, timeout):
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", iters, 64,
                                              timeout=timeout, log=self.daemon.log)
        for side in (server, client):
            self.assertEqual(side.returncode, 0, "ibv_rc_pingpong on %s failed:\n%s\n%s" % (
                side.device, side.output, self.daemon.log()))
            self.assertIsNotNone(side.qpn, side.output)
        return server, client

    def send_lat(self, program, iters, size, timeout):
        """ib_send_lat from uroce1 to uroce0; both sides must succeed."""
        port = harness.free_tcp_port()
        common = ["-x", "0", "-n", str(iters), "-s", str(size), "-p", str(port)]
        pair = harness.run_server_client(self.daemon.env(), [program, "-d", "uroce0", *common],
                                         [program, "-d", "uroce1", *common, "127.0.0.1"], port,
                                         timeout=timeout, log=self.daemon.log)
        for device, side in zip(("uroce0", "uroce1"), pair):
            self.assertEqual(side.returncode, 0, "ib_send_lat on %s failed:\n%s\n%s" % (
                device, side.output, self.daemon.log()))

    def read_trace(self, path):
        """The packets of a trace as tshark decodes them. RoCEv2 is the
        InfiniBand dissector on UDP; this daemon's port is not 4791."""
        tshark = shutil.which("tshark")
        if not tshark:
            self.fail("tshark is not installed (tools/install-deps installs it)")
        fields = [arg for field in TSHARK_FIELDS for arg in ("-e", field)]
        result = harness.run_program(
            [tshark, "-r", path, "-d", "udp.port==%d,infiniband" % self.udp_port(),
             "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f", *fields],
            env=dict(os.environ, HOME=self.scratch))
        self.assertEqual(result.returncode, 0, result.stderr)
        packets = []
        for line in result.stdout.splitlines():
            values = line.split("\t")
            self.assertEqual(len(values), len(TSHARK_FIELDS), line)
            numbers = [int(v, 0) if v else None for v in values[3:]]
            packets.append(Packet(values[0], values[1], values[2], *numbers))
        return packets

    def wait_for_exit(self, proc, timeout=10):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.fail("uroce trace did not end:\n%s%s\n%s" % (out, err, self.daemon.log()))
        self.assertEqual(proc.returncode, 0, out + err + self.daemon.log())
        m = re.fullmatch(r"(\d+) packets recorded to (.+)\n", out)
        self.assertIsNotNone(m, out)
        return int(m.group(1))

    def capture_on_lo(self, pcap):
        """tcpdump on lo, as a student runs it, for this daemon's UDP port;
        returns once it listens."""
        tcpdump = shutil.which("tcpdump")
        if not tcpdump:
            self.fail("tcpdump is not installed (tools/install-deps installs it)")
        proc = subprocess.Popen(
            [tcpdump, "-i", "lo", "-n", "-U", "-w", pcap, "udp port %d" % self.udp_port()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.communicate()))
        ready, _, _ = select.select([proc.stderr], [], [], 10)
        line = proc.stderr.readline() if ready else ""
        if "listening on lo" not in line:
            proc.kill()
            self.fail("tcpdump -i lo did not start: %s%s" % (line, proc.communicate()[1]))
        return proc

    def capture_of_pingpong(self, iters):
        """The packets tcpdump on lo saw while ibv_rc_pingpong ran, and the
        two sides of the pingpong."""
        pcap = self.path("lo.pcap")
        tcpdump = self.capture_on_lo(pcap)
        server, client = self.pingpong(iters, timeout=30)
        # tcpdump gets the kernel's packets in blocks, the last one after its
        # buffer timeout (a second), and stops at SIGINT without taking what
        # is still queued: the file has to stay the same size for longer.
        size, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < 1.5:
            time.sleep(0.05)
            if os.path.getsize(pcap) != size:
                size, still_since = os.path.getsize(pcap), time.monotonic()
        tcpdump.send_signal(signal.SIGINT)
        _, err = tcpdump.communicate(timeout=10)
        self.assertEqual(tcpdump.returncode, 0, err)
        return self.read_trace(pcap), server, client


class TrafficTest(PingpongTestCase):
    """Real RC traffic between the daemon's devices, which pass it in memory."""

    def test_tcpdump_on_lo_sees_nothing_between_the_devices(self):
        """By default packets between the daemon's own devices pass in
        memory: tcpdump on lo sees none of a pingpong's (which is why the
        labs tell students about --no-shortcut: LoopbackCaptureTest)."""
        packets, _, _ = self.capture_of_pingpong(5)
        self.assertEqual(packets, [])

    def test_trace_of_pingpong_is_decoded_as_roce(self):
        """uroce0 traced until Ctrl-C and uroce1 for 4 packets while
        ibv_rc_pingpong runs: tshark decodes every packet as InfiniBand over
        UDP; the sends are RC SEND ONLY to the peer's QPN with consecutive
        PSNs from the initial PSN pingpong printed, and the ACKs carry ACK
        syndromes with the message sequence numbers."""
        iters = 5
        # A QP held on uroce1 gives pingpong's QPs different numbers on the
        # two devices, so that the trace shows which one a packet is for.
        if not harness.pyverbs_available():
            self.fail("%s has no pyverbs (tools/install-deps installs python3-pyverbs)" %
                      harness.PYTHON)
        holder = harness.VerbsClient(self.daemon)
        self.addCleanup(holder.close)
        for command in (("open", "uroce1"), ("pd",), ("cq",), ("qp",)):
            holder.must(*command)
        whole, first = self.path("uroce0.pcap"), self.path("uroce1.pcap")
        trace0 = self.uroce_popen("trace", "uroce0", "--pcap", whole)
        trace1 = self.uroce_popen("trace", "uroce1", "--pcap", first, "--count", "4")
        try:
            self.wait_for_tracing("uroce0")
            self.wait_for_tracing("uroce1")
            server, client = self.pingpong(iters, timeout=30)
            self.assertNotEqual(server.qpn, client.qpn)
            recorded1 = self.wait_for_exit(trace1)
            trace0.send_signal(signal.SIGINT)
            recorded0 = self.wait_for_exit(trace0)
        finally:
            for proc in (trace0, trace1):
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()

        first_packets = self.read_trace(first)
        self.assertGreaterEqual(recorded1, 4)
        self.assertEqual(len(first_packets), recorded1)

        packets = self.read_trace(whole)
        self.assertEqual(len(packets), recorded0)
        for packet in packets + first_packets:
            self.assertIn("infiniband", packet.protocols.split(":"), packet)
            self.assertEqual(packet.port, self.udp_port(), packet)

        address = harness.DEFAULT_DEVICES
        seen = 0
        for requester, responder in ((server, client), (client, server)):
            with self.subTest(requester=requester.device):
                src, dst = address[requester.device], address[responder.device]
                requests = [p for p in packets if (p.src, p.dst) == (src, dst)]
                acks = [p for p in packets if (p.src, p.dst) == (dst, src)
                        and p.opcode == RC_ACKNOWLEDGE]
                psns = [(requester.psn + i) % PSN_SPACE for i in range(iters)]
                self.assertEqual([(p.opcode, p.destqp, p.psn) for p in requests
                                  if p.opcode != RC_ACKNOWLEDGE],
                                 [(RC_SEND_ONLY, responder.qpn, psn) for psn in psns])
                self.assertTrue(acks, "no ACK for %s's sends" % requester.device)
                for ack in acks:
                    self.assertEqual(ack.destqp, requester.qpn, ack)
                    self.assertEqual(ack.aeth, AETH_OPCODE_ACK, ack)
                    self.assertIn(ack.psn, psns, ack)
                    # One message per packet: the MSN counts them from 1.
                    self.assertEqual(ack.msn, psns.index(ack.psn) + 1, ack)
                self.assertEqual(acks[-1].psn, psns[-1], "the last send is acknowledged")
                seen += iters + len(acks)
        self.assertEqual(seen, len(packets), "only pingpong's packets are in the trace")

    def test_traffic_recovers_from_injected_faults(self):
        """With 5% loss, 2% duplication and 2% reordering on uroce0's
        packets, 200 round trips of ib_send_lat complete: lost packets are
        retransmitted and duplicates answered without being executed again.
        (Not ibv_rc_pingpong: it destroys its QP without a final handshake,
        so a lost last ACK legitimately fails its peer, as on any RDMA NIC;
        perftest synchronises over TCP before tearing down.)"""
        program = harness.require_program("ib_send_lat")
        before = self.stats()
        result = self.uroce("fault", "uroce0", "--drop", "5%", "--duplicate", "2%", "--reorder",
                            "2%")
        self.addCleanup(self.uroce, "fault", "uroce0", "--clear")
        self.assert_exit(result, 0)
        self.send_lat(program, 200, 64, timeout=90)
        after = self.stats()

        def grew(device, counter):
            return after[device][counter] - before[device][counter]

        devices = list(harness.DEFAULT_DEVICES)
        self.assertGreater(grew("uroce0", "fault_dropped"), 0, after)
        self.assertGreater(sum(grew(d, "retransmit_timeouts") + grew(d, "rcvd_seq_err")
                               for d in devices), 0, after)
        self.assertGreater(sum(grew(d, "duplicate_request") for d in devices), 0, after)
        self.assertEqual(sum(grew(d, "retry_exceeded_err") for d in devices), 0, after)

    def test_memory_returns_after_faults(self):
        """Every injected duplicate is one more packet buffer for a moment:
        after thousands of them the daemon's memory is back near where it
        started (its pools are bounded), not grown by each duplicate."""
        program = harness.require_program("ib_send_lat")
        for device in harness.DEFAULT_DEVICES:
            self.assert_exit(self.uroce("fault", device, "--duplicate", "50%"), 0)
            self.addCleanup(self.uroce, "fault", device, "--clear")
        before_stats = self.stats()
        before = self.daemon.rss()
        self.send_lat(program, 5000, 4096, timeout=120)
        after_stats = self.stats()
        duplicated = sum(after_stats[d]["fault_duplicated"] - before_stats[d]["fault_duplicated"]
                         for d in harness.DEFAULT_DEVICES)
        self.assertGreater(duplicated, 4000, after_stats)
        grown = self.daemon.rss() - before
        self.assertLess(grown, (8 << 20) + harness.SANITIZER_MEMORY_SLACK,
                        "the daemon grew by %d bytes over %d duplicates" % (grown, duplicated))


class LoopbackCaptureTest(PingpongTestCase):
    """uroced --no-shortcut: packets between the daemon's own devices cross
    their UDP sockets on lo, where tcpdump sees them (docs/labs/README.md)."""

    daemon_args = ("--no-shortcut",)

    def test_tcpdump_on_lo_sees_the_pingpong(self):
        """Every packet tcpdump on lo caught decodes as InfiniBand (RoCEv2),
        and each side's messages are there: RC SEND ONLY packets from its
        address to the other's, for the other side's QP, one per iteration
        at least, and ACKs back."""
        iters = 5
        packets, server, client = self.capture_of_pingpong(iters)
        address = harness.DEFAULT_DEVICES
        for packet in packets:
            self.assertIn("infiniband", packet.protocols.split(":"), packet)
        for sender, receiver in ((server, client), (client, server)):
            with self.subTest(sender=sender.device):
                src, dst = address[sender.device], address[receiver.device]
                sends = [p for p in packets if p.opcode == RC_SEND_ONLY and p.src == src
                         and p.dst == dst and p.destqp == receiver.qpn]
                self.assertGreaterEqual(len(sends), iters, packets)
                acks = [p for p in packets if p.opcode == RC_ACKNOWLEDGE and p.src == dst
                        and p.dst == src and p.destqp == sender.qpn]
                self.assertGreater(len(acks), 0, packets)


if __name__ == "__main__":
    unittest.main()
