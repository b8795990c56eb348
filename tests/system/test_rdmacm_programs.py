"""Acceptance: the unmodified librdmacm programs of rdma-core (rdmacm-utils)
and perftest's rdma_cm mode connect through uroce's connection manager, as
a user runs them in `uroce exec`:

- rdmacm-utils between uroce0 and uroce1 (the server on 127.0.0.2, the
  client's source chosen by the routing table: 127.0.0.1), and from each
  device to itself (uroce0 on 127.0.0.1; uroce1 given 127.0.0.1 by a daemon
  that swaps the two addresses);
- rping -C 1000 -V (RC SEND, READ and WRITE, every ping's data checked),
  ucmatose -c 10 -C 100, udaddy (UD through SIDR), mckey (a multicast group
  joined, sent to and received from), rdma_server/rdma_client,
  rdma_xserver/rdma_xclient, rstream and riostream (rsockets: blocking,
  nonblocking and data-verifying -T modes), cmtime;
- perftest -R: ib_{send,write,read,atomic}_bw, ib_{send,write}_lat over RC
  and ib_send_{bw,lat} over UD; qperf -cm1 rc_bw, rc_lat, rc_rdma_write_bw,
  rc_rdma_read_bw;
- libfabric's verbs provider: fi_info lists verbs;ofi_rxm on uroce0, and
  fi_pingpong -c passes over FI_EP_MSG, FI_EP_RDM (ofi_rxm) and FI_EP_DGRAM
  (between uroce1 and uroce0). For MSG and RDM, fi_pingpong's server binds
  "localhost" (it has no address option), as libfabric's verbs provider
  does when given no node: 127.0.0.1, uroce0. Both ends are on uroce0;
- rsockets' librspreload.so under iperf 2, an unmodified TCP program,
  between uroce0's address and uroce1's.

Each client starts once its server's ID listens (the daemon's status lists
it), each exits 0 and each program's own data checks pass.
"""

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from programs import DaemonPerTest, diagnostics, elapsed, require

SERVER_ADDRESS = "127.0.0.2"  # uroce1
PAIR_TIMEOUT = 120.0
# udaddy and mckey have no port option. Ports are the daemon's, not the
# kernel's, so a fixed one never meets another test's.
RDMACM_UTILS_PORT = 7174


class RdmaCmCase(DaemonPerTest):
    """A private daemon per test; a server and its client per test."""

    def cm_lines(self):
        return [line for line in self.daemon.status().text.split("\n")
                if line.startswith("  cm id ") or line.startswith("    multicast ")]

    def wait_listening(self, server, port, what="listen"):
        """Until an ID of the server listens on `port` (or, for mckey, has
        joined its group)."""
        if what == "tcp":
            # A TCP control connection comes first (qperf, fi_pingpong).
            ready = lambda: harness.tcp_port_listening(port)
        else:
            pattern = {
                "listen": re.compile(r"^  cm id \d+ pid %d \w+ listen \S+:%d " %
                                     (server.pid, port)),
                "joined": re.compile(r"^    multicast "),
            }[what]
            ready = lambda: any(pattern.match(line) for line in self.cm_lines())
        harness.wait_for(lambda: server.poll() is not None or ready(), 15.0,
                         "the server to %s on port %d" % (what, port),
                         lambda: diagnostics(self.daemon))

    def run_pair(self, server_args, client_args, port, wait="listen", server_exits=True,
                 env=None, timeout=PAIR_TIMEOUT):
        """Runs the server, then (once it listens) the client; returns their
        standard outputs (what the programs' checks print; stderr comes in
        the failure context) after checking both exit 0. A server that
        serves forever (cmtime) is stopped once its client is done."""
        env = env or self.daemon.env()
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            server = subprocess.Popen([require(server_args[0]), *server_args[1:]],
                                      stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                      text=True, env=env)
            try:
                self.wait_listening(server, port, wait)
                client = harness.run_program([require(client_args[0]), *client_args[1:]], env,
                                             timeout=timeout,
                                             log=lambda: diagnostics(self.daemon))
                if client.returncode != 0:
                    server.terminate()  # it would wait for the client for ever
                    server.wait(timeout=10)
                elif server_exits:
                    try:
                        server.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        raise AssertionError(
                            "%s did not finish in %.0f s after its client\n"
                            "--- client, exit %d\n%s%s\n%s" % (
                                server_args, timeout, client.returncode, client.stdout,
                                client.stderr, diagnostics(self.daemon)))
                else:
                    server.terminate()
                    server.wait(timeout=10)
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
            out.seek(0)
            err.seek(0)
            server_output, server_errors = out.read(), err.read()
        elapsed("%s / %s" % (" ".join(server_args), " ".join(client_args)),
                time.monotonic() - started)
        context = "\n--- server %s, exit %s\n%s%s\n--- client %s, exit %d\n%s%s\n%s" % (
            server_args, server.returncode, server_output, server_errors, client_args,
            client.returncode, client.stdout, client.stderr, diagnostics(self.daemon))
        if server_exits:
            self.assertEqual(server.returncode, 0, context)
        self.assertEqual(client.returncode, 0, context)
        return server_output, client.stdout, context

