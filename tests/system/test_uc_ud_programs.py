"""Acceptance: the unmodified UC, UD and SRQ programs of rdma-core and
perftest run between uroce0 (server) and uroce1 (client), GID index 0.

- ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (RC QPs sharing an
  SRQ) -g 0 -c, polling and -e; UC with multi-packet messages, UD up to the
  MTU (4096); UC and UD also over real UDP.
- The UC and UD bandwidth tests again over real UDP.
- perftest -c UC (ib_send_bw, ib_write_bw, ib_send_lat, ib_write_lat) and
  -c UD (ib_send_bw, ib_send_lat, up to the MTU) with -a, the sends again
  with -e; RC ib_send_bw and ib_send_lat through an SRQ (--use-srq).
"""

import unittest

from programs import PINGPONG_DEFAULT_SIZE, DaemonPerTest, PerftestCases, PingPongCases

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
