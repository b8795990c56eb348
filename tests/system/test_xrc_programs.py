"""Acceptance: the unmodified XRC programs of rdma-core and perftest run
between uroce0 (server) and uroce1 (clients), GID index 0.

- ibv_xsrq_pingpong -g 0: one client, polling and -e, and three client
  processes at once. The clients share one XRC domain (the program opens it
  through the file /tmp/xrc_domain), and the server sends to each client
  round robin through every client's XRC_TGT QP: a message reaches the SRQ
  of one client process through the target QP of another. Also over real
  UDP.
- perftest -c XRC: every bandwidth and latency test with -a, the bandwidth
  tests again over real UDP.
"""

import re
import subprocess
import time
import unittest

import harness
from harness import DEFAULT_DEVICES
from programs import (PINGPONG_TIMEOUT, SERVER, CLIENT, DaemonPerTest, PerftestCases, diagnostics,
                      elapsed, require)

# "%8s: LID %04x, QPN RECV %06x SEND %06x, PSN %06x, SRQN %06x, GID %s"
XSRQ_ADDRESS = re.compile(
    r"^\s*(local|remote): LID [0-9a-f]+, QPN RECV ([0-9a-f]+) SEND ([0-9a-f]+), "
    r"PSN [0-9a-f]+, SRQN ([0-9a-f]+), GID (\S+)$", re.M)
XSRQ_ITERS = 50


class XsrqPingPongTest(DaemonPerTest):
    """ibv_xsrq_pingpong: an XRC_INI and an XRC_TGT QP per client on each
    side, receives through one XRC SRQ per process."""

    @classmethod
    def setUpClass(cls):
        require("ibv_xsrq_pingpong")
        super().setUpClass()

    def run_xsrq(self, clients, *extra):
        """The server with -c `clients`, then that many client processes at
        once; returns (server, [client]) as (exit status, output)."""
        program = require("ibv_xsrq_pingpong")
        port = harness.free_tcp_port()
        common = ["-g", "0", "-n", str(XSRQ_ITERS), "-p", str(port), *extra]
        env = self.daemon.env()
        started = time.monotonic()
        procs = []

        def launch(args):
            procs.append(subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, env=env))
            return procs[-1]

        try:
            server = launch([program, "-d", SERVER, "-c", str(clients), *common])
            harness.wait_for(lambda: harness.tcp_port_listening(port) or
                             server.poll() is not None, 10.0,
                             "ibv_xsrq_pingpong to listen on TCP port %d" % port,
                             lambda: diagnostics(self.daemon))
            for _ in range(clients):
                launch([program, "-d", CLIENT, *common, "127.0.0.1"])
            results = []
            for proc in procs:
                try:
                    output = proc.communicate(
                        timeout=max(0.1, started + PINGPONG_TIMEOUT - time.monotonic()))[0]
                except subprocess.TimeoutExpired:
                    proc.kill()
                    output = proc.communicate()[0] + "\n(killed: no exit in %.0f s)" % (
                        PINGPONG_TIMEOUT)
                results.append((proc.returncode, output))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        elapsed("ibv_xsrq_pingpong -c %d -n %d %s (%s)" % (
            clients, XSRQ_ITERS, " ".join(extra), " ".join(self.daemon_args) or "shortcut"),
            time.monotonic() - started)
        return results[0], results[1:]

    def check_xsrq(self, clients, *extra):
        before = harness.parse_stats(self.daemon.stats_text())
        server, client_sides = self.run_xsrq(clients, *extra)
        outputs = "".join("\n--- %s, exit status %s\n%s" % (which, status, output)
                          for which, (status, output) in
                          [("server", server)] + [("client %d" % i, side)
                                                   for i, side in enumerate(client_sides)])
        context = outputs + "\n" + diagnostics(self.daemon)
        server_gid = harness.gid0_for(DEFAULT_DEVICES[SERVER])
        client_gid = harness.gid0_for(DEFAULT_DEVICES[CLIENT])
        for status, output in [server] + client_sides:
            self.assertEqual(status, 0, context)
            self.assertEqual(output.strip().splitlines()[-1], "success", context)
        # Each client printed its own addresses and the server's; the server
        # printed every client's as its remote ones, once each.
        server_lines = XSRQ_ADDRESS.findall(server[1])
        server_remotes = sorted(line[1:] for line in server_lines if line[0] == "remote")
        client_locals = []
        for _, output in client_sides:
            lines = XSRQ_ADDRESS.findall(output)
            self.assertEqual(sorted(line[0] for line in lines), ["local", "remote"], context)
            for kind, recv_qpn, send_qpn, srqn, gid in lines:
                self.assertEqual(gid, client_gid if kind == "local" else server_gid, context)
                if kind == "local":
                    client_locals.append((recv_qpn, send_qpn, srqn, gid))
        self.assertEqual(server_remotes, sorted(client_locals), context)
        # Every message of both directions was received once.
        after = harness.parse_stats(self.daemon.stats_text())
        for device in (SERVER, CLIENT):
            self.assertEqual(after[device]["rdma_recvs"] - before[device]["rdma_recvs"],
                             clients * XSRQ_ITERS, context)
        self.daemon.wait_until_idle()

    def test_one_client_polling(self):
        self.check_xsrq(1)

    def test_one_client_events(self):
        self.check_xsrq(1, "-e")

    def test_three_client_processes(self):
        self.check_xsrq(3)

    def test_three_client_processes_events_8_kib(self):
        self.check_xsrq(3, "-e", "-s", "8192")


class XsrqPingPongUdpTest(XsrqPingPongTest):
    """The same with every packet through the daemon's UDP sockets."""

    daemon_args = ("--no-shortcut",)


class XrcBandwidthCases:
    """The bandwidth tests, for either path."""

    def test_ib_send_bw(self):
        self.check_perftest("ib_send_bw", "-c", "XRC")

    def test_ib_write_bw(self):
        self.check_perftest("ib_write_bw", "-c", "XRC")

    def test_ib_read_bw(self):
        self.check_perftest("ib_read_bw", "-c", "XRC")


class PerftestXrcTest(XrcBandwidthCases, PerftestCases, DaemonPerTest):
    def test_ib_atomic_bw(self):
        self.check_perftest("ib_atomic_bw", "-c", "XRC")

    def test_ib_send_lat(self):
        self.check_perftest("ib_send_lat", "-c", "XRC")

    def test_ib_write_lat(self):
        self.check_perftest("ib_write_lat", "-c", "XRC")

    def test_ib_read_lat(self):
        self.check_perftest("ib_read_lat", "-c", "XRC")

    def test_ib_atomic_lat(self):
        self.check_perftest("ib_atomic_lat", "-c", "XRC")

    def test_ib_send_bw_with_events(self):
        self.check_perftest("ib_send_bw", "-c", "XRC", "-e")


class PerftestXrcUdpTest(XrcBandwidthCases, PerftestCases, DaemonPerTest):
    daemon_args = ("--no-shortcut",)


if __name__ == "__main__":
    unittest.main()
