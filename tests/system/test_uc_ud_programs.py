"""Acceptance: the unmodified UC, UD and SRQ programs of rdma-core and
perftest run between uroce0 (server) and uroce1 (client), GID index 0.

- ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (RC QPs sharing an
  SRQ) -g 0 -c, polling and -e; UC with multi-packet messages, UD up to the
  MTU (4096); UC and UD also over real UDP.
- The UC and UD bandwidth tests again over real UDP.
- perftest -c UC (ib_send_bw, ib_write_bw, ib_send_lat, ib_write_lat) and
  -c UD (ib_send_bw, ib_send_lat, up to the MTU) with -a, the sends again
  with -e; RC ib_send_bw and ib_send_lat through an SRQ (--use-srq).
- perftest raw_ethernet_bw: RAW_PACKET QPs with flow steering.
"""

import subprocess
import unittest

import harness
from programs import PINGPONG_DEFAULT_SIZE, DaemonPerTest, PerftestCases, PingPongCases, \
    diagnostics, parse_table, require

MTU = 4096  # the ports' active MTU: the largest UD message


class UcPingPongTest(PingPongCases, DaemonPerTest):
    program = "ibv_uc_pingpong"

    def test_polling_default_size(self):
        self.pingpong(PINGPONG_DEFAULT_SIZE, 300, events=False)

    def test_polling_64_kib(self):
        self.pingpong(65536, 100, events=False)

    def test_events_default_size(self):
        self.pingpong(PINGPONG_DEFAULT_SIZE, 300, events=True)


class UdPingPongTest(PingPongCases, DaemonPerTest):
    program = "ibv_ud_pingpong"

    def test_polling_1_byte(self):
        self.pingpong(1, 300, events=False)

    def test_polling_mtu(self):
        self.pingpong(MTU, 300, events=False)

    def test_events_default_size(self):
        self.pingpong(2048, 300, events=True)


class SrqPingPongTest(PingPongCases, DaemonPerTest):
    """16 RC QPs on each side whose receives come from one SRQ."""

    program = "ibv_srq_pingpong"

    def test_polling_default_size(self):
        self.pingpong(PINGPONG_DEFAULT_SIZE, 100, events=False)

    def test_events_default_size(self):
        self.pingpong(PINGPONG_DEFAULT_SIZE, 100, events=True)


class UcUdPingPongUdpTest(PingPongCases, DaemonPerTest):
    """UC and UD with every packet through the daemon's UDP sockets."""

    daemon_args = ("--no-shortcut",)

    def test_uc(self):
        self.program = "ibv_uc_pingpong"
        self.pingpong(PINGPONG_DEFAULT_SIZE, 300, events=False)

    def test_ud(self):
        self.program = "ibv_ud_pingpong"
        self.pingpong(MTU, 300, events=False)


class PerftestUcUdTest(PerftestCases, DaemonPerTest):
    def test_uc_ib_send_bw(self):
        self.check_perftest("ib_send_bw", "-c", "UC")

    def test_uc_ib_write_bw(self):
        self.check_perftest("ib_write_bw", "-c", "UC")

    def test_uc_ib_send_lat(self):
        self.check_perftest("ib_send_lat", "-c", "UC")

    def test_uc_ib_write_lat(self):
        self.check_perftest("ib_write_lat", "-c", "UC")

    def test_uc_ib_send_bw_with_events(self):
        self.check_perftest("ib_send_bw", "-c", "UC", "-e")

    def test_ud_ib_send_bw(self):
        self.check_perftest("ib_send_bw", "-c", "UD", max_size=MTU)

    def test_ud_ib_send_lat(self):
        self.check_perftest("ib_send_lat", "-c", "UD", max_size=MTU)

    def test_ud_ib_send_bw_with_events(self):
        self.check_perftest("ib_send_bw", "-c", "UD", "-e", max_size=MTU)

    def test_ud_ib_send_lat_with_events(self):
        self.check_perftest("ib_send_lat", "-c", "UD", "-e", max_size=MTU)

    def test_rc_ib_send_bw_through_an_srq(self):
        self.check_perftest("ib_send_bw", "--use-srq")

    def test_rc_ib_send_lat_through_an_srq(self):
        self.check_perftest("ib_send_lat", "--use-srq")


class PerftestUcUdUdpTest(PerftestCases, DaemonPerTest):
    """UC and UD bandwidth with every packet through the daemon's UDP
    sockets: with no acknowledgements to pace them, senders are paced per
    engine turn so that nothing overflows the receiving socket (a lost UC
    or UD message would leave perftest's server waiting)."""

    daemon_args = ("--no-shortcut",)

    def test_uc_ib_send_bw(self):
        self.check_perftest("ib_send_bw", "-c", "UC")

    def test_uc_ib_write_bw(self):
        self.check_perftest("ib_write_bw", "-c", "UC")

    def test_ud_ib_send_bw(self):
        self.check_perftest("ib_send_bw", "-c", "UD", max_size=MTU)


if __name__ == "__main__":
    unittest.main()


class RawEthernetPerftestTest(DaemonPerTest):
    """perftest's raw_ethernet_bw, unmodified: the server on uroce1 steers
    the frames for its MAC to a RAW_PACKET QP with ibv_create_flow, the
    client on uroce0 sends 1518-byte frames from a RAW_PACKET QP for two
    seconds (-D: frames sent before the server's rule exists are dropped,
    not waited for). Both exit 0, report a rate, and the frames the server
    counted arrived as whole frames on uroce1."""

    SERVER_MAC, CLIENT_MAC = "02:00:00:00:00:b1", "02:00:00:00:00:a1"

    def test_raw_ethernet_bw(self):
        path = require("raw_ethernet_bw")
        env = self.daemon.env()
        server = subprocess.Popen(
            [path, "-d", "uroce1", "--server", "-B", self.SERVER_MAC, "-E", self.CLIENT_MAC,
             "-D", "2"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=env)
        self.addCleanup(server.kill)
        harness.wait_for(lambda: self.daemon.device_counts("uroce1").get("qp", 0) == 1, 10.0,
                         "the server's RAW_PACKET QP", self.daemon.log)
        client = subprocess.run(
            [path, "-d", "uroce0", "--client", "-B", self.CLIENT_MAC, "-E", self.SERVER_MAC,
             "-D", "2"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=env, timeout=30)
        server_output = server.communicate(timeout=30)[0]
        context = "--- server\n%s\n--- client\n%s\n%s" % (server_output, client.stdout,
                                                          diagnostics(self.daemon))
        self.assertEqual((server.returncode, client.returncode), (0, 0), context)
        rows = {side: parse_table(output, "bw")
                for side, output in (("server", server_output), ("client", client.stdout))}
        for side, table in rows.items():
            self.assertIsNotNone(table, "no result table from the %s\n%s" % (side, context))
            self.assertEqual([row.size for row in table], [1518], context)
            self.assertGreater(table[0].iters, 0, context)
            self.assertGreater(table[0].msg_rate, 0, context)
        counters = harness.parse_stats(self.daemon.stats_text())
        self.assertGreaterEqual(counters["uroce1"]["raw_rcvd_frames"], rows["server"][0].iters,
                                context)
        # Every frame sent is accounted for on the other device.
        self.assertEqual(sum(counters["uroce1"][name] for name in (
            "raw_rcvd_frames", "raw_no_receive", "raw_unmatched", "rcvd_dropped")),
            counters["uroce0"]["raw_sent_frames"], context)