class RdmacmUtilsCases:
    """rdmacm-utils, the server on server_address; the client's source is
    chosen by the routing table (127.0.0.1), or client_address where the
    program binds one (mckey's sender)."""

    server_address = SERVER_ADDRESS
    client_address = "127.0.0.1"

    def test_rping(self):
        count = 1000
        for attempt in range(3):
            port = harness.free_tcp_port()
            common = ["-a", self.server_address, "-p", str(port), "-C", str(count), "-V", "-v"]
            try:
                server, client, context = self.run_pair(["rping", "-s", *common],
                                                        ["rping", "-c", *common], port)
                break
            except AssertionError as failure:
                if attempt == 2 or not harness.rping_lost_its_exit_race(str(failure), count):
                    raise
                sys.stderr.write("rping: its client's CM thread lost the race to its exit; "
                                 "once more\n")
        # -v prints every ping each side saw, -V checks its bytes: a
        # mismatch would end rping with an error.
        for side, prefix in ((client, "ping data: "), (server, "server ping data: ")):
            pings = re.findall(r"^%srdma-ping-(\d+): " % prefix, side, re.M)
            self.assertEqual([int(n) for n in pings], list(range(count)), context)

    def test_ucmatose(self):
        address = self.server_address
        port = harness.free_tcp_port()
        args = ["-p", str(port), "-c", "10", "-C", "100"]
        server, client, context = self.run_pair(["ucmatose", "-b", address, *args],
                                                ["ucmatose", "-s", address, *args], port)
        for side in (server, client):
            self.assertIn("data transfers complete", side, context)
            self.assertIn("test complete", side, context)
            self.assertNotIn("failed", side, context)

    def test_udaddy(self):
        address = self.server_address
        server, client, context = self.run_pair(
            ["udaddy", "-b", address, "-c", "4", "-C", "20"],
            ["udaddy", "-s", address, "-c", "4", "-C", "20"], RDMACM_UTILS_PORT)
        for side in (server, client):
            self.assertIn("data transfers complete", side, context)
            self.assertIn("test complete", side, context)

    def test_mckey(self):
        group = "239.1.2.3"
        receiver, sender, context = self.run_pair(
            ["mckey", "-m", group, "-b", self.server_address, "-C", "50"],
            ["mckey", "-m", group, "-b", self.client_address, "-C", "50", "-s"], RDMACM_UTILS_PORT,
            wait="joined")
        for side in (receiver, sender):
            self.assertIn("joined dgid: ::ffff:%s" % group, side, context)
            self.assertIn("data transfers complete", side, context)
        self.assertIn("receiving data transfers", receiver, context)

    def test_rdma_server_client(self):
        port = harness.free_tcp_port()
        server, client, context = self.run_pair(["rdma_server", "-p", str(port)],
                                                ["rdma_client", "-s", self.server_address, "-p",
                                                 str(port)], port)
        self.assertIn("rdma_server: end 0", server, context)
        self.assertIn("rdma_client: end 0", client, context)

    def test_rdma_xserver_xclient(self):
        port = harness.free_tcp_port()
        server, client, context = self.run_pair(["rdma_xserver", "-p", str(port)],
                                                ["rdma_xclient", "-s", self.server_address, "-p",
                                                 str(port)], port)
        self.assertIn("rdma_xserver: end 0", server, context)
        self.assertIn("rdma_xclient: end 0", client, context)

    def stream(self, program, *modes, timeout=PAIR_TIMEOUT):
        port = harness.free_tcp_port()
        server, client, context = self.run_pair(
            [program, "-b", self.server_address, "-p", str(port), *modes],
            [program, "-s", self.server_address, "-p", str(port), *modes], port,
            timeout=timeout)
        # The result table: one line per transfer size, nothing failed.
        rows = re.findall(r"^(\w+)\s+\S+\s+\S+\s+\d+\s+\S+\s+[\d.]+s\s+[\d.]+\s+[\d.]+$", client,
                          re.M)
        self.assertGreater(len(rows), 0, context)

    def test_rstream_verify(self):
        self.stream("rstream", "-T", "v", "-S", "65536", "-C", "1000")

    def test_rstream_nonblocking_verify(self):
        self.stream("rstream", "-T", "n", "-T", "v", "-S", "65536", "-C", "1000")

    # Not -T a: rstream's async client takes POLLHUP for an error even with
    # POLLIN, so when the server's disconnect reaches it together with the
    # last data (the server closes once its last send is posted), it fails
    # after a complete transfer. A race of rstream's own, on any device.

    def test_riostream_verify(self):
        # RDMA writes through riomap'd buffers, every byte checked.
        self.stream("riostream", "-T", "v", "-S", "65536", "-C", "1000")

    def test_cmtime(self):
        port = harness.free_tcp_port()
        common = ["-p", str(port), "-c", "20"]
        usage = subprocess.run([require("cmtime"), "-h"], capture_output=True, text=True)
        if "controller_address" in usage.stdout + usage.stderr:
            # rdma-core v65: a controller synchronises the peers (the server
            # here, started first), -L makes a server; both exit.
            # -p is the controller's TCP port, what the client first needs.
            server = ["cmtime", "-C", self.server_address, "-b", self.server_address, "-L"]
            client = ["cmtime", "-C", self.server_address, "-b", self.client_address]
            server_exits, wait = True, "tcp"
        else:
            server = ["cmtime", "-b", self.server_address]
            client = ["cmtime", "-s", self.server_address]
            server_exits, wait = False, "listen"
        _, client, context = self.run_pair(server + common, client + common, port, wait=wait,
                                           server_exits=server_exits)
        # Each step timed: "connect   : ..." lines up to rdma-core v50, a
        # table of six numbers per step ("cm connect", "destroy id") after.
        for step, row in (("connect", "cm connect"), ("disconnect", "disconnect"),
                          ("destroy", "destroy id")):
            self.assertRegex(client, r"(?m)^(%s\s+:|%s(\s+\d+){6}\s*$)" % (step, row), context)


