"""Unmodified rdma-core programs (ibv_devices, ibv_devinfo) see uroce devices
as they would see a RoCE NIC."""

import os
import re
import shutil
import tempfile
import unittest

import harness
from harness import DEFAULT_DEVICES


class RdmaCoreToolsTest(harness.DaemonTestCase):
    """Against a daemon with the default devices."""

    @classmethod
    def setUpClass(cls):
        harness.require_program("ibv_devices")
        harness.require_program("ibv_devinfo")
        super().setUpClass()

    def test_ibv_devices_lists_both_devices_with_their_node_guids(self):
        """ibv_devices shows uroce0 and uroce1, each with the EUI-64 node GUID
        of its address."""
        listed = harness.parse_ibv_devices(self.run_ok(["ibv_devices"]).stdout)
        expected = {name: harness.guid_hex(harness.node_guid_for(address))
                    for name, address in DEFAULT_DEVICES.items()}
        self.assertEqual(listed, expected)
        self.assertEqual(expected["uroce0"], "00007ffffe000001")  # the documented example

    def test_ibv_devinfo_verbose_shows_active_roce_v2_ports(self):
        """ibv_devinfo -v: both ports ACTIVE, Ethernet, MTU 4096, GID 0 is the
        IPv4-mapped address of type RoCE v2, node GUID from the address."""
        blocks = harness.split_ibv_devinfo(self.run_ok(["ibv_devinfo", "-v"]).stdout)
        self.assertEqual(sorted(blocks), sorted(DEFAULT_DEVICES))
        for name, address in DEFAULT_DEVICES.items():
            with self.subTest(device=name):
                block = blocks[name]
                self.assertEqual(devinfo_field(block, "node_guid"),
                                 harness.guid_colon(harness.node_guid_for(address)))
                self.assertEqual(devinfo_field(block, "phys_port_cnt"), "1")
                self.assertRegex(devinfo_field(block, "state"), r"^PORT_ACTIVE \(4\)$")
                self.assertRegex(devinfo_field(block, "phys_state"), r"^LINK_UP")
                self.assertEqual(devinfo_field(block, "link_layer"), "Ethernet")
                self.assertRegex(devinfo_field(block, "max_mtu"), r"^4096 ")
                self.assertRegex(devinfo_field(block, "active_mtu"), r"^4096 ")
                self.assertRegex(block, r"GID\[\s*0\]:\s*%s, RoCE v2\n" %
                                 re.escape(harness.gid0_for(address)))

    def test_ibv_devinfo_verbose_lists_xrc_and_odp_capabilities(self):
        """ibv_devinfo -v names XRC and memory windows (type 2B) among the
        capability flags, implicit ODP and ODP for every RC operation."""
        blocks = harness.split_ibv_devinfo(self.run_ok(["ibv_devinfo", "-v"]).stdout)
        self.assertEqual(sorted(blocks), sorted(DEFAULT_DEVICES))
        for name, block in blocks.items():
            with self.subTest(device=name):
                flags = listed_under(block, "device_cap_flags")
                self.assertIn("XRC", flags)
                self.assertEqual([f for f in flags if f.startswith("MEM_WINDOW")],
                                 ["MEM_WINDOW", "MEM_WINDOW_TYPE_2B"], flags)
                self.assertEqual(listed_under(block, "general_odp_caps"),
                                 ["ODP_SUPPORT", "ODP_SUPPORT_IMPLICIT"])
                self.assertEqual(listed_under(block, "rc_odp_caps"),
                                 ["SUPPORT_SEND", "SUPPORT_RECV", "SUPPORT_WRITE",
                                  "SUPPORT_READ", "SUPPORT_ATOMIC", "SUPPORT_SRQ"])

    def test_ibv_devinfo_for_one_device(self):
        """ibv_devinfo -d uroce1 shows that device only."""
        blocks = harness.split_ibv_devinfo(
            self.run_ok(["ibv_devinfo", "-d", "uroce1"]).stdout)
        self.assertEqual(list(blocks), ["uroce1"])

    def test_ibv_devinfo_for_an_unknown_device_fails(self):
        """ibv_devinfo -d nosuch exits non-zero and names the device."""
        result = self.daemon.run(["ibv_devinfo", "-d", "nosuch"])
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("nosuch", result.stderr)
        self.assertNotIn("hca_id", result.stdout)

    def test_programs_leave_no_objects_behind(self):
        """After ibv_devinfo exits, the daemon has no client and no objects."""
        self.run_ok(["ibv_devinfo", "-v"])
        status = self.daemon.status()
        self.assertEqual(status.client_count, 0, status.text)
        for name in DEFAULT_DEVICES:
            self.assertEqual(status.devices[name].objects, harness.zero_counts(), status.text)


def devinfo_field(block, name):
    value = harness.devinfo_field(block, name)
    if value is None:
        raise AssertionError("no %s in:\n%s" % (name, block))
    return value


