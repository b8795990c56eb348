"""Hosts on a real network: one uroced per network namespace, joined by a
veth pair or a bridge (hosts.py). A device's port follows its interface:
active_mtu from the interface's MTU as rxe computes it, state with the
link, IBV_EVENT_PORT_ERR / PORT_ACTIVE, the device gone with the
interface; unmodified programs with their default options work across a
1500-byte link, over IPv4 and over IPv6; a packet the kernel will not send
is counted and logged."""

import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import hosts
from hosts import mtu_of
from programs import run_calibrated, skip_unless_ucx_has_verbs, ucx_perftest_mode_options

PERFTESTS = ("ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw", "ib_send_lat",
             "ib_write_lat", "ib_read_lat")
MPI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi")
PINGPONGS = ("ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong",
             "ibv_xsrq_pingpong")


def run_pair(fabric, server, client, program, *options, timeout=60.0):
    """`program` as a user runs it between two hosts: the server on
    `server`, the client on `client` connecting to the server's address,
    with a TCP port of their own; a perftest pair whose clock calibration
    failed runs again (programs.run_calibrated). Returns (server, client)
    PairSide."""
    path = harness.require_program(program)

    def pair():
        port = harness.free_tcp_port()
        common = ["-p", str(port), *options]
        return harness.run_server_client(
            None, server.command([path, "-d", server.device, *common]),
            client.command([path, "-d", client.device, *common, server.control_address]), port,
            timeout=timeout, log=fabric.log)

    return run_calibrated(pair, program)


def ucx_perftest(fabric, server, client, test):
    """ucx_perftest's tag-matching ping-pong between the hosts' devices over
    UCX's verbs transports (UCX_TLS as middleware_test's, without shared
    memory, as between machines). Returns the client's final row."""
    skip_unless_ucx_has_verbs(test)
    port = harness.free_tcp_port()
    common = [harness.require_program("ucx_perftest"), "-t", "tag_lat", "-n", "1000", "-p",
              str(port), *ucx_perftest_mode_options()]
    ucx = lambda host: ["env", "UCX_TLS=self,rc_verbs,ud_verbs",
                        "UCX_NET_DEVICES=%s:1" % host.device]
    pair = harness.run_server_client(None, server.command([*ucx(server), *common]),
                                     client.command([*ucx(client), *common,
                                                     server.control_address]),
                                     port, timeout=120, log=fabric.log)
    for side in pair:
        test.assertEqual(side.returncode, 0, "%s\n%s\n%s" % (side.args, side.output, fabric.log()))
    final = re.search(r"(?m)^Final:\s+(\d+)\s", pair[1].output)
    test.assertIsNotNone(final, pair[1].output)
    test.assertEqual(int(final.group(1)), 1000, pair[1].output)


def rdma_cm_pair(test, fabric, server_args, client_args, port):
    """An rdma_cm server on the fabric's first host, and once its ID listens
    on `port`, its client on the second; both must exit 0. Returns the
    client's output."""
    a, b = fabric.hosts[:2]
    server = a.popen([harness.require_program(server_args[0]), *server_args[1:]])
    try:
        harness.wait_for(lambda: server.poll() is not None or a.cm_listening(port), 15.0,
                         "%s to listen" % server_args[0], fabric.log)
        client = b.run([harness.require_program(client_args[0]), *client_args[1:]], timeout=60)
        server_output = server.communicate(timeout=60)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    context = "%s: %s\n%s: %s\n%s" % (server_args, server_output, client_args, client.stdout,
                                      fabric.log())
    test.assertEqual(client.returncode, 0, context)
    test.assertEqual(server.returncode, 0, context)
    return client.stdout


class FabricTestCase(unittest.TestCase):
    """A fabric for the whole class (hosts.Fabric arguments in `fabric_args`)."""

    fabric_args = {}

    @classmethod
    def setUpClass(cls):
        cls.fabric = hosts.Fabric(**cls.fabric_args).start()

    @classmethod
    def tearDownClass(cls):
        cls.fabric.close()

    def assertPairSucceeded(self, pair, what):
        for side in pair:
            self.assertEqual(side.returncode, 0, "%s: %s\n%s\n%s" % (
                what, side.args, side.output, self.fabric.log()))