class RdmacmUtilsBetweenDevices(RdmacmUtilsCases, RdmaCmCase):
    """The server on uroce1 (127.0.0.2), the client on uroce0."""

    def test_rstream(self):
        # Its table of sizes in blocking calls, so here only: 100,000 64-byte
        # ping-pongs among them, each a sleep and a wake-up of both programs.
        # 8 s on a quiet machine, 28 s under ASan, and more than 120 s under
        # ASan beside another test on two cores (seen in CI): scheduling-bound.
        self.stream("rstream", timeout=400.0)


class RdmaCmOnAnMlx5GidLayout(RdmaCmCase):
    """uroced --gid-layout mlx5: the attributes rdma_cm gives (RC's
    rdma_init_qp_attr, UD's parameters) name the GID index programs see,
    the address's RoCE v2 entry (3), which the verbs then take."""

    daemon_args = ("--gid-layout", "mlx5")

    def test_ucmatose_and_udaddy(self):
        address = SERVER_ADDRESS
        port = harness.free_tcp_port()
        args = ["-p", str(port), "-c", "2", "-C", "10"]
        server, client, context = self.run_pair(["ucmatose", "-b", address, *args],
                                                ["ucmatose", "-s", address, *args], port)
        for side in (server, client):
            self.assertIn("test complete", side, context)
        server, client, context = self.run_pair(
            ["udaddy", "-b", address, "-c", "2", "-C", "10"],
            ["udaddy", "-s", address, "-c", "2", "-C", "10"], RDMACM_UTILS_PORT)
        for side in (server, client):
            self.assertIn("test complete", side, context)


