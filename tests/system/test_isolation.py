"""A program that dies without cleaning up takes its objects with it, and
does not disturb the programs that are still running."""

import signal
import unittest

import harness


class KilledClientTest(harness.DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_pyverbs()
        super().setUpClass()

    def setUp(self):
        self.addCleanup(self.daemon.wait_until_idle)  # runs last: clients are closed

    def start_client(self, device):
        client = harness.VerbsClient(self.daemon)
        self.addCleanup(client.close)
        client.must("open", device)
        return client

    def create_everything(self, client):
        for command in (["pd"], ["mr"], ["comp_channel"], ["cq", "with_channel"], ["cq"],
                        ["srq"], ["qp"], ["qp_to_init"]):
            client.must(*command)
        return harness.counts(pd=1, mr=1, comp_channel=1, cq=2, srq=1, qp=1)

    def client_counts(self, status, pid):
        found = [c.objects for c in status.clients if c.pid == pid]
        self.assertEqual(len(found), 1, "client %d in:\n%s" % (pid, status.text))
        return found[0]

    def test_sigkill_releases_every_object_and_spares_other_clients(self):
        """SIGKILL of a client holding a PD, MR, completion channel, CQs, SRQ
        and QP: within seconds the device is back to the survivor's objects
        only; the survivor (same device) keeps its objects and can create
        more."""
        victim = self.start_client("uroce0")
        survivor = self.start_client("uroce0")
        victim_counts = self.create_everything(victim)
        survivor.must("pd")
        survivor.must("cq")
        survivor_counts = harness.counts(pd=1, cq=1)

        status = self.daemon.status()
        self.assertEqual(self.client_counts(status, victim.pid), victim_counts)
        self.assertEqual(self.client_counts(status, survivor.pid), survivor_counts)
        total = {k: victim_counts[k] + survivor_counts[k] for k in victim_counts}
        self.assertEqual(status.devices["uroce0"].objects, total, status.text)

        victim.kill()
        self.assertEqual(victim.proc.returncode, -signal.SIGKILL)
        self.daemon.wait_for_counts("uroce0", survivor_counts)
        status = self.daemon.status()
        self.assertEqual([c.pid for c in status.clients], [survivor.pid], status.text)
        self.assertEqual(status.client_count, 1, status.text)

        # The survivor's connection and objects are intact and it can go on.
        survivor.must("mr")
        survivor.must("qp")
        self.assertEqual(survivor.must("qp_to_init")["state"], harness.IBV_QPS_INIT)
        self.assertEqual(self.daemon.device_counts("uroce0"),
                         harness.counts(pd=1, cq=1, mr=1, qp=1))
        survivor.must("close")
        self.daemon.wait_for_counts("uroce0", harness.zero_counts())

    def test_killed_client_does_not_touch_other_devices(self):
        """Killing a client of uroce1 leaves a client of uroce0 and its objects
        alone."""
        other = self.start_client("uroce0")
        other.must("pd")
        victim = self.start_client("uroce1")
        self.create_everything(victim)
        victim.kill()
        self.daemon.wait_for_counts("uroce1", harness.zero_counts())
        self.assertEqual(self.daemon.device_counts("uroce0"), harness.counts(pd=1))
        other.must("cq")
        self.assertEqual(self.daemon.device_counts("uroce0"), harness.counts(pd=1, cq=1))

    def test_many_killed_clients_leave_nothing(self):
        """Several clients killed at once, each holding objects on both
        devices, leave both devices empty and the daemon serving."""
        clients = []
        for i in range(4):
            client = self.start_client("uroce%d" % (i % 2))
            self.create_everything(client)
            clients.append(client)
        for client in clients:
            client.proc.send_signal(signal.SIGKILL)
        for client in clients:
            client.proc.wait(10)
        self.daemon.wait_for_counts("uroce0", harness.zero_counts())
        self.daemon.wait_for_counts("uroce1", harness.zero_counts())
        self.assertEqual(self.daemon.status().client_count, 0)
        self.run_ok(["ibv_devinfo", "-d", "uroce0"])


if __name__ == "__main__":
    unittest.main()