class DefaultsAcrossA1500ByteLinkTest(FabricTestCase):
    """Two hosts on a veth at MTU 1500, as a CI job's containers on a
    default network are."""

    def test_active_mtu_is_the_largest_that_fits_the_interface(self):
        # rxe: 1500 - 80 bytes of headers leaves room for 1024-byte payloads.
        for host in self.fabric.hosts:
            port = host.port()
            self.assertEqual(mtu_of(port["active_mtu"]), 1024, port)
            self.assertEqual(mtu_of(port["max_mtu"]), 4096, port)
            self.assertIn("PORT_ACTIVE", port["state"])

    def test_perftest_with_its_default_options(self):
        a, b = self.fabric.hosts
        for program in PERFTESTS:
            with self.subTest(program=program):
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program), program)
        # UC and UD lose what finds no receive WQE, and a bandwidth test's
        # receiver that falls behind waits for ever for its count: the
        # transports with a program that cannot overrun its peer.
        for program, connection in (("ib_write_bw", "UC"), ("ib_send_lat", "UD")):
            with self.subTest(program=program, connection=connection):
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program, "-c", connection),
                                         "%s -c %s" % (program, connection))

    def test_pingpong_examples_with_their_default_sizes(self):
        a, b = self.fabric.hosts
        for program in PINGPONGS:
            with self.subTest(program=program):
                # RoCE needs a GID index (-g): their only non-default option.
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program, "-g", "0"), program)

    def test_ucx_between_the_hosts(self):
        a, b = self.fabric.hosts
        ucx_perftest(self.fabric, a, b, self)

    def test_a_path_mtu_above_the_port_is_capped(self):
        """-m 4096 on a 1500-byte link: the QPs send 1024-byte packets (a
        4096-byte one would never arrive, and the pair would fail with
        retries exceeded)."""
        a, b = self.fabric.hosts
        sent_before = b.counter("send_err")
        for program in ("ibv_rc_pingpong", "ibv_uc_pingpong"):
            with self.subTest(program=program):
                self.assertPairSucceeded(
                    run_pair(self.fabric, a, b, program, "-g", "0", "-m", "4096", "-s", "16384",
                             "-n", "200"), program + " -m 4096")
        self.assertEqual(b.counter("send_err"), sent_before)


class Ipv6AcrossAVethTest(FabricTestCase):
    """The devices on IPv6 addresses (fd00:77::1 and fd00:77::2) across a
    1500-byte veth: GID 0 is the address, RoCE v2, and the programs run
    with their defaults over UDP/IPv6, rdma_cm's too."""

    fabric_args = {"family": "ipv6"}

    def test_gid_0_is_the_ipv6_address(self):
        for host in self.fabric.hosts:
            result = host.run([harness.require_program("ibv_devinfo"), "-v", "-d", host.device])
            self.assertRegex(result.stdout, r"GID\[\s*0\]:\s+%s, RoCE v2" % re.escape(host.address))

    def test_pingpongs_and_perftest(self):
        a, b = self.fabric.hosts
        for program in PINGPONGS:
            with self.subTest(program=program):
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program, "-g", "0"), program)
        for program in ("ib_send_bw", "ib_write_bw", "ib_read_lat", "ib_atomic_bw"):
            with self.subTest(program=program):
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program), program)
        self.assertPairSucceeded(run_pair(self.fabric, a, b, "ib_send_lat", "-c", "UD"),
                                 "ib_send_lat -c UD")

    def test_ucx_between_the_hosts(self):
        # ud_verbs reads the GRH as IPv6 by the completion's sl (1).
        a, b = self.fabric.hosts
        ucx_perftest(self.fabric, a, b, self)

    def rdma_cm_pair(self, server_args, client_args, port):
        return rdma_cm_pair(self, self.fabric, server_args, client_args, port)

    def test_rdma_cm_programs_on_ipv6_addresses(self):
        server = self.fabric.hosts[0].address
        port = harness.free_tcp_port()  # rdma_cm ports are the daemons', any will do
        output = self.rdma_cm_pair(["rping", "-s", "-a", server, "-p", str(port), "-C", "10", "-v"],
                                   ["rping", "-c", "-a", server, "-p", str(port), "-C", "10",
                                    "-v"], port)
        self.assertEqual(output.count("ping data: rdma-ping-"), 10, output)
        self.rdma_cm_pair(["ucmatose", "-b", server, "-p", str(port)],
                          ["ucmatose", "-s", server, "-p", str(port)], port)
        # UD: the server answers each datagram through an address handle made
        # from its completion and the IPv6 GRH in front of its data.
        self.rdma_cm_pair(["udaddy", "-b", server], ["udaddy", "-s", server], 7174)

    def test_multicast_to_ipv6_groups(self):
        """perftest's multicast test (ib_send_bw --mcg): the server's UD QP
        attaches to an IPv6 group (MLD on eth0), the client sends to it from
        the other host; a group of global scope (ff0e::) and an IB-style
        MGID of link-local scope (ff12::, bound and sent on eth0). rdma_cm
        refuses IPv6 joins, as the kernel does on RoCE v2: ibv_attach_mcast
        is the way. 50 messages, which a UD receiver keeps up with (UD drops
        what finds no receive WQE, and the test waits for its count)."""
        a, b = self.fabric.hosts
        for mgid in ("ff0e::1234", "ff12:401b::1"):
            with self.subTest(mgid=mgid):
                received = a.counter("rcvd_pkts")
                # perftest reads an MGID as 16 decimal bytes.
                as_bytes = ":".join(str(byte) for byte in ipaddress.IPv6Address(mgid).packed)
                self.assertPairSucceeded(
                    run_pair(self.fabric, a, b, "ib_send_bw", "-g", "-M", as_bytes, "-n", "50",
                             "-s", "64"), "ib_send_bw --mcg -M " + mgid)
                self.assertGreaterEqual(a.counter("rcvd_pkts") - received, 50)
                self.assertNotIn(mgid, a.daemon.status().text)  # detached at exit

    def test_the_trace_shows_udp_over_ipv6(self):
        a, b = self.fabric.hosts
        packets = hosts.traced_fields(
            self, self.fabric, b,
            lambda: self.assertPairSucceeded(
                run_pair(self.fabric, a, b, "ibv_rc_pingpong", "-g", "0", "-n", "5"),
                "ibv_rc_pingpong"),
            "ipv6.src", "ipv6.dst", "udp.dstport", "infiniband.bth.opcode")
        self.assertGreaterEqual(len(packets), 10, packets)  # 5 round trips, their ACKs
        ends = {a.address, b.address}
        for src, dst, port, opcode in packets:
            self.assertEqual({src, dst}, ends, packets)
            self.assertEqual(port, hosts.ROCE_PORT, packets)
            self.assertTrue(opcode, "not decoded as RoCE: %s" % packets)