def listed_under(block, name):
    """The names ibv_devinfo -v lists one per line under `name:`."""
    m = re.search(r"^\s*%s:[^\n]*\n((?:\t{5}\S+\n)*)" % re.escape(name), block, flags=re.M)
    if not m:
        raise AssertionError("no %s in:\n%s" % (name, block))
    return m.group(1).split()


class GidLayoutCases:
    """uroced --gid-layout: the GID table as a NIC lays it out, for programs
    that hard-code an index (GID 3, mlx5's RoCE v2 IPv4 entry)."""

    # (index, ibv_devinfo's GID text pattern, type) of every entry shown
    ENTRIES = ()
    ADDRESS_INDEX = 0  # the device address's RoCE v2 entry

    def test_ibv_devinfo_shows_the_table_as_the_nic_does(self):
        blocks = harness.split_ibv_devinfo(self.run_ok(["ibv_devinfo", "-v"]).stdout)
        for name, address in DEFAULT_DEVICES.items():
            with self.subTest(device=name):
                block = blocks[name]
                for index, pattern, kind in self.ENTRIES:
                    pattern = pattern.replace("ADDRESS", re.escape(harness.gid0_for(address)))
                    self.assertRegex(block, r"GID\[\s*%d\]:\s*%s, %s\n" % (index, pattern, kind))
                self.assertNotRegex(block, r"GID\[\s*%d\]" % len(self.ENTRIES))

    def test_a_program_runs_on_the_address_entry(self):
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", 5, 64,
                                              log=self.daemon.log,
                                              extra_args=("-g", str(self.ADDRESS_INDEX)))
        self.assertEqual((server.returncode, client.returncode), (0, 0),
                         server.output + client.output)


class Mlx5GidLayoutTest(GidLayoutCases, harness.DaemonTestCase):
    """mlx5's: each address as RoCE v1 then v2, the link-local one first;
    a v1 entry is refused, with why, when used."""

    daemon_args = ("--gid-layout", "mlx5")
    ENTRIES = ((0, r"fe80:[0-9a-f:]+", "RoCE v1"), (1, r"fe80::[0-9a-f:]+", "RoCE v2"),
               (2, r"[0:]+ffff:[0-9a-f:]+", "RoCE v1"), (3, "ADDRESS", "RoCE v2"))
    ADDRESS_INDEX = 3

    def test_a_roce_v1_entry_is_refused_with_why(self):
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", 5, 64,
                                              log=self.daemon.log, extra_args=("-g", "2"))
        self.assertNotEqual(client.returncode, 0, client.output)
        self.assertIn("source GID index 2 is a RoCE v1 entry (GID layout mlx5), and uroce "
                      "carries RoCE v2 alone: use index 3, the same address's RoCE v2 entry "
                      "(Invalid argument)", self.daemon.log())


class RxeGidLayoutTest(GidLayoutCases, harness.DaemonTestCase):
    """rxe's: the link-local GID at 0, the address at 1, all RoCE v2."""

    daemon_args = ("--gid-layout", "rxe")
    ENTRIES = ((0, r"fe80::[0-9a-f:]+", "RoCE v2"), (1, "ADDRESS", "RoCE v2"))
    ADDRESS_INDEX = 1


class NoDaemonTest(unittest.TestCase):
    """Without a running daemon there are no uroce devices."""

    def setUp(self):
        harness.require_program("ibv_devices")
        self.base = tempfile.mkdtemp(prefix="uroce-sys-")
        self.addCleanup(shutil.rmtree, self.base, True)

    def test_ibv_devices_shows_no_uroce_device_without_a_tree(self):
        """A runtime directory where no daemon has published a tree lists no
        uroce device (and ibv_devices does not crash)."""
        runtime_dir = os.path.join(self.base, "run")
        os.mkdir(runtime_dir, 0o700)
        result = harness.run_program(["ibv_devices"],
                                     env=harness.client_environment(runtime_dir))
        self.assertGreaterEqual(result.returncode, 0, "killed by a signal: " + result.stderr)
        self.assertNotIn("uroce", result.stdout + result.stderr)

    def test_devices_disappear_when_the_daemon_stops(self):
        """After the daemon exits, ibv_devices no longer lists its devices."""
        daemon = harness.Daemon(base_dir=self.base)
        self.addCleanup(daemon.cleanup)
        daemon.start()
        self.assertIn("uroce0", harness.parse_ibv_devices(daemon.run(["ibv_devices"]).stdout))
        self.assertEqual(daemon.stop(), 0, daemon.log())
        result = daemon.run(["ibv_devices"])
        self.assertGreaterEqual(result.returncode, 0, "killed by a signal: " + result.stderr)
        self.assertNotIn("uroce", result.stdout)


if __name__ == "__main__":
    unittest.main()
