"""Lab 11 (docs/labs/11-two-hosts.md): its steps on hosts built as network
namespaces (hosts.py, with names of their own so that runs do not meet),
and the observations its questions and answers rely on: active_mtu from
the interface's MTU, a 4096-byte message cut into 1024-byte packets on
the wire (as tshark decodes the capture), -m 4096 taken as 1024, the
port and its events following the link on both ends of the veth, and
mckey's group joined on the receivers' interfaces."""

import unittest

import harness
import hosts
from hosts import mtu_of

SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0, 1, 2, 4
ACKNOWLEDGE = 0x11
HEADERS = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC around a SEND's payload


class Lab11TwoHosts(unittest.TestCase):

    def setUp(self):
        self.fabric = hosts.Fabric().start()
        self.addCleanup(self.fabric.close)

    def pingpong(self, *options):
        a, b = self.fabric.hosts
        path = harness.require_program("ibv_rc_pingpong")
        port = harness.free_tcp_port()
        common = ["-g", "0", "-n", "5", "-p", str(port), *options]
        pair = harness.run_server_client(
            None, a.command([path, "-d", a.device, *common]),
            b.command([path, "-d", b.device, *common, a.address]), port, log=self.fabric.log)
        for side in pair:
            self.assertEqual(side.returncode, 0, side.output + self.fabric.log())

    def traced_pingpong(self, *options):
        """Step 2: b's device traced (`uroce trace --pcap`) while the
        ping-pong runs; (frame length, BTH opcode) of each packet."""
        packets = hosts.traced_fields(self, self.fabric, self.fabric.hosts[1],
                                      lambda: self.pingpong(*options), "frame.len",
                                      "infiniband.bth.opcode")
        return [tuple(int(field, 0) for field in packet) for packet in packets
                if len(packet) == 2 and packet[1]]

    def test_step1_active_mtu_from_the_interface_and_question1(self):
        a, _ = self.fabric.hosts
        self.assertEqual(mtu_of(a.port()["active_mtu"]), 1024)
        self.assertEqual(mtu_of(a.port()["max_mtu"]), 4096)
        self.assertIn("active MTU 1024 (eth0's MTU is 1500)", a.daemon.log())
        for link_mtu, active in ((4000, 2048), (4176, 4096), (1500, 1024)):
            a.link("mtu", str(link_mtu))
            harness.wait_for(lambda: mtu_of(a.port()["active_mtu"]) == active, 10.0,
                             "active_mtu %d at MTU %d" % (active, link_mtu), self.fabric.log)

    def test_step2_a_message_is_cut_to_the_mtu_and_question2(self):
        for options in ((), ("-m", "4096")):
            with self.subTest(options=options):
                packets = self.traced_pingpong(*options)
                sends = [p for p in packets if p[1] != ACKNOWLEDGE]
                # 5 iterations of a 4096-byte message each way, four packets each.
                self.assertEqual([op for _, op in sends[:4]],
                                 [SEND_FIRST, SEND_MIDDLE, SEND_MIDDLE, SEND_LAST], packets)
                self.assertGreaterEqual(len(sends), 2 * 5 * 4, packets)
                for length, _ in sends:
                    self.assertLessEqual(length, 1500 + 14)  # the MTU, with Ethernet's header
                self.assertIn(1024 + HEADERS, [length for length, _ in sends])

    def test_step3_the_link_goes_down_on_both_ends(self):
        a, b = self.fabric.hosts
        watch = a.popen([harness.require_program("ibv_asyncwatch"), "-d", a.device])
        try:
            harness.wait_for(lambda: len(a.daemon.status().clients) == 1, 10.0,
                             "ibv_asyncwatch to open the device", self.fabric.log)
            a.link("down")
            for host in (a, b):
                harness.wait_for(lambda: "PORT_DOWN" in host.port()["state"], 10.0,
                                 "%s down" % host.device, self.fabric.log)
            a.link("up")
            for host in (a, b):
                harness.wait_for(lambda: "PORT_ACTIVE" in host.port()["state"], 10.0,
                                 "%s active" % host.device, self.fabric.log)
        finally:
            watch.terminate()
            output = watch.communicate(timeout=10)[0]
        self.assertRegex(output, r"IBV_EVENT_PORT_ERR.*\n(.*\n)*.*IBV_EVENT_PORT_ACTIVE")


class Lab11ThreeHosts(unittest.TestCase):

    def test_step4_multicast_to_the_other_hosts(self):
        fabric = hosts.Fabric(count=3).start()
        self.addCleanup(fabric.close)
        a, b, c = fabric.hosts

        def joined(host):
            self.assertIn("multicast groups 1 239.1.2.3", host.daemon.status().text)
            self.assertRegex(hosts.ip("-n", host.netns, "maddr", "show", "dev", "eth0"),
                             r"inet\s+239\.1\.2\.3")
        hosts.mckey_to_members(self, fabric, "239.1.2.3", (a, b), c, joined)


if __name__ == "__main__":
    unittest.main()
