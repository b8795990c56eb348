"""uroced's life: what it publishes, how it refuses bad options and a second
instance, and what it leaves behind when it stops (docs/uroced.md)."""

import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import unittest

import harness


class LifecycleTestCase(unittest.TestCase):
    """Each test gets its own temporary directory for runtime dirs and logs."""

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="uroce-sys-")
        self.addCleanup(shutil.rmtree, self.base, True)

    def new_daemon(self, args=(), start=True):
        daemon = harness.Daemon(args, base_dir=self.base)
        self.addCleanup(daemon.cleanup)
        return daemon.start() if start else daemon

    def run_uroced(self, args, runtime_dir=None):
        """Runs uroced expecting it to exit by itself."""
        runtime_dir = runtime_dir or os.path.join(self.base, "refused")
        return harness.run_program([harness.uroced_path(), "--runtime-dir", runtime_dir, *args],
                                   env=dict(os.environ), timeout=10)


class StopTest(LifecycleTestCase):

    def test_files_while_running(self):
        """While running: the runtime dir is private (0700), the socket is
        0600, the pid file holds the daemon's pid and the tree is published."""
        daemon = self.new_daemon()
        self.assertEqual(stat.S_IMODE(os.stat(daemon.runtime_dir).st_mode), 0o700)
        sock = os.stat(daemon.socket_path)
        self.assertTrue(stat.S_ISSOCK(sock.st_mode))
        self.assertEqual(stat.S_IMODE(sock.st_mode), 0o600)
        with open(daemon.pid_path) as f:
            self.assertEqual(f.read().strip(), str(daemon.proc.pid))
        self.assertEqual(daemon.status().pid, daemon.proc.pid)
        for name in harness.DEFAULT_DEVICES:
            self.assertTrue(os.path.isdir(os.path.join(
                daemon.sysfs_path, "class", "infiniband", name)), name)

    def test_sigterm_and_sigint_remove_socket_pid_file_and_tree(self):
        """SIGTERM and SIGINT: exit status 0, and the socket, pid file and
        sysfs tree are gone."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                daemon = self.new_daemon()
                self.assertEqual(daemon.stop(sig), 0, daemon.log())
                for path in (daemon.socket_path, daemon.pid_path, daemon.sysfs_path):
                    self.assertFalse(os.path.lexists(path), "%s left behind\n%s" % (
                        path, daemon.log()))

    def test_stop_with_a_connected_client(self):
        """A client holding objects does not keep the daemon from stopping;
        its next verb fails with EIO (docs/uroce.md, stop)."""
        harness.require_pyverbs()
        daemon = self.new_daemon()
        client = harness.VerbsClient(daemon)
        self.addCleanup(client.close)
        client.must("open", "uroce0")
        client.must("pd")
        self.assertEqual(daemon.stop(), 0, daemon.log())
        self.assertFalse(os.path.lexists(daemon.socket_path))
        answer = client.call("pd")
        self.assertFalse(answer["ok"], answer)
        self.assertEqual(answer["errno"], errno.EIO, answer)

    def test_restart_after_sigkill(self):
        """A daemon killed with SIGKILL leaves its files; programs then fail
        with a message that points at the daemon, and a new daemon on the
        same runtime dir starts and serves them."""
        harness.require_program("ibv_devinfo")
        daemon = self.new_daemon()
        daemon.stop(signal.SIGKILL)
        result = daemon.run(["ibv_devinfo", "-d", "uroce0"])
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("uroced", result.stderr)

        again = self.new_daemon()
        self.assertEqual(again.runtime_dir, daemon.runtime_dir)
        with open(again.pid_path) as f:
            self.assertEqual(f.read().strip(), str(again.proc.pid))
        result = again.run(["ibv_devinfo", "-d", "uroce0"])
        self.assertEqual(result.returncode, 0, result.stderr + again.log())
        self.assertIn("PORT_ACTIVE", result.stdout)


class SecondDaemonTest(LifecycleTestCase):

    def assert_first_still_serves(self, first):
        self.assertTrue(first.running(), first.log())
        self.assertEqual(first.status().pid, first.proc.pid,
                         "the socket is answered by another process")
        with open(first.pid_path) as f:
            self.assertEqual(f.read().strip(), str(first.proc.pid), "pid file")
        self.assertTrue(os.path.isdir(os.path.join(first.sysfs_path, "class",
                                                   "infiniband_verbs")))

    def test_second_daemon_on_the_same_runtime_dir_is_refused(self):
        """While one daemon runs, a second on its runtime dir exits non-zero
        saying one is already running, and leaves the first one's socket,
        pid file and tree alone."""
        first = self.new_daemon()
        result = self.run_uroced([], runtime_dir=first.runtime_dir)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("already running", result.stderr)
        self.assert_first_still_serves(first)
        # Also with other devices: the runtime dir, not the devices, decides.
        result = self.run_uroced(["--device", "uroce5=127.0.9.9"],
                                 runtime_dir=first.runtime_dir)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("already running", result.stderr)
        self.assert_first_still_serves(first)

    def test_second_daemon_started_at_the_same_moment_is_refused(self):
        """Two daemons started together on one runtime dir: exactly one
        serves, the other exits non-zero saying one is already running.
        The interleaving is forced with strace, which holds the first daemon
        for a while at its first unlink (where it replaces a stale socket)
        as the second one starts."""
        strace = shutil.which("strace")
        self.assertIsNotNone(strace, "strace is not installed (tools/install-deps installs it)")
        delay = 1.5
        wrapper = [strace, "-f", "-qq", "--seccomp-bpf", "-o", os.devnull,
                   "-e", "trace=unlink,unlinkat",
                   "-e", "inject=unlink,unlinkat:delay_enter=%d:when=1" % (delay * 1e6)]
        traced = subprocess.run(wrapper + ["/bin/true"], capture_output=True, text=True)
        self.assertEqual(traced.returncode, 0, "strace cannot trace here: " + traced.stderr)

        held = self.new_daemon(start=False)
        held.launch(wrapper)
        harness.wait_for(lambda: traced_child(held.proc.pid, stopped=True) or
                         answers(held, traced_child(held.proc.pid)), 5,
                         "the traced uroced to stop at unlink", held.log)
        held_pid = traced_child(held.proc.pid)
        self.addCleanup(kill_if_alive, held_pid)
        second = self.new_daemon(start=False).launch()
        started = {held_pid: held, second.proc.pid: second}

        def one_left():
            alive = [pid for pid, d in started.items() if d.proc.poll() is None]
            return len(alive) == 1 and answers(started[alive[0]], alive[0]) and alive[0]

        try:
            survivor = harness.wait_for(one_left, delay + 5, "one of the two daemons to give up")
        except AssertionError:
            survivor = None
        if survivor is None:
            self.fail("both daemons run on %s; the socket is answered by pid %d "
                      "(held: %d, second: %d)\n%s\n%s" % (
                          held.runtime_dir, second.status().pid, held_pid, second.proc.pid,
                          held.log(), second.log()))
        for pid, daemon in started.items():
            if pid != survivor:
                self.assertNotEqual(daemon.proc.returncode, 0, daemon.log())
                self.assertIn("already running", daemon.log())
        survivor_daemon = started[survivor]
        self.assertEqual(survivor_daemon.status().pid, survivor)
        with open(survivor_daemon.pid_path) as f:
            self.assertEqual(f.read().strip(), str(survivor), "pid file")
        self.assertTrue(os.path.isdir(os.path.join(survivor_daemon.sysfs_path, "class",
                                                   "infiniband_verbs")))
        os.kill(survivor, signal.SIGTERM)
        self.assertEqual(survivor_daemon.proc.wait(harness.STOP_TIMEOUT), 0,
                         survivor_daemon.log())


def traced_child(wrapper_pid, stopped=False):
    """The pid of the uroced the wrapper (strace) runs; with stopped=True,
    only while it is held in a tracing stop. Children that are not uroced
    yet (strace forks probes of its own, and its tracee runs strace's image
    until it execs) do not count."""
    try:
        with open("/proc/%d/task/%d/children" % (wrapper_pid, wrapper_pid)) as f:
            children = [int(pid) for pid in f.read().split()]
        for pid in children:
            if os.path.basename(os.readlink("/proc/%d/exe" % pid)) != "uroced":
                continue
            with open("/proc/%d/status" % pid) as f:
                if not stopped or re.search(r"^State:\s+t", f.read(), re.M):
                    return pid
    except (OSError, ValueError):
        pass
    return None


def answers(daemon, pid):
    """True when the socket of daemon's runtime dir is answered by `pid`."""
    try:
        return pid is not None and daemon.status().pid == pid
    except OSError:
        return False