class RdmacmUtilsOnUroce0(RdmacmUtilsCases, RdmaCmCase):
    """Server and client on uroce0 (127.0.0.1): a device to itself."""

    server_address = "127.0.0.1"


class RdmacmUtilsOnUroce1(RdmacmUtilsCases, RdmaCmCase):
    """Server and client on uroce1, given 127.0.0.1 here (and uroce0
    127.0.0.2): the other device to itself."""

    daemon_args = ("--device", "uroce0=127.0.0.2", "--device", "uroce1=127.0.0.1")
    server_address = "127.0.0.1"

    def setUp(self):
        super().setUp()
        self.assertIn("device uroce1 address 127.0.0.1", self.daemon.status().text)


class RdmaCmPrograms(RdmaCmCase):
    """perftest, qperf and libfabric between the devices; the daemon going
    away under its programs."""

    # --- perftest with rdma_cm ---------------------------------------------

    def until_no_race(self, races, what, run, attempts=5):
        """run(port) again while it fails with one of `races` (texts): a
        program's own race in which its client comes before its server
        listens, refused there as a kernel refuses it. Returns what run
        returns."""
        for attempt in range(attempts):
            try:
                return run(harness.free_tcp_port())
            except AssertionError as failure:
                if not any(race in str(failure) for race in races) or attempt == attempts - 1:
                    raise
                sys.stderr.write("%s: the client came before the listener; once more\n" % what)

    def perftest(self, program, *options):
        # perftest's client connects its test QP as soon as their control
        # connection is up, without waiting for the server's listener: one
        # that comes first is REJECTED (8, invalid service ID) or, over UD,
        # UNREACHABLE (1, IB_SIDR_UNSUPPORTED), and perftest 4.5-0.17's own
        # retry then crashes in librdmacm. On a loaded machine the client
        # wins that race most often: it runs at the lowest priority, so that
        # the server, once their handshake is done, gets to its listen first.
        def run(port):
            common = ["-R", "-x", "0", "-p", str(port), "-n", "100", *options]
            return self.run_pair([program, "-d", "uroce1", *common],
                                 ["nice", "-n", "19", require(program), "-d", "uroce0", *common,
                                  SERVER_ADDRESS], port)

        races = ("RDMA_CM_EVENT_REJECTED; error: 8.", "RDMA_CM_EVENT_UNREACHABLE; error: 1.")
        _, client, context = self.until_no_race(races, program, run)
        # The result row: its size and the iterations asked for.
        self.assertRegex(client, r"(?m)^\s*\d+\s+100\s+[\d.]+", context)

    def test_perftest_send_bw(self):
        self.perftest("ib_send_bw")

    def test_perftest_write_bw(self):
        self.perftest("ib_write_bw")

    def test_perftest_read_bw(self):
        self.perftest("ib_read_bw")

    def test_perftest_atomic_bw(self):
        self.perftest("ib_atomic_bw")

    def test_perftest_send_lat(self):
        self.perftest("ib_send_lat")

    def test_perftest_write_lat(self):
        self.perftest("ib_write_lat")

    def test_perftest_send_bw_ud(self):
        self.perftest("ib_send_bw", "-c", "UD")

    def test_perftest_send_lat_ud(self):
        self.perftest("ib_send_lat", "-c", "UD")

    def test_qperf_cm(self):
        # qperf's server tells its client the rdma_cm port before it listens
        # on it (cm_open_server): a client that comes first is rejected. So
        # one test per run, each run again while that race is lost.
        for test in ("rc_bw", "rc_lat", "rc_rdma_write_bw", "rc_rdma_read_bw"):
            def run(port):
                return self.run_pair(
                    ["qperf", "-lp", str(port)],
                    ["qperf", "-lp", str(port), "-cm1", "-t", "1", SERVER_ADDRESS, test], port,
                    wait="tcp", server_exits=False)

            _, client, context = self.until_no_race(("Event rejected",), "qperf " + test, run)
            # Its result: a bandwidth or a latency above zero.
            self.assertRegex(client, r"(?m)^%s:\n\s+(bw|latency)\s+=\s+[1-9][\d.]* " % test,
                             context)

    # --- libfabric's verbs provider ------------------------------------------

    def require_libfabric(self):
        """Skips when the installed libfabric cannot load with the rdma-core
        libraries in use: a distribution's libfabric is linked against its
        own rdma-core's, and refuses older ones (Debian 12's libfabric 1.17
        needs libefa's EFA_1.2 of v44; tools/test --rdma-core v39)."""
        probe = harness.run_program([require("fi_info"), "--version"], self.daemon.env())
        if probe.returncode != 0 and re.search(r"version `\S+' not found \(required by \S*libfabric",
                                               probe.stderr):
            self.skipTest("libfabric does not load with these rdma-core libraries: " +
                          probe.stderr.strip().splitlines()[0])

    def test_fi_info_lists_rxm_on_uroce(self):
        self.require_libfabric()
        info = harness.run_program([require("fi_info"), "-p", "verbs"], self.daemon.env(),
                                   log=lambda: diagnostics(self.daemon))
        context = info.stdout + info.stderr
        self.assertEqual(info.returncode, 0, context)
        entries = re.findall(r"provider: (\S+)\n\s+fabric: \S+\n\s+domain: (\S+)", info.stdout)
        self.assertIn(("verbs;ofi_rxm", "uroce0"), entries, context)
        self.assertIn(("verbs", "uroce0"), entries, context)
        self.assertIn(("verbs", "uroce0-dgram"), entries, context)

    def fi_pingpong(self, provider, endpoint, domains=((), (), "127.0.0.1")):
        """fi_pingpong -c; `domains`: the server's and the client's -d
        arguments and the server's address."""
        self.require_libfabric()
        common = ["-p", provider, "-e", endpoint, "-I", "50", "-c"]
        server_domain, client_domain, server_address = domains
        for attempt in range(2):
            port = harness.free_tcp_port()
            try:
                server, client, context = self.run_pair(
                    ["fi_pingpong", *common, *server_domain, "-B", str(port)],
                    ["fi_pingpong", *common, *client_domain, "-P", str(port), server_address],
                    port, wait="tcp")
                break
            except AssertionError as failure:
                # libfabric 1.17's ofi_rxm closes a connection's QP before
                # it polls the CQ for the last time (fixed upstream, in no
                # release yet; docs/middleware.md). When the peer's
                # disconnect comes first, after every transfer passed its
                # checks, a send whose completion was not read yet is
                # reported as flushed (as on mlx5, whose CQ forgets a
                # destroyed QP's completions; uroce does the same). One
                # more run; a second such ending fails.
                torn_down = "cq_readerr: Work Request Flushed Error" in str(failure)
                if not torn_down or attempt == 1:
                    raise
                sys.stderr.write("fi_pingpong: libfabric's teardown race; once more\n")
        # One result row per size; -c checked every byte of every transfer.
        rows = re.findall(r"(?m)^\S+\s+50\s+=50\s+", client)
        self.assertGreater(len(rows), 0, context)

    def test_fi_pingpong_msg(self):
        self.fi_pingpong("verbs", "msg")

    def test_fi_pingpong_rdm(self):
        self.fi_pingpong("verbs;ofi_rxm", "rdm")

    def test_fi_pingpong_dgram_between_devices(self):
        # DGRAM endpoints are addressed by GID and QPN, so each side names
        # its domain: the server on uroce1, the client on uroce0.
        self.fi_pingpong("verbs", "dgram",
                         (["-d", "uroce1-dgram"], ["-d", "uroce0-dgram"], SERVER_ADDRESS))

    # --- the daemon going away -----------------------------------------------

    def waiting_program(self):
        """pyverbs_scripts/rdma_cm_waiter.py, blocked in rdma_get_cm_event."""
        script = os.path.join(os.path.dirname(__file__), "pyverbs_scripts", "rdma_cm_waiter.py")
        program = subprocess.Popen([harness.PYTHON, script], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=self.daemon.env())
        self.addCleanup(lambda: program.poll() is None and program.kill())
        self.assertEqual(program.stdout.readline().strip(), "ready", diagnostics(self.daemon))
        return program

    def test_iperf_over_rsockets(self):
        """librspreload.so (librdmacm's rsockets) turns an unmodified TCP
        program's sockets into RDMA connections: iperf 2 from uroce0's
        address to a server bound to uroce1's. The server must count the
        client's bytes, and they must have crossed uroce (rsockets writes
        them with RDMA WRITE, at most 4096 bytes a packet)."""
        preloads = glob.glob("/usr/lib/*/rsocket/librspreload.so")
        self.assertTrue(preloads, "librspreload.so is not installed (librdmacm1)")
        env = self.daemon.env()
        env["LD_PRELOAD"] += ":" + preloads[0]
        port = harness.free_tcp_port()
        before = harness.parse_stats(self.daemon.stats_text())["uroce0"]["sent_pkts"]
        # -P 1: the server exits after one client. -y C: one CSV row each,
        # time,source,port,destination,port,id,interval,bytes,bits/s.
        server, client, context = self.run_pair(
            ["iperf", "-s", "-B", SERVER_ADDRESS, "-p", str(port), "-P", "1", "-y", "C"],
            ["iperf", "-c", SERVER_ADDRESS, "-B", "127.0.0.1", "-p", str(port), "-t", "2",
             "-y", "C"], port, env=env)
        after = harness.parse_stats(self.daemon.stats_text())["uroce0"]["sent_pkts"]
        sent = [row.split(",") for row in client.split()]
        received = [row.split(",") for row in server.split()]
        self.assertEqual(len(sent), 1, context)
        self.assertEqual(len(received), 1, context)
        self.assertGreater(int(sent[0][7]), 1 << 20, context)
        self.assertEqual(int(received[0][7]), int(sent[0][7]), context)
        self.assertGreaterEqual(after - before, int(sent[0][7]) // 4096, context)

    def test_stopping_the_daemon_reports_device_removal(self):
        """As a kernel whose device goes: the blocked rdma_get_cm_event
        returns RDMA_CM_EVENT_DEVICE_REMOVAL (11) before the daemon exits."""
        program = self.waiting_program()
        self.assertEqual(self.daemon.stop(), 0, self.daemon.log())
        output = program.communicate(timeout=10)[0]
        self.assertEqual(output.strip(), "event 11", output)

    def test_a_dead_daemon_ends_a_blocked_wait_with_enodev(self):
        """The daemon killed: rdma_get_cm_event does not sleep for ever, it
        fails with ENODEV."""
        program = self.waiting_program()
        self.daemon.stop(sig=signal.SIGKILL)
        output = program.communicate(timeout=10)[0]
        # (Its IDs cannot be destroyed either at exit: more ENODEV after that line.)
        self.assertEqual(output.splitlines()[0], "errno 19", output)
        self.daemon = harness.Daemon(self.daemon_args)  # for tearDown: a daemon to stop
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()


class RdmaCmAddressErrors(DaemonPerTest):
    """Addresses no device can take: devices on 127.0.0.2 and 127.0.0.3 only."""

    daemon_args = ("--device", "uroce0=127.0.0.2", "--device", "uroce1=127.0.0.3")

    def resolve(self, address):
        script = os.path.join(os.path.dirname(__file__), "pyverbs_scripts", "rdma_cm_resolve.py")
        result = harness.run_program([harness.PYTHON, script, address], self.daemon.env(),
                                     log=lambda: diagnostics(self.daemon))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result.stdout.strip()

    def test_a_destination_reached_from_no_device_is_addr_error_enodev(self):
        """127.0.0.1 is reached from 127.0.0.1, which no device has: as the
        kernel's rdma_resolve_addr through a netdev without RDMA,
        RDMA_CM_EVENT_ADDR_ERROR (1) with status -ENODEV."""
        self.assertEqual(self.resolve("127.0.0.1"), "event 1 status -19")

    def test_a_device_address_resolves(self):
        """The control: 127.0.0.3 is uroce1's, ADDR_RESOLVED (0)."""
        self.assertEqual(self.resolve("127.0.0.3"), "event 0 status 0")


if __name__ == "__main__":
    unittest.main()
