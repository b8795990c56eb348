"""Engines that own their devices (engine/engines.h, util/ownership.h): a
daemon of two engines, uroce0 and uroce2 on engine 0, uroce1 and uroce3
on engine 1. Programs that churn QPs, MRs and rdma_cm connections on
engine 0's devices never pause engine 1, and `uroce status` says how long
each engine was paused and for what (docs/uroced.md)."""

import os
import re
import subprocess
import time
import unittest

import harness

FOUR_DEVICES = ["--threads", "2", "--device", "uroce0=127.0.0.1", "--device", "uroce1=127.0.0.2",
                "--device", "uroce2=127.0.0.3", "--device", "uroce3=127.0.0.4"]
PAUSED = re.compile(r"^engine (\d+) devices ([\w ]+?) paused ([\d.]+) ms for its devices "
                    r"\((\d+) times\), ([\d.]+) ms for the daemon \((\d+) times\)$", re.M)


def paused(daemon):
    """{engine: (its devices, pauses for its devices, pauses for the daemon)}
    from uroce status (engine 0, which runs the control plane, has none)."""
    with harness.RawClient(daemon.socket_path) as client:
        text = client.status_text()
    return {int(m.group(1)): (m.group(2).split(), int(m.group(4)), int(m.group(6)))
            for m in PAUSED.finditer(text)}, text


class OwnershipTest(unittest.TestCase):

    def setUp(self):
        self.daemon = harness.Daemon(FOUR_DEVICES)
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        self.addCleanup(self.daemon.stop)
        self.env = self.daemon.env()

    def test_status_names_each_engine_and_its_devices(self):
        engines, text = paused(self.daemon)
        self.assertIn("engine 0 devices uroce0 uroce2 and the control plane", text)
        self.assertEqual(list(engines), [1], text)
        self.assertEqual(engines[1][0], ["uroce1", "uroce3"], text)

    def test_churn_on_one_engine_never_pauses_the_other(self):
        """For 20 s: rping connections (rdma_cm, a QP, CQs and MRs each)
        from uroce0 to a persistent rping server on uroce2, and
        ibv_rc_pingpong pairs (a context, QP, CQ and MR each) between
        uroce0 and uroce2. Engine 1 is paused once meanwhile: for the
        status read that begins the count (it reads uroce1's and uroce3's
        counters), and never for the whole daemon. Its devices meanwhile
        carry a pingpong of their own, which must succeed."""
        harness.require_program("rping")
        port = harness.free_tcp_port()
        server = subprocess.Popen(["rping", "-s", "-P", "-a", "127.0.0.3", "-p", str(port)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, env=self.env)
        self.addCleanup(lambda: server.poll() is not None or (server.kill(), server.wait()))
        listening = re.compile(r"^  cm id \d+ pid %d \w+ listen \S+:%d " % (server.pid, port),
                               re.M)
        harness.wait_for(lambda: listening.search(paused(self.daemon)[1]), 10,
                         "rping to listen", self.daemon.log)
        before, text = paused(self.daemon)
        connections = pingpongs = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            client = harness.run_program(["rping", "-c", "-a", "127.0.0.3", "-I", "127.0.0.1",
                                          "-p", str(port), "-C", "3", "-S", "100", "-v"],
                                         env=self.env, log=self.daemon.log)
            output = client.stdout + client.stderr
            if client.returncode != 0:
                self.assertTrue(harness.rping_lost_its_exit_race(output, 3),
                                output + self.daemon.log())
            connections += 1
            pair = harness.run_pingpong(self.env, "uroce2", "uroce0", 20, 4096,
                                        log=self.daemon.log)
            self.assertEqual([side.returncode for side in pair], [0, 0], pair[1].output)
            pingpongs += 1
        after, text = paused(self.daemon)
        self.assertGreater(connections, 5)
        self.assertGreater(pingpongs, 5)
        self.assertEqual(after[1][1], before[1][1] + 1,
                         "engine 1 paused for control of its devices meanwhile:\n" + text)
        self.assertEqual(after[1][2], before[1][2],
                         "engine 1 paused for the whole daemon meanwhile:\n" + text)

    def test_requests_on_an_engines_devices_pause_it(self):
        """The other way round: a pingpong on uroce1 and uroce3 pauses
        engine 1 (its contexts, QPs and MRs are engine 1's state), and its
        packets still flow."""
        before, _ = paused(self.daemon)
        pair = harness.run_pingpong(self.env, "uroce3", "uroce1", 100, 4096,
                                    log=self.daemon.log)
        self.assertEqual([side.returncode for side in pair], [0, 0], pair[1].output)
        after, text = paused(self.daemon)
        self.assertGreater(after[1][1], before[1][1] + 1, text)
        self.assertEqual(after[1][2], before[1][2], text)


if __name__ == "__main__":
    unittest.main()