def kill_if_alive(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class DeviceOptionTest(LifecycleTestCase):

    def test_one_device_option_publishes_only_that_device(self):
        """--device uroce7=ADDRESS: ibv_devices lists only uroce7, with the
        node GUID of that address; GID 0 is ::ffff:ADDRESS. (A loopback
        address, so that the daemon can bind its RoCEv2 port on it.)"""
        harness.require_program("ibv_devices")
        address = "127.1.2.3"
        daemon = self.new_daemon(["--device", "uroce7=" + address])
        result = daemon.run(["ibv_devices"])
        self.assertEqual(harness.parse_ibv_devices(result.stdout),
                         {"uroce7": harness.guid_hex(harness.node_guid_for(address))})
        result = daemon.run(["ibv_devinfo", "-v"])
        self.assertEqual(result.returncode, 0, result.stderr)
        blocks = harness.split_ibv_devinfo(result.stdout)
        self.assertEqual(list(blocks), ["uroce7"])
        self.assertIn("%s, RoCE v2" % harness.gid0_for(address), blocks["uroce7"])
        status = daemon.status()
        self.assertEqual(status.device_count, 1)
        self.assertEqual(list(status.devices), ["uroce7"])
        self.assertEqual(status.devices["uroce7"].address, address)

    def test_config_file(self):
        """A config file with a comment and one device publishes that device."""
        config = os.path.join(self.base, "uroced.conf")
        with open(config, "w") as f:
            f.write("# test devices\n\ndevice uroce3 127.0.3.3  # the only one\n")
        daemon = self.new_daemon(["--config", config])
        self.assertEqual(list(daemon.status().devices), ["uroce3"])

    def test_bad_config_line_names_file_and_line(self):
        """An unparsable config line: non-zero exit, message with FILE:LINE."""
        config = os.path.join(self.base, "bad.conf")
        with open(config, "w") as f:
            f.write("device uroce0 127.0.0.1\ndevice uroce1\n")
        result = self.run_uroced(["--config", config])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("%s:2" % config, result.stderr)

    def test_bad_device_arguments_are_refused(self):
        """Each malformed --device exits non-zero at once with a message that
        quotes the culprit, and starts nothing."""
        cases = {
            "no '='": (["--device", "uroce0"], "uroce0"),
            "not IPv4": (["--device", "uroce0=1.2.3"], "1.2.3"),
            "IPv6": (["--device", "uroce0=fe80::1"], "fe80::1"),
            "host name": (["--device", "uroce0=localhost"], "localhost"),
            "not uroce*": (["--device", "mlx5_0=10.0.0.1"], "mlx5_0"),
            "bad characters": (["--device", "uroce-0=10.0.0.1"], "uroce-0"),
            "duplicate name": (["--device", "uroce0=10.0.0.1", "--device", "uroce0=10.0.0.2"],
                               "uroce0"),
            "duplicate address": (["--device", "uroce0=10.0.0.1", "--device",
                                   "uroce1=10.0.0.1"], "uroce1"),
            "missing value": (["--device"], "--device"),
        }
        for case, (args, culprit) in cases.items():
            with self.subTest(case=case):
                runtime_dir = os.path.join(self.base, "refused-" + str(len(os.listdir(self.base))))
                started = time.monotonic()
                result = self.run_uroced(args, runtime_dir=runtime_dir)
                self.assertNotEqual(result.returncode, 0, result.stdout)
                self.assertLess(time.monotonic() - started, 5)
                self.assertIn("uroced:", result.stderr)
                self.assertIn(culprit, result.stderr)
                self.assertFalse(os.path.lexists(os.path.join(runtime_dir, "uroced.sock")))

    def test_engine_threads(self):
        """--threads N runs N engine threads, said in the log (the data path
        across engines is the integration tests' threads.* variant); $UROCE_THREADS
        is the default, and a count outside 1..32 is refused with its culprit."""
        daemon = self.new_daemon(["--threads", "3"])
        self.assertIn("; 3 engine threads", daemon.log())
        with open(daemon.pid_path) as f:
            tasks = "/proc/%d/task" % int(f.read())
        names = []
        for task in os.listdir(tasks):
            with open(os.path.join(tasks, task, "comm")) as f:
                names.append(f.read().strip())
        self.assertEqual(names.count("uroced"), 3, names)  # io_uring's workers aside
        for args, culprit in ((["--threads", "0"], "'0'"), (["--threads", "33"], "'33'"),
                              (["--threads", "two"], "'two'")):
            with self.subTest(args=args):
                result = self.run_uroced(args)
                self.assertNotEqual(result.returncode, 0, result.stdout)
                self.assertIn("--threads takes a count from 1 to 32", result.stderr)
                self.assertIn(culprit, result.stderr)
        env = dict(os.environ, UROCE_THREADS="99")
        result = harness.run_program([harness.uroced_path(), "--runtime-dir",
                                      os.path.join(self.base, "refused-env")], env=env, timeout=10)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("UROCE_THREADS takes a count from 1 to 32, not '99'", result.stderr)


if __name__ == "__main__":
    unittest.main()