class RawEthernetAcrossAVethTest(FabricTestCase):
    """RAW_PACKET QPs on interface-bound devices send and receive real
    frames on the interface (a packet socket in each daemon): perftest's
    raw_ethernet_bw between the hosts, and frames to and from a plain
    packet socket that knows nothing of RDMA."""

    ETHERTYPE = 0x88B5  # IEEE's local experimental EtherType

    def mac(self, host):
        return json.loads(hosts.ip("-n", host.netns, "-j", "link", "show", "eth0"))[0]["address"]

    def raw_ethernet_bw(self, host, role, source, dest):
        return host.popen([harness.require_program("raw_ethernet_bw"), "-d", host.device,
                           "--" + role, "-B", source, "-E", dest, "-D", "2"])

    def test_raw_ethernet_bw_between_the_hosts(self):
        a, b = self.fabric.hosts
        # The class's other test moves the same counters.
        received_before, sent_before = a.counter("raw_rcvd_frames"), b.counter("raw_sent_frames")
        server = self.raw_ethernet_bw(a, "server", self.mac(a), self.mac(b))
        try:
            harness.wait_for(lambda: a.daemon.device_counts(a.device).get("qp", 0) == 1, 10.0,
                             "the server's RAW_PACKET QP", self.fabric.log)
            client = self.raw_ethernet_bw(b, "client", self.mac(b), self.mac(a))
            client_output = client.communicate(timeout=30)[0]
            server_output = server.communicate(timeout=30)[0]
        finally:
            for proc in (server,):
                if proc.poll() is None:
                    proc.kill()
        context = "--- server\n%s\n--- client\n%s\n%s" % (server_output, client_output,
                                                           self.fabric.log())
        self.assertEqual((server.returncode, client.returncode), (0, 0), context)
        received = a.counter("raw_rcvd_frames") - received_before
        self.assertGreater(received, 0, context)
        # Every frame the server took came over the veth: b sent at least as many.
        self.assertGreaterEqual(b.counter("raw_sent_frames") - sent_before, received, context)

    def test_frames_to_and_from_a_plain_packet_socket(self):
        a, b = self.fabric.hosts
        received_before = a.counter("raw_rcvd_frames")
        # A packet socket on b sends frames to a's MAC for three seconds while
        # raw_ethernet_bw's server on a counts what its flow rule takes.
        server = self.raw_ethernet_bw(a, "server", self.mac(a), self.mac(b))
        try:
            harness.wait_for(lambda: a.daemon.device_counts(a.device).get("qp", 0) == 1, 10.0,
                             "the server's RAW_PACKET QP", self.fabric.log)
            sent = b.run(["python3", "-c", PACKET_SOCKET_SENDER, self.mac(a), self.mac(b),
                          str(self.ETHERTYPE)], timeout=30)
            self.assertEqual(sent.returncode, 0, sent.stdout)
            server_output = server.communicate(timeout=30)[0]
        finally:
            if server.poll() is None:
                server.kill()
        self.assertEqual(server.returncode, 0, server_output + self.fabric.log())
        self.assertGreater(a.counter("raw_rcvd_frames") - received_before, 0, server_output)
        # And the other way: raw_ethernet_bw's client on a, a packet socket on b.
        listener = b.popen(["python3", "-c", PACKET_SOCKET_RECEIVER, self.mac(a)])
        time_to_listen = listener.stdout.readline()
        self.assertEqual(time_to_listen.strip(), "listening")
        client = self.raw_ethernet_bw(a, "client", self.mac(a), self.mac(b))
        client_output = client.communicate(timeout=30)[0]
        heard = listener.communicate(timeout=30)[0]
        self.assertEqual(client.returncode, 0, client_output + self.fabric.log())
        self.assertRegex(heard, r"^frames [1-9]\d*", heard)


