"""MPI on uroce, unmodified: a ping-pong of messages from 1 byte to 1 MiB,
every byte checked, and an allreduce, across two ranks (mpi/
pingpong_allreduce.c, built here with each implementation's compiler).

- Open MPI 4.1 and 5.0 over UCX (its default PML where a verbs device
  exists) and MPICH 4 (Debian builds it ch4:ucx) over UCX: one rank on
  uroce0, one on uroce1, each naming its device (UCX_NET_DEVICES; Open MPI's
  ranks through mpi/on_rank_device.sh, as Open MPI 5.0's mpirun crashes on
  MPMD command lines).
- Open MPI over libfabric (the OFI MTL, FI_PROVIDER=verbs): one rank on
  each device of a daemon whose devices sit on the two ends of a veth pair,
  in a network namespace of the test's own (mpi/over_veth.sh). libfabric's
  verbs provider offers RDM endpoints only on devices whose address belongs
  to an interface that is not a loopback; the default devices' are on lo
  (docs/middleware.md). On those, both ranks run on uroce0.

Both ranks run on one host, where UCX would carry everything through
shared memory; UCX_TLS=self,rc_verbs,ud_verbs keeps it to the devices, as it
would be between hosts. The daemon's packet counters show that it was.
"""

import os
import re
import shutil
import stat
import subprocess
import tempfile
import time

import harness
from programs import DaemonPerTest, diagnostics, elapsed, require, skip_unless_ucx_has_verbs

MPI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi")
SOURCE = os.path.join(MPI_DIR, "pingpong_allreduce.c")
OVER_VETH = os.path.join(MPI_DIR, "over_veth.sh")
ON_RANK_DEVICE = os.path.join(MPI_DIR, "on_rank_device.sh")
MPI_TIMEOUT = 180.0
# 100 round trips of 1 MiB each way: at least this many packets of 4096
# bytes from each device, whatever else UCX or libfabric sends.
MIN_PACKETS = 100 * (1 << 20) // 4096
UCX_DEVICES_ONLY = "self,rc_verbs,ud_verbs"


def build(compiler, directory):
    program = os.path.join(directory, os.path.basename(compiler))
    subprocess.run([require(compiler), "-O2", "-o", program, SOURCE], check=True,
                   capture_output=True, text=True)
    return program


class MpiPrograms(DaemonPerTest):

    @classmethod
    def setUpClass(cls):
        cls.build_dir = tempfile.mkdtemp(prefix="uroce-mpi-")
        # Readable by whoever the namespace maps the test's user to.
        os.chmod(cls.build_dir, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH |
                 stat.S_IXOTH)
        cls.open_mpi = build("mpicc.openmpi", cls.build_dir)
        cls.mpich = build("mpicc.mpich", cls.build_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.build_dir, ignore_errors=True)

    def sent_packets(self):
        stats = harness.parse_stats(self.daemon.stats_text())
        return {device: counters["sent_pkts"] for device, counters in stats.items()}

    def run_mpi(self, what, argv, devices):
        env = self.daemon.env()
        # Open MPI refuses root unless told; the tests run as whoever runs ctest.
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        before = self.sent_packets()
        started = time.monotonic()
        result = harness.run_program(argv, env, timeout=MPI_TIMEOUT,
                                     log=lambda: diagnostics(self.daemon))
        elapsed(what, time.monotonic() - started)
        after = self.sent_packets()
        context = "%s\n--- exit %d\n%s%s\n%s" % (" ".join(argv), result.returncode, result.stdout,
                                               result.stderr, diagnostics(self.daemon))
        self.assertEqual(result.returncode, 0, context)
        self.check_output(result.stdout, context)
        for device in devices:
            self.assertGreaterEqual(after[device] - before[device], MIN_PACKETS,
                                    "%s carried the traffic\n%s" % (device, context))

    def check_output(self, stdout, context):
        lines = stdout.splitlines()
        sizes = [line for line in lines if line.startswith("pingpong ")]
        self.assertEqual(len(sizes), 11, context)  # 1 B to 1 MiB, by 4
        self.assertTrue(all(line.endswith(": ok") for line in sizes), context)
        self.assertIn("allreduce 4096 longs over 2 ranks: ok", lines, context)
        self.assertEqual(lines[-1], "PASSED", context)

    def test_open_mpi_over_ucx_between_devices(self):
        skip_unless_ucx_has_verbs(self)
        self.run_mpi("Open MPI over UCX",
                     [require("mpirun.openmpi"), "--oversubscribe", "--mca", "pml", "ucx",
                      "-np", "2", "-x", "UCX_TLS=" + UCX_DEVICES_ONLY, ON_RANK_DEVICE, "ucx",
                      self.open_mpi], ["uroce0", "uroce1"])

    def test_mpich_over_ucx_between_devices(self):
        skip_unless_ucx_has_verbs(self)
        rank = lambda device: ["-np", "1", "-env", "UCX_TLS", UCX_DEVICES_ONLY,
                               "-env", "UCX_NET_DEVICES", "%s:1" % device, self.mpich]
        self.run_mpi("MPICH over UCX",
                     [require("mpirun.mpich"), *rank("uroce0"), ":", *rank("uroce1")],
                     ["uroce0", "uroce1"])

    def test_open_mpi_over_libfabric_on_uroce0(self):
        self.run_mpi("Open MPI over libfabric verbs",
                     [require("mpirun.openmpi"), "--oversubscribe", "--mca", "pml", "cm",
                      "--mca", "mtl", "ofi", "-x", "FI_PROVIDER=verbs",
                      "-x", "FI_VERBS_DEVICE_NAME=uroce0", "-np", "2", self.open_mpi],
                     ["uroce0"])

    def test_open_mpi_over_libfabric_between_devices_on_veth(self):
        runtime = tempfile.mkdtemp(prefix="uroce-veth-", dir=self.build_dir)
        os.chmod(runtime, stat.S_IRWXU)
        env = harness.client_environment(runtime)
        env.update(UROCED=harness.uroced_path(), OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        stats = [harness.tool_path() or require("uroce"), "stats"]
        script = ("%s --oversubscribe --mca pml cm --mca mtl ofi -np 2 -x FI_PROVIDER=verbs "
                  "%s verbs %s && %s" % (require("mpirun.openmpi"), ON_RANK_DEVICE,
                                         self.open_mpi, " ".join(stats)))
        # A network namespace, with a user namespace that makes the test's
        # user root there; root needs none (and a chroot may not make one).
        user_namespace = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        argv = [require("unshare"), *user_namespace, "--net", OVER_VETH, "bash", "-c", script]
        started = time.monotonic()
        result = harness.run_program(argv, env, timeout=MPI_TIMEOUT)
        elapsed("Open MPI over libfabric verbs, veth", time.monotonic() - started)
        log = ""
        if os.path.exists(os.path.join(runtime, "uroced.log")):
            with open(os.path.join(runtime, "uroced.log")) as f:
                log = f.read()
        context = "%s\n--- exit %d\n%s%s\n--- uroced log\n%s" % (
            " ".join(argv), result.returncode, result.stdout, result.stderr, log)
        self.assertEqual(result.returncode, 0, context)
        mpi_output, _, counters = result.stdout.partition("device uroce0 ")
        self.check_output(mpi_output, context)
        sent = [int(n) for n in re.findall(r"(?m)^  sent_pkts (\d+)$", counters)]
        self.assertEqual(len(sent), 2, context)
        self.assertTrue(all(n >= MIN_PACKETS for n in sent), context)
