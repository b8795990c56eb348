"""Middleware on uroce, unmodified and with no workaround settings: UCX's
verbs transports between uroce0 and uroce1 (ucx_perftest, a tag-matching
ping-pong whose server runs on uroce1 and client on uroce0), and what UCX
reads from sysfs itself.

UCX's ud_verbs takes a received datagram only when the GRH's destination is
a GID of its port: it reads the GRH as IPv4 when the completion's SL says so
(2, as mlx5 reports a RoCEv2 IPv4 packet), and drops it otherwise.
"""

import os
import re
import subprocess
import tempfile
import time

import harness
from programs import (DaemonPerTest, diagnostics, elapsed, require, skip_unless_ucx_has_verbs,
                      ucx_perftest_mode_options)

PERFTEST_TIMEOUT = 60.0
ITERATIONS = 1000


class UcxPerftest(DaemonPerTest):
    """A private daemon per test; ucx_perftest's server on uroce1, its
    client on uroce0, one UCX transport each time (UCX_TLS)."""

    def perftest(self, transport):
        skip_unless_ucx_has_verbs(self)
        port = harness.free_tcp_port()
        common = ["-t", "tag_lat", "-n", str(ITERATIONS), "-p", str(port),
                  *ucx_perftest_mode_options()]
        server_env = self.daemon.env()
        server_env.update(UCX_TLS=transport, UCX_NET_DEVICES="uroce1:1")
        client_env = self.daemon.env()
        client_env.update(UCX_TLS=transport, UCX_NET_DEVICES="uroce0:1")
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            server = subprocess.Popen([require("ucx_perftest"), *common], stdin=subprocess.DEVNULL,
                                      stdout=out, stderr=subprocess.STDOUT, text=True,
                                      env=server_env)
            try:
                harness.wait_for(lambda: server.poll() is not None or
                                 harness.tcp_port_listening(port), 15.0,
                                 "ucx_perftest's server to listen on %d" % port,
                                 lambda: diagnostics(self.daemon))
                client = harness.run_program([require("ucx_perftest"), *common, "127.0.0.1"],
                                             client_env, timeout=PERFTEST_TIMEOUT,
                                             log=lambda: diagnostics(self.daemon))
                server.wait(timeout=PERFTEST_TIMEOUT)
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
            out.seek(0)
            server_output = out.read()
        elapsed("ucx_perftest %s" % transport, time.monotonic() - started)
        context = "--- server, exit %s\n%s\n--- client, exit %d\n%s%s\n%s" % (
            server.returncode, server_output, client.returncode, client.stdout, client.stderr,
            diagnostics(self.daemon))
        self.assertEqual(server.returncode, 0, context)
        self.assertEqual(client.returncode, 0, context)
        # Its final row: every iteration done, a latency above zero.
        final = re.search(r"(?m)^Final:\s+(\d+)\s+([\d.]+)\s", client.stdout)
        self.assertIsNotNone(final, context)
        self.assertEqual(int(final.group(1)), ITERATIONS, context)
        self.assertGreater(float(final.group(2)), 0.0, context)

    def test_ud_verbs(self):
        self.perftest("ud_verbs")

    def test_rc_verbs_with_ud_alongside(self):
        # rc_verbs needs an auxiliary transport to wire up: ud_verbs.
        self.perftest("rc_verbs,ud_verbs")


class UcxReadsSysfs(DaemonPerTest):
    """UCX reads /sys/class/infiniband itself, past libibverbs: GID types and
    netdevs (to pick a RoCE v2 GID), the device's NUMA node and local CPUs.
    Every such read must find the uroce device's file."""

    def test_every_file_ucx_reads_is_there(self):
        skip_unless_ucx_has_verbs(self)
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace")
            env = self.daemon.env()
            env["UCX_LOG_LEVEL"] = "debug"
            info = harness.run_program(
                [require("strace"), "-f", "-e", "trace=%file", "-o", trace,
                 require("ucx_info"), "-d"], env, timeout=PERFTEST_TIMEOUT)
            with open(trace) as f:
                calls = f.read()
        context = "%s\n%s\n%s" % (info.stdout[-2000:], info.stderr[-4000:], diagnostics(self.daemon))
        self.assertEqual(info.returncode, 0, context)
        tree = self.daemon.sysfs_path
        read_there = [line for line in calls.splitlines()
                      if "/sys/class/infiniband" in line or tree + "/class/infiniband" in line]
        # The bridge turned every /sys/class/infiniband path into the tree's.
        self.assertTrue(any(tree + "/class/infiniband/uroce0/ports/1/gid_attrs/types/0" in line
                            and "ENOENT" not in line for line in read_there), context)
        # UCX up to 1.17 reads the device's NUMA node (1.18 no longer does):
        # through the device/ link of the tree.
        if re.search(r"/infiniband/\w+/device/numa_node", calls):
            self.assertTrue(any(tree + "/class/infiniband/uroce1/device/numa_node" in line
                                for line in read_there), context)
        # libibverbs looks for device/modalias, which a virtual device (rxe's
        # too) does not have; everything else must be found.
        missing = [line for line in read_there
                   if "ENOENT" in line and "/device/modalias" not in line]
        self.assertEqual(missing, [], context)
        self.assertNotIn("failed to read", info.stderr, context)
        for device in ("uroce0", "uroce1"):
            self.assertIn("Device: %s:1" % device, info.stdout, context)