# A plain AF_PACKET sender: argv = destination MAC, source MAC, EtherType.
PACKET_SOCKET_SENDER = r"""
import socket, sys, time
dest, source, ethertype = bytes.fromhex(sys.argv[1].replace(":", "")), \
    bytes.fromhex(sys.argv[2].replace(":", "")), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
frame = dest + source + ethertype.to_bytes(2, "big") + bytes(range(256)) * 4
end = time.monotonic() + 3
while time.monotonic() < end:
    s.send(frame)
    time.sleep(0.001)
"""

# A plain AF_PACKET listener: counts the frames from MAC argv[1] for 4 s.
PACKET_SOCKET_RECEIVER = r"""
import socket, sys, time
source = bytes.fromhex(sys.argv[1].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("eth0", 0))
s.settimeout(0.2)
print("listening", flush=True)
frames, end = 0, time.monotonic() + 4
while time.monotonic() < end:
    try:
        frame, address = s.recvfrom(65536)
    except socket.timeout:
        continue
    frames += frame[6:12] == source and address[2] != socket.PACKET_OUTGOING
print("frames", frames)
"""


class GidTableFollowsTheInterfaceTest(FabricTestCase):
    """Devices made on eth0 (`--device NAME=eth0`): a GID for each address
    of the interface, as the kernel keeps a netdev's, each usable across
    the veth, and the table follows the addresses as they come and go."""

    fabric_args = {"on_interface": True}

    def wait_for_gids(self, host, what, predicate):
        harness.wait_for(lambda: predicate(host.gids()), 10.0,
                         "%s's GIDs %s" % (host.device, what),
                         lambda: "%s\n%s" % (host.gids(), self.fabric.log()))

    def test_gid_1_is_the_interfaces_link_local_address(self):
        for host in self.fabric.hosts:
            link_local = host.addresses("scope", "link")
            self.assertEqual(len(link_local), 1, link_local)
            self.wait_for_gids(host, "to hold %s" % link_local[0],
                               lambda gids: gids.get(1) == link_local[0])
            self.assertEqual(host.gids()[0], "::ffff:" + host.address)
        # Over IPv6 link-local addresses (their scope is eth0) both ways.
        a, b = self.fabric.hosts
        for program in ("ibv_rc_pingpong", "ibv_ud_pingpong"):
            with self.subTest(program=program):
                self.assertPairSucceeded(run_pair(self.fabric, a, b, program, "-g", "1"), program)

    def test_addresses_added_and_removed_follow_with_events(self):
        """An IPv4 and an IPv6 address added on each host take GIDs 2 and 3
        (IBV_EVENT_GID_CHANGE), and RC and UD traffic runs between them, each
        QP's packets leaving from its source GID's address (the peer takes
        an RC QP's packets from its destination GID only). The IPv4 address
        removed leaves GID 2 empty and GID 3 where it was; a QP that names
        GID 2 cannot be connected."""
        a, b = self.fabric.hosts
        watch = hosts.AsyncWatch(a, self.fabric.log)
        added = {}
        try:
            for n, host in enumerate(self.fabric.hosts, 1):
                added[host] = ("10.77.1.%d" % n, "fd00:88::%d" % n)
                hosts.ip("-n", host.netns, "addr", "add", added[host][0] + "/24", "dev", "eth0")
                hosts.ip("-n", host.netns, "addr", "add", added[host][1] + "/64", "dev", "eth0",
                         "nodad")
            for host in self.fabric.hosts:
                v4, v6 = added[host]
                self.wait_for_gids(host, "to take the new addresses",
                                   lambda gids: gids.get(2) == "::ffff:" + v4 and
                                   gids.get(3) == v6)
            for gid in ("2", "3"):
                for program in ("ibv_rc_pingpong", "ibv_ud_pingpong"):
                    with self.subTest(program=program, gid=gid):
                        self.assertPairSucceeded(
                            run_pair(self.fabric, a, b, program, "-g", gid), program)
            # rdma_cm on the new addresses: the IDs take their GIDs, MADs and
            # QP packets leave from them (rping's RDMA READs and WRITEs).
            port = harness.free_tcp_port()
            for server in added[a]:
                with self.subTest(rping=server):
                    output = rdma_cm_pair(
                        self, self.fabric, ["rping", "-s", "-a", server, "-p", str(port), "-C",
                                            "5", "-v"],
                        ["rping", "-c", "-a", server, "-p", str(port), "-C", "5", "-v"], port)
                    self.assertEqual(output.count("ping data: rdma-ping-"), 5, output)
            for host in self.fabric.hosts:
                hosts.ip("-n", host.netns, "addr", "del", added[host][0] + "/24", "dev", "eth0")
            for host in self.fabric.hosts:
                v6 = added[host][1]
                self.wait_for_gids(host, "to lose the IPv4 address",
                                   lambda gids: 2 not in gids and gids.get(3) == v6)
            # The side that finds its GID 2 empty first ends the pair.
            pair = run_pair(self.fabric, a, b, "ibv_rc_pingpong", "-g", "2")
            self.assertTrue(all(side.returncode != 0 for side in pair), pair)
            self.assertIn("Failed to modify QP to RTR", pair[0].output + pair[1].output)
        finally:
            for host, (v4, v6) in added.items():
                for address in (v4 + "/24", v6 + "/64"):
                    subprocess.run(["ip", "-n", host.netns, "addr", "del", address, "dev",
                                    "eth0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            output = watch.stop()
        events = watch.events
        self.assertGreaterEqual(len(events), 2, output)
        self.assertEqual(set(events), {("IBV_EVENT_GID_CHANGE", "1")}, output)


    def test_an_address_added_and_removed_during_traffic(self):
        """ib_write_bw on GID 0 runs on while a third address comes and goes
        on a: the transfer completes, and a's context hears
        IBV_EVENT_GID_CHANGE for each."""
        a, b = self.fabric.hosts
        address = ["10.77.2.1/24", "dev", "eth0"]
        watch = hosts.AsyncWatch(a, self.fabric.log)
        try:
            add = _Later(1.5, lambda: hosts.ip("-n", a.netns, "addr", "add", *address))
            remove = _Later(3.0, lambda: hosts.ip("-n", a.netns, "addr", "del", *address))
            try:
                self.assertPairSucceeded(run_pair(self.fabric, a, b, "ib_write_bw", "-D", "4",
                                                  "-x", "0", timeout=60.0),
                                         "ib_write_bw while an address comes and goes")
            finally:
                add.cancel()
                remove.cancel()
                subprocess.run(["ip", "-n", a.netns, "addr", "del", *address],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            harness.wait_for(lambda: "10.77.2.1" not in str(a.gids()), 10.0,
                             "the address's GID to go", self.fabric.log)
        finally:
            output = watch.stop()
        events = watch.events
        self.assertEqual(events, [("IBV_EVENT_GID_CHANGE", "1")] * 2, output + self.fabric.log())


class PortFollowsItsLinkTest(unittest.TestCase):
    """A fabric per test: each changes the links."""

    def setUp(self):
        self.fabric = hosts.Fabric().start()
        self.addCleanup(self.fabric.close)

    def wait_for_port(self, host, what, predicate):
        harness.wait_for(lambda: predicate(host.port()), 10.0,
                         "%s's port %s" % (host.device, what), self.fabric.log)

    def test_state_and_events_follow_the_link(self):
        a, b = self.fabric.hosts
        watch = hosts.AsyncWatch(a, self.fabric.log)
        try:
            a.link("down")
            self.wait_for_port(a, "to go down", lambda p: "PORT_DOWN" in p["state"])
            self.assertIn("DISABLED", a.port()["phys_state"])
            self.assertEqual(self.sysfs_port_state(a), "1: DOWN")
            # b's end of the veth lost its carrier: b's port is down too.
            self.wait_for_port(b, "to go down", lambda p: "PORT_DOWN" in p["state"])
            a.link("up")
            for host in (a, b):
                self.wait_for_port(host, "to come back", lambda p: "PORT_ACTIVE" in p["state"])
            self.assertEqual(self.sysfs_port_state(a), "4: ACTIVE")
        finally:
            output = watch.stop()
        events = watch.events
        self.assertEqual(events, [("IBV_EVENT_PORT_ERR", "1"), ("IBV_EVENT_PORT_ACTIVE", "1")],
                         output)
        self.assertPairSucceeded(run_pair(self.fabric, a, b, "ibv_rc_pingpong", "-g", "0"))

    def test_a_link_down_during_traffic(self):
        """a's link goes down for a second in the middle of ib_write_bw, whose
        QPs wait 4 s before each retransmission (-u 20): the transfer
        completes once the link is back (what the kernel held or lost
        meanwhile arrives or is sent again), and a's context heard PORT_ERR
        then PORT_ACTIVE while its QP ran."""
        a, b = self.fabric.hosts
        watch = hosts.AsyncWatch(a, self.fabric.log)
        try:
            down = _Later(2.0, lambda: (a.link("down"), time.sleep(1.0), a.link("up")))
            try:
                self.assertPairSucceeded(run_pair(self.fabric, a, b, "ib_write_bw", "-D", "5",
                                                  "-u", "20", timeout=90.0),
                                         "ib_write_bw across a link that goes down")
            finally:
                down.cancel()
        finally:
            output = watch.stop()
        events = watch.events
        self.assertEqual(events, [("IBV_EVENT_PORT_ERR", "1"), ("IBV_EVENT_PORT_ACTIVE", "1")],
                         output)

    @staticmethod
    def sysfs_port_state(host):
        """What a program reading the device's tree finds (the kernel's file)."""
        path = os.path.join(host.daemon.sysfs_path, "class", "infiniband", host.device, "ports",
                            "1", "state")
        with open(path) as f:
            return f.read().strip()

    def test_an_mtu_change_reaches_the_port_without_a_restart(self):
        a, b = self.fabric.hosts
        self.fabric.set_mtu(9000)
        for host in (a, b):
            self.wait_for_port(host, "to take MTU 9000",
                               lambda p: mtu_of(p["active_mtu"]) == 4096)
        self.assertPairSucceeded(run_pair(self.fabric, a, b, "ib_write_bw"))
        self.fabric.set_mtu(1280)
        for host in (a, b):
            self.wait_for_port(host, "to take MTU 1280",
                               lambda p: mtu_of(p["active_mtu"]) == 1024)
        self.fabric.set_mtu(1000)
        for host in (a, b):
            self.wait_for_port(host, "to take MTU 1000",
                               lambda p: mtu_of(p["active_mtu"]) == 512)
        self.assertPairSucceeded(run_pair(self.fabric, a, b, "ib_send_bw"))

    def test_packets_above_a_shrunk_link_are_counted_logged_and_retried(self):
        """QPs set up at MTU 9000 keep their 4096-byte path MTU when b's link
        shrinks to 1500 under them: b's packets can no longer be sent. Each
        is counted in send_err and logged, and the RC QP retransmits until
        its retries are exhausted, as on a wire that drops them."""
        a, b = self.fabric.hosts
        self.fabric.set_mtu(9000)
        self.wait_for_port(b, "to take MTU 9000", lambda p: mtu_of(p["active_mtu"]) == 4096)
        shrink = _Later(3.0, lambda: b.link("mtu", "1500"))
        try:
            server, client = run_pair(self.fabric, a, b, "ib_write_bw", "-D", "8", timeout=90.0)
        finally:
            shrink.cancel()
        self.assertNotEqual(client.returncode, 0, client.output)
        self.assertIn("Failed status 12", client.output)  # IBV_WC_RETRY_EXC_ERR
        self.assertGreater(b.counter("send_err"), 0)
        self.assertGreater(b.counter("retry_exceeded_err"), 0)
        self.assertRegex(b.daemon.log(), r"device %s: \d+ packets? to %s not sent: Message too "
                         r"long \(eth0's MTU is 1500" % (b.device, re.escape(a.address)))

    def test_the_device_goes_with_its_interface(self):
        a, b = self.fabric.hosts
        hosts.ip("-n", a.netns, "link", "del", "eth0")  # both ends of the veth go
        for host in (a, b):
            harness.wait_for(lambda: host.device not in host.daemon.status().devices, 10.0,
                             "%s to be removed" % host.device, self.fabric.log)
            self.assertIn("interface eth0 is gone", host.daemon.log())
            listed = host.run([harness.require_program("ibv_devices")])
            self.assertNotIn(host.device, listed.stdout)

    def assertPairSucceeded(self, pair, what=""):
        for side in pair:
            self.assertEqual(side.returncode, 0, "%s: %s\n%s\n%s" % (
                what, side.args, side.output, self.fabric.log()))


class _Later:
    """Runs `action` once after `seconds`, in a thread, unless cancelled."""

    def __init__(self, seconds, action):
        self.timer = threading.Timer(seconds, action)
        self.timer.start()

    def cancel(self):
        self.timer.cancel()
        self.timer.join()


class UnprivilegedNamespaceTest(unittest.TestCase):
    """uroced as a rootless container runs it: started by an unprivileged
    user (nobody) inside a user and network namespace of its own (`unshare
    -Urn`), with no capability outside them. It cannot make a device node
    in /dev (the preload bridge gives one) or raise its priority, and two
    devices on the ends of a veth it made itself carry ibv_rc_pingpong."""

    SCRIPT = r"""
set -e
ip link set lo up
ip link add va type veth peer name vb
ip addr add 10.77.0.1/24 dev va; ip addr add 10.77.0.2/24 dev vb
ip link set va up; ip link set vb up
"$KIT/uroced" --runtime-dir "$BASE/run" --device uroce_ua=10.77.0.1 \
    --device uroce_ub=10.77.0.2 >"$BASE/uroced.log" 2>&1 &
daemon=$!
trap 'kill $daemon; wait $daemon' EXIT
# The pid file comes last, once every device is in the tree.
for _ in $(seq 100); do [ -s "$BASE/run/uroced.pid" ] && break; sleep 0.1; done
export SYSFS_PATH="$BASE/run/sysfs" UROCE_RUNTIME_DIR="$BASE/run"
export RDMAV_DRIVERS="$KIT/liburoce" LD_PRELOAD="${SANITIZERS:+$SANITIZERS:}$KIT/liburoce-bridge.so"
timeout 30 ibv_rc_pingpong -d uroce_ua -g 0 -p 18515 >"$BASE/server" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q ":4853 .* 0A " /proc/net/tcp && break; sleep 0.1; done
timeout 30 ibv_rc_pingpong -d uroce_ub -g 0 -p 18515 10.77.0.1
wait $server
"""
    NOBODY = 65534

    def test_runs_with_no_privilege(self):
        if os.geteuid() != 0:
            self.fail("this test starts the daemon as nobody: the suite runs as root (README)")
        # The kernel lets no chrooted process make a user namespace
        # (tools/release runs the suite in chroots), and a machine may forbid
        # them: what this test needs of its machine, not what it tests.
        probe = subprocess.run(["setpriv", "--reuid=%d" % self.NOBODY, "--regid=%d" % self.NOBODY,
                                "--clear-groups", "unshare", "-Urn", "true"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if probe.returncode != 0:
            self.skipTest("this machine makes no user namespace for nobody: " +
                          probe.stdout.strip())
        # The build may be where nobody cannot read: the daemon and libraries
        # go to a directory of nobody's.
        base = tempfile.mkdtemp(prefix="uroce-unprivileged-")
        self.addCleanup(shutil.rmtree, base, True)
        kit = os.path.join(base, "kit")
        os.mkdir(kit)
        provider = harness.required_path("UROCE_PROVIDER_FILE")
        for path in (harness.uroced_path(), provider, harness.required_path("UROCE_BRIDGE")):
            shutil.copy(path, kit)
        os.chmod(base, 0o755)
        os.chown(base, self.NOBODY, self.NOBODY)
        # A sanitizer build's runtimes come before the bridge, as in
        # harness.client_environment.
        env = dict(os.environ, KIT=kit, BASE=base,
                   SANITIZERS=os.environ.get("UROCE_SANITIZER_PRELOAD", ""))
        if env["SANITIZERS"]:
            harness.without_leak_check(env)
        result = subprocess.run(
            ["setpriv", "--reuid=%d" % self.NOBODY, "--regid=%d" % self.NOBODY, "--clear-groups",
             "unshare", "-Urn", "sh", "-c", self.SCRIPT],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=90)
        try:
            with open(os.path.join(base, "uroced.log")) as f:
                daemon_log = f.read()
        except OSError:
            daemon_log = "(no log)"
        try:
            with open(os.path.join(base, "server")) as f:
                server_output = f.read()
        except OSError:
            server_output = "(no output)"
        self.assertEqual(result.returncode, 0, "%s\n--- server\n%s\n%s" % (
            result.stdout, server_output, daemon_log))
        self.assertRegex(result.stdout, r"1000 iters in [\d.]+ seconds")
        self.assertIn("device uroce_ua ready on 10.77.0.1 via va (device node from the preload "
                      "bridge)", daemon_log)
        self.assertIn("active MTU 1024 (va's MTU is 1500)", daemon_log)


class TwoDaemonsOnOneMachineTest(unittest.TestCase):
    """Two daemons on one machine with a device of the same name (on
    addresses of their own) and one each of their own: a daemon removes
    only the /dev/infiniband nodes it made, so stopping the second leaves
    the first's nodes, devices and programs alone."""

    def test_stopping_one_daemon_leaves_the_others_devices_alone(self):
        tag = os.getpid()
        shared, first_own, second_own = ("uroce_%s%d" % (n, tag) for n in ("same", "one", "two"))
        node = lambda name: os.path.join("/dev/infiniband", "uverbs-" + name)
        first = harness.Daemon(["--device", "%s=127.0.0.5" % shared,
                                "--device", "%s=127.0.0.6" % first_own])
        second = harness.Daemon(["--device", "%s=127.0.0.7" % shared,
                                 "--device", "%s=127.0.0.8" % second_own])
        for daemon in (first, second):
            self.addCleanup(daemon.cleanup)
            daemon.start()
        made = os.path.islink(node(shared))  # as root; otherwise there are no nodes at all
        second.stop()
        for name in (shared, first_own):
            self.assertEqual(os.path.islink(node(name)), made,
                             "the second daemon removed the first's node for %s" % name)
        self.assertFalse(os.path.lexists(node(second_own)))
        pair = harness.run_pingpong(first.env(), shared, first_own, 100, 4096, log=first.log)
        for side in pair:
            self.assertEqual(side.returncode, 0, side.output)
        first.stop()
        for name in (shared, first_own):
            self.assertFalse(os.path.lexists(node(name)), "no daemon runs, yet %s stays" % name)


class MpiBetweenHostsTest(FabricTestCase):
    """Open MPI across two hosts, one rank on each, over UCX's verbs
    transports (pml ucx, so that nothing falls back to TCP): mpirun on a
    starts b's rank through a remote shell that enters b's namespace
    (mpi/netns_agent.sh), as ssh would enter another machine. Each daemon
    carries the ranks' traffic."""

    def test_open_mpi_over_ucx(self):
        skip_unless_ucx_has_verbs(self)
        a, b = self.fabric.hosts
        work = tempfile.mkdtemp(prefix="uroce-mpi-hosts-")
        self.addCleanup(shutil.rmtree, work, True)
        program = os.path.join(work, "pingpong_allreduce")
        subprocess.run([harness.require_program("mpicc.openmpi"), "-O2", "-o", program,
                        os.path.join(MPI_DIR, "pingpong_allreduce.c")], check=True,
                       capture_output=True)
        for host in self.fabric.hosts:
            with open(os.path.join(work, host.control_address + ".netns"), "w") as f:
                f.write(host.netns)
            with open(os.path.join(work, host.control_address + ".env"), "w") as f:
                f.writelines("%s=%s\n" % item for item in host.daemon.env().items()
                             if os.environ.get(item[0]) != item[1])
        agent = os.path.join(MPI_DIR, "netns_agent.sh")
        sent = lambda: [host.counter("sent_pkts") for host in self.fabric.hosts]
        before = sent()
        # Open MPI 4 reads OMPI_MCA_*, Open MPI 5's launcher PRTE_MCA_*.
        result = a.run(["env", "UROCE_NETNS_HOSTS=" + work, "OMPI_ALLOW_RUN_AS_ROOT=1",
                        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_plm_rsh_agent=" + agent,
                        "PRTE_MCA_plm_ssh_agent=" + agent, "OMPI_MCA_oob_tcp_if_include=eth0",
                        "PRTE_MCA_oob_tcp_if_include=eth0",
                        harness.require_program("mpirun.openmpi"), "-np", "2", "--host",
                        # A slot on this host and one on b (Open MPI 5 finds
                        # no slot on a by its address).
                        "localhost:1,%s:1" % b.control_address, "--mca", "pml", "ucx",
                        "-x", "UCX_TLS=self,rc_verbs,ud_verbs", program], timeout=180)
        context = "%s\n%s" % (result.stdout, self.fabric.log())
        self.assertEqual(result.returncode, 0, context)
        self.assertIn("allreduce 4096 longs over 2 ranks: ok", result.stdout, context)
        self.assertEqual(result.stdout.splitlines()[-1], "PASSED", context)
        # 100 round trips of 1 MiB each way, in packets of at most 1024 bytes.
        for host, was, now in zip(self.fabric.hosts, before, sent()):
            self.assertGreaterEqual(now - was, 100 * (1 << 20) // 1024, host.device)


class ThreeHostsOnABridgeTest(FabricTestCase):
    """Three hosts on one bridge: every pair connects, each through its own
    daemon, across the same segment."""

    fabric_args = {"count": 3}

    def test_every_pair_of_hosts_connects(self):
        a, b, c = self.fabric.hosts
        for server, client in ((a, b), (b, c), (c, a)):
            with self.subTest(server=server.letter, client=client.letter):
                self.assertPairSucceeded(
                    run_pair(self.fabric, server, client, "ibv_rc_pingpong", "-g", "0"),
                    "%s to %s" % (client.letter, server.letter))

    def test_multicast_reaches_the_members_on_other_hosts(self):
        """mckey: receivers on a and b join 239.1.2.3 (IGMP on their eth0),
        the sender on c sends 10 datagrams to the group; each receiver gets
        all 10, through its own daemon."""
        a, b, c = self.fabric.hosts
        group = "239.1.2.%d" % (os.getpid() % 200 + 1)
        hosts.mckey_to_members(self, self.fabric, group, (a, b), c)

    def test_pyverbs_multicast_reaches_the_members_on_other_hosts(self):
        """pyverbs_scripts/multicast.py: pyverbs' CMID joins a group on a and
        b (rdma_join_multicast), c sends 16 messages to it; each receiver
        gets all 16, whole, behind their GRH."""
        a, b, c = self.fabric.hosts
        group = "239.2.2.%d" % (os.getpid() % 200 + 1)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyverbs_scripts",
                              "multicast.py")
        role = lambda name: lambda host: [harness.PYTHON, script, name, host.address, group, "16"]
        hosts.multicast_to_members(self, self.fabric, group, (a, b), c, role("receive"),
                                   role("send"), "received 16")


if __name__ == "__main__":
    unittest.main()
