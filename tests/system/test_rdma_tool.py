"""iproute2's `rdma` tool and libibverbs' netlink enumeration against the
bridge's RDMA netlink, answered by the daemon as the kernel's nldev.c
answers it (docs/kernel-bridge.md).

Expected lines are built from what the test set up and from the kernel's
formats: node GUIDs from the devices' addresses, QP numbers, PSNs and keys
from pyverbs_scripts/resources.py, counters from `uroce stats`."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading

import harness
from programs import DaemonPerTest, diagnostics, require

HERE = os.path.dirname(os.path.abspath(__file__))
RESOURCES = os.path.join(HERE, "pyverbs_scripts", "resources.py")
PROBE = os.path.join(HERE, "rdma_netlink_probe.py")
EIO, EINVAL, EOPNOTSUPP = 5, 22, 95
IBV_EVENT_DEVICE_FATAL, IBV_QPS_RTS = 8, 3
RDMA_CM_EVENT_DEVICE_REMOVAL = 11


def interface_with_ipv4():
    """(name, first IPv4 address) of an interface other than lo, from `ip`."""
    out = subprocess.run([require("ip"), "-4", "-o", "addr", "show"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields[1] != "lo" and fields[2] == "inet":
            return fields[1], fields[3].split("/")[0]
    raise AssertionError("this host has no IPv4 address outside lo to put a device on\n" + out)


class RdmaTool(DaemonPerTest):

    def rdma(self, *args, env=None):
        result = harness.run_program([require("rdma"), *args], env or self.daemon.env(),
                                     log=lambda: diagnostics(self.daemon))
        self.assertEqual(result.returncode, 0, "rdma %s\n%s%s\n%s" % (
            " ".join(args), result.stdout, result.stderr, diagnostics(self.daemon)))
        return result.stdout

    def fw_ver(self, device):
        with open(os.path.join(self.daemon.sysfs_path, "class", "infiniband", device,
                               "fw_ver")) as f:
            return f.read().strip()

    def dev_line(self, index, device, address):
        """What `rdma dev` prints of a device, as a pattern: iproute2 6.x
        adds the device's protocol, which must then be RoCE."""
        guid = harness.guid_colon(harness.node_guid_for(address))
        return re.escape("%d: %s: node_type ca " % (index, device)) + "(protocol roce )?" + \
            re.escape("fw %s node_guid %s sys_image_guid %s \n" % (
                self.fw_ver("uroce0"), guid, guid))

    def test_dev_lists_each_device_with_its_guid(self):
        lines = [self.dev_line(index, device, address) for index, (device, address)
                 in enumerate(sorted(harness.DEFAULT_DEVICES.items()))]
        self.assertRegex(self.rdma("dev"), "^" + "".join(lines) + "$")
        self.assertRegex(self.rdma("dev", "show", "uroce1"), "^" + lines[1] + "$")

    def test_link_shows_port_state_and_netdev(self):
        self.assertEqual(self.rdma("link"),
                         "link uroce0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
                         "link uroce1/1 state ACTIVE physical_state LINK_UP netdev lo \n")

    def test_system(self):
        # iproute2 6.15 adds the monitor mode, which no uroce device has.
        self.assertRegex(self.rdma("system"), r"^netns shared (monitor off )?copy-on-fork on\n$")

    def test_statistic_shows_the_devices_counters(self):
        # Every counter with its value, in the daemon's order: on one line
        # (iproute2 6.1) or one per line (6.15).
        stats = harness.parse_stats(self.daemon.stats_text())
        for device in ("uroce0", "uroce1"):
            words = self.rdma("statistic", "show", "link", device + "/1").split()
            self.assertEqual(words[:2], ["link", device + "/1"])
            expected = [word for name, value in stats[device].items()
                        for word in (name, str(value))]
            self.assertEqual(words[2:], expected)

    def test_resources_of_a_running_program(self):
        port = harness.free_tcp_port()
        # Enough QPs that one device's table needs more than one 4096-byte
        # datagram, which is all `rdma` reads at once.
        pairs = 60
        holder = subprocess.Popen([harness.PYTHON, RESOURCES, str(port), str(pairs)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=self.daemon.env())
        try:
            line = holder.stdout.readline()
            self.assertTrue(line, holder.stderr.read() if holder.poll() is not None else "")
            held = json.loads(line)
            pid = holder.pid
            # The listener's librdmacm opened uroce1 once more, with a PD of its own.
            # A PD's users are its QPs and MR.
            self.assertEqual(self.rdma("res"),
                             "0: uroce0: pd 1 cq 1 qp %d cm_id 0 mr 1 ctx 1 srq 0 \n"
                             "1: uroce1: pd 2 cq 1 qp %d cm_id 1 mr 1 ctx 2 srq 0 \n" % (
                                 pairs, pairs))
            tail = "pid %d comm python3 \n" % pid
            qp_lines = []
            for device, peer in (("uroce0", "uroce1"), ("uroce1", "uroce0")):
                for lqpn, rqpn in zip(held[device]["qpns"], held[peer]["qpns"]):
                    qp_lines.append(
                        "link %s/1 lqpn %d rqpn %d type RC state RTS rq-psn %d sq-psn %d "
                        "path-mig-state MIGRATED pdn 1 %s" % (
                            device, lqpn, rqpn, held[peer]["sq_psn"], held[device]["sq_psn"],
                            tail))
            self.assertEqual(self.rdma("res", "show", "qp"), "".join(qp_lines))
            one = held["uroce1"]["qpns"][1]
            self.assertEqual(self.rdma("res", "show", "qp", "link", "uroce1/1", "lqpn", str(one)),
                             qp_lines[pairs + 1])
            self.assertEqual(self.rdma("res", "show", "mr"), "".join(
                "dev %s mrn 1 rkey 0x%x lkey 0x%x mrlen 8192 pdn 1 %s" % (
                    device, held[device]["rkey"], held[device]["lkey"], tail)
                for device in ("uroce0", "uroce1")))
            ctxn = re.findall(r"ctxn (\d+)", self.rdma("res", "show", "ctx"))
            self.assertEqual(len(ctxn), 3)
            contexts = list(zip(("uroce0", "uroce1", "uroce1"), ctxn))
            self.assertEqual(self.rdma("res", "show", "ctx"), "".join(
                "dev %s ctxn %s %s" % (device, n, tail) for device, n in contexts))
            self.assertEqual(self.rdma("res", "show", "pd"), "".join(
                "dev %s pdn 1 users %d ctxn %s %s" % (device, users, n, tail)
                for (device, n), users in zip(contexts, (pairs + 1, pairs + 1, 0))))
            self.assertEqual(self.rdma("res", "show", "cq"), "".join(
                "dev %s cqn 1 cqe %d users %d adaptive-moderation off ctxn %s %s" % (
                    device, held[device]["cqe"], 2 * pairs, n, tail)
                for device, n in contexts[:2]))
            self.assertRegex(self.rdma("res", "show", "cm_id"),
                             r"^link uroce1/1 cm-idn \d+ state LISTEN ps TCP %s"
                             r"src-addr 127\.0\.0\.2:%d \n$" % (re.escape(tail[:-1]), port))
        finally:
            holder.stdin.close()
            holder.wait(timeout=10)
            errors = holder.stderr.read()
            holder.stdout.close()
            holder.stderr.close()
        self.assertEqual(holder.returncode, 0, errors)
        self.assertEqual(self.rdma("res", "show", "qp"), "")

    def rdma_fails(self, *args):
        result = harness.run_program([require("rdma"), *args], self.daemon.env(),
                                     log=lambda: diagnostics(self.daemon))
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        return result.stderr

    def test_link_add_puts_a_device_on_an_interface(self):
        netdev, address = interface_with_ipv4()
        self.assertEqual(self.rdma("link", "add", "uroce2", "type", "uroce", "netdev", netdev), "")
        self.assertRegex(self.rdma("dev", "show", "uroce2"),
                         "^" + self.dev_line(2, "uroce2", address) + "$")
        self.assertEqual(self.rdma("link", "show", "uroce2/1"),
                         "link uroce2/1 state ACTIVE physical_state LINK_UP netdev %s \n" % netdev)
        gid_file = os.path.join(self.daemon.sysfs_path, "class", "infiniband", "uroce2", "ports",
                                "1", "gid_attrs", "ndevs", "0")
        with open(gid_file) as f:
            self.assertEqual(f.read(), netdev + "\n")
        # The new device carries traffic: ibv_rc_pingpong from uroce0 to it.
        server, client = harness.run_pingpong(self.daemon.env(), "uroce2", "uroce0", 100, 4096,
                                              log=lambda: diagnostics(self.daemon))
        self.assertEqual((server.returncode, client.returncode), (0, 0),
                         server.output + client.output)
        self.assertIn("remote address: LID 0x0000", client.output)
        self.assertIn("GID %s" % harness.gid0_for(address), client.output)
        # One device per interface, as rxe allows; the name is taken now too.
        self.assertEqual(
            self.rdma_fails("link", "add", "uroce3", "type", "uroce", "netdev", netdev),
            "Error: uroce2 already has a device on %s.\nerror: File exists\n" % netdev)
        self.assertEqual(
            self.rdma_fails("link", "add", "uroce2", "type", "uroce", "netdev", "lo"),
            "Error: a device is already named uroce2.\nerror: File exists\n")

    def test_link_add_refusals_say_why(self):
        cases = [
            (("uroce2", "uroce", "lo"),
             "Error: uroce0 already has a device on lo.\nerror: File exists\n"),
            (("uroce2", "rxe", "lo"),
             "Error: no link type rxe here: uroce makes uroce links.\nerror: Invalid argument\n"),
            (("uroce2", "uroce", "nosuch0"),
             "Error: no network interface nosuch0.\nerror: No such device\n"),
            (("Uroce2", "uroce", "lo"),
             "Error: device name 'Uroce2' must start with 'uroce' and use [a-z0-9_].\n"
             "error: Invalid argument\n"),
        ]
        for (name, kind, netdev), expected in cases:
            self.assertEqual(self.rdma_fails("link", "add", name, "type", kind, "netdev", netdev),
                             expected)
        self.assertEqual(self.rdma("dev").count("\n"), 2)

    def test_link_delete_ends_what_was_on_the_device(self):
        """A program holds objects on both devices and a listener on uroce1.
        Deleting uroce1 gives its context IBV_EVENT_DEVICE_FATAL and its
        listener DEVICE_REMOVAL, and fails its next verb with EIO, as the
        kernel's disassociation does; its uroce0 objects stay. The device
        leaves the tree and every listing, and its index is not given again."""
        holder = subprocess.Popen([harness.PYTHON, RESOURCES, str(harness.free_tcp_port()), "2",
                                   "removal"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=self.daemon.env())
        # Whatever it waits for and does not get, it is not waited for for ever.
        watchdog = threading.Timer(30, holder.kill)
        watchdog.start()
        try:
            if not holder.stdout.readline():
                self.fail("the holder ended: " + holder.stderr.read())
            self.assertEqual(self.rdma("link", "delete", "uroce1"), "")
            holder.stdin.write("\n")
            holder.stdin.flush()
            seen = json.loads(holder.stdout.readline() or "null")
            self.assertEqual(holder.wait(timeout=10), 0, holder.stderr.read())
        finally:
            watchdog.cancel()
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            for f in (holder.stdin, holder.stdout, holder.stderr):
                f.close()
        self.assertEqual(seen, {"async_event": IBV_EVENT_DEVICE_FATAL,
                                "cm_event": RDMA_CM_EVENT_DEVICE_REMOVAL, "pd_errno": EIO,
                                "uroce0_qp_state": IBV_QPS_RTS})
        self.assertEqual(self.rdma("dev").splitlines()[0][:10], "0: uroce0:")
        self.assertEqual(len(self.rdma("dev").splitlines()), 1)
        self.assertFalse(os.path.exists(os.path.join(self.daemon.sysfs_path, "class",
                                                     "infiniband", "uroce1")))
        self.assertNotIn("uroce1", self.daemon.status().devices)
        self.assertEqual(self.rdma_fails("link", "delete", "uroce1"),
                         "Wrong device name - uroce1\n")
        netdev, _ = interface_with_ipv4()
        self.assertEqual(self.rdma("link", "add", "uroce1", "type", "uroce", "netdev", netdev), "")
        self.assertRegex(self.rdma("dev").splitlines()[1], r"^2: uroce1: ")

    def test_raw_requests_get_the_kernels_answers(self):
        result = harness.run_program([harness.PYTHON, PROBE], self.daemon.env(),
                                     log=lambda: diagnostics(self.daemon))
        self.assertEqual(result.returncode, 0, result.stderr)
        got = json.loads(result.stdout)
        self.assertNotEqual(got["port"], 0)
        self.assertEqual(got["unknown_device"], {"type": 2, "seq": 11, "pid": got["port"],
                                                 "error": -EINVAL, "sender": 0})
        self.assertEqual(got["unknown_device_dump"],
                         {"type": 3, "flags": 2, "seq": 12, "status": -EINVAL})
        self.assertEqual(got["newlink"], -EINVAL)
        self.assertEqual(got["dellink"], -EINVAL)
        # The GET without NLM_F_ACK is answered by its reply alone, the SYS_GET
        # with one by its reply and then the ACK.
        self.assertEqual(got["no_ack"], [[[5121, 14]], [[5126, 15]], [[2, 15]]])
        self.assertEqual(got["bad_length"], {"type": 2, "seq": 16, "error": -EINVAL})
        self.assertEqual(got["dump_names"], ["uroce0", "uroce1"])

    def test_libibverbs_enumerates_over_netlink(self):
        """A copy of the tree without class/infiniband_verbs, where the sysfs
        enumeration starts: the devices can only be found over netlink (the
        device dump, then GET_CHARDEV for each uverbs node)."""
        with tempfile.TemporaryDirectory() as tmp:
            tree = os.path.join(tmp, "sysfs")
            shutil.copytree(self.daemon.sysfs_path, tree, symlinks=True)
            shutil.rmtree(os.path.join(tree, "class", "infiniband_verbs"))
            env = self.daemon.env()
            env["SYSFS_PATH"] = tree
            devices = harness.run_program([require("ibv_devices")], env)
            info = harness.run_program([require("ibv_devinfo"), "-d", "uroce1"], env)
        self.assertEqual(devices.returncode, 0, devices.stderr)
        for device, address in harness.DEFAULT_DEVICES.items():
            self.assertIn("%s\t%016x" % (device, harness.node_guid_for(address)),
                          devices.stdout.replace(" ", ""))
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertIn("state:\t\t\tPORT_ACTIVE", info.stdout)
