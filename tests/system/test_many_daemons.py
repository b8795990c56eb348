"""Many daemons on one host (docs/uroced.md, the UDP port; docs/ci.md): two
users, or two runtime directories of one user, start daemons with the
default devices at the same time and each carries ibv_rc_pingpong and rping
over its own UDP sockets; and a device on loopback takes packets only from
its own daemon's devices, so that another local user cannot reach its QPs."""

import os
import re
import socket
import subprocess
import time
import unittest

import harness

DEFAULT_PORT = 4791


def udp_port(daemon):
    """The port the daemon says it serves on (status: 'udp port N ...')."""
    match = re.search(r"^udp port (\d+)", daemon.status().text, re.M)
    if not match:
        raise AssertionError("status names no UDP port:\n" + daemon.status().text)
    return int(match.group(1))


class ManyDaemonsTest(unittest.TestCase):

    def start_together(self, daemons):
        """Launches every daemon before waiting for any: they choose their
        ports at the same moment."""
        for daemon in daemons:
            self.addCleanup(daemon.cleanup)
            daemon.launch(harness.AS_NOBODY if isinstance(daemon, harness.NobodysDaemon) else ())
        for daemon in daemons:
            harness.wait_for(lambda: os.path.exists(daemon.pid_path), harness.START_TIMEOUT,
                             "uroced to start", daemon.log)
            daemon.status()

    def assert_pingpong_and_rping(self, daemon, user=()):
        env = daemon.env()
        port = harness.free_tcp_port()
        common = ["-g", "0", "-n", "200", "-s", "4096", "-p", str(port)]
        program = harness.require_program("ibv_rc_pingpong")
        pair = harness.run_server_client(env, [*user, program, "-d", "uroce0", *common],
                                         [*user, program, "-d", "uroce1", *common, "127.0.0.1"],
                                         port, log=daemon.log)
        for side in pair:
            self.assertEqual(side.returncode, 0, side.output + daemon.log())
        self.assertRegex(pair[1].output, r"200 iters in [\d.]+ seconds")
        self.assert_rping(daemon, env, user)

    def assert_rping(self, daemon, env, user):
        rping = harness.require_program("rping")
        cm_port = str(harness.free_tcp_port())
        common = ["-a", "127.0.0.2", "-p", cm_port, "-C", "50", "-V"]
        for attempt in range(3):
            server = subprocess.Popen([*user, rping, "-s", *common], env=env, text=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT)
            try:
                harness.wait_for(lambda: server.poll() is not None or re.search(
                    r"^  cm id \d+ pid \d+ \w+ listen \S+:%s " % cm_port, daemon.status().text,
                    re.M), 15, "rping to listen", daemon.log)
                client = harness.run_program([*user, rping, "-c", *common], env, log=daemon.log)
                server.wait(30)
            finally:
                if server.poll() is None:
                    server.kill()
                server_output = server.communicate()[0]
            output = client.stdout + client.stderr
            if client.returncode == 0 and server.returncode == 0:
                return
            if attempt == 2 or not harness.rping_lost_its_exit_race(output, 50):
                self.fail("rping: client %d, server %d\n%s\n%s\n%s" % (
                    client.returncode, server.returncode, output, server_output, daemon.log()))

    def assert_ports_apart(self, daemons):
        ports = [udp_port(d) for d in daemons]
        self.assertEqual(len(set(ports)), len(ports), "daemons share a UDP port: %s" % ports)
        for daemon, port in zip(daemons, ports):
            if port != DEFAULT_PORT:
                self.assertIn("udp port %d (4791 is taken on these addresses)" % port,
                              daemon.status().text)
        return ports

    def test_two_runtime_directories_of_one_user(self):
        """Two daemons of root with the default devices, every packet over
        their UDP sockets (--no-shortcut), started at once."""
        daemons = [harness.Daemon(["--no-shortcut"], own_port=False) for _ in range(2)]
        self.start_together(daemons)
        self.assert_ports_apart(daemons)
        for daemon in daemons:
            self.assert_pingpong_and_rping(daemon)

    def test_two_users(self):
        """root's and nobody's daemons with the default devices, started at
        once; each user's programs use their own."""
        mine = harness.Daemon(["--no-shortcut"], own_port=False)
        nobodys = harness.NobodysDaemon(["--no-shortcut"], own_port=False)
        self.start_together([mine, nobodys])
        self.assert_ports_apart([mine, nobodys])
        self.assert_pingpong_and_rping(mine)
        self.assert_pingpong_and_rping(nobodys, harness.AS_NOBODY)
        self.assertEqual(harness.parse_stats(mine.stats_text())["uroce0"]["rcvd_foreign"], 0)


class ForeignPacketTest(unittest.TestCase):
    """A datagram to a default device's socket from a socket that is not
    one of its daemon's devices (another user's, or another of root's) is
    counted, logged and dropped; with --open it is taken in."""

    # Sends one datagram from 127.0.0.9 (any port) to argv[1]:argv[2].
    SEND = ("import socket, sys\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.bind(('127.0.0.9', 0))\n"
            "s.sendto(b'\\x04' + bytes(63), (sys.argv[1], int(sys.argv[2])))\n")

    def send(self, daemon, user=()):
        subprocess.run([*user, harness.PYTHON, "-c", self.SEND, "127.0.0.1", str(udp_port(daemon))],
                       check=True, timeout=30)

    def counters(self, daemon):
        return harness.parse_stats(daemon.stats_text())["uroce0"]

    def wait_counter(self, daemon, name, value):
        harness.wait_for(lambda: self.counters(daemon)[name] == value, 5,
                         "%s to reach %d" % (name, value), daemon.log)

    def test_from_another_user_and_another_socket(self):
        daemon = harness.Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        self.assertIn("devices on loopback take packets only from this daemon's own",
                      daemon.status().text)
        self.send(daemon, harness.AS_NOBODY)
        self.wait_counter(daemon, "rcvd_foreign", 1)
        self.send(daemon)
        self.wait_counter(daemon, "rcvd_foreign", 2)
        counters = self.counters(daemon)
        self.assertEqual((counters["rcvd_pkts"], counters["rcvd_malformed"]), (0, 0))
        self.assertRegex(daemon.log(), r"device uroce0: a packet from 127\.0\.0\.9 port \d+ "
                                       r"dropped: a device on loopback takes packets only from "
                                       r"this daemon's own devices")

    def test_open_devices_take_it_in(self):
        daemon = harness.Daemon(["--open"])
        self.addCleanup(daemon.cleanup)
        daemon.start()
        self.send(daemon, harness.AS_NOBODY)
        self.wait_counter(daemon, "rcvd_pkts", 1)
        self.assertEqual(self.counters(daemon)["rcvd_foreign"], 0)


if __name__ == "__main__":
    unittest.main()
