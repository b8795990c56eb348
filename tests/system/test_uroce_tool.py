"""The `uroce` command as a user runs it (docs/uroce.md): start, status,
env, exec and stop on a runtime directory of its own."""

import json
import os
import re
import shlex
import shutil
import signal
import tempfile
import unittest

import harness
from harness import DEFAULT_DEVICES

EXIT_NOT_RUNNING = 3
EXIT_COMMAND_NOT_FOUND = 127


class UroceToolTest(unittest.TestCase):

    def setUp(self):
        self.tool = harness.tool_path()
        if not self.tool:
            self.fail("the uroce command is not built (UROCE_TOOL is not set)")
        self.base = tempfile.mkdtemp(prefix="uroce-sys-")
        self.addCleanup(shutil.rmtree, self.base, True)
        self.runtime_dir = os.path.join(self.base, "run")
        # A user's environment: none of the variables `uroce env` sets.
        self.env = {name: value for name, value in os.environ.items()
                    if name not in ("SYSFS_PATH", "LD_PRELOAD", "RDMAV_DRIVERS")}
        self.env["UROCE_RUNTIME_DIR"] = self.runtime_dir
        self.addCleanup(self.stop_leftover_daemon)

    # --- helpers ---------------------------------------------------------------

    def uroce(self, *args, env=None):
        return harness.run_program([self.tool, *args], env=env or self.env, log=self.log)

    def uroce_ok(self, *args):
        result = self.uroce(*args)
        self.assertEqual(result.returncode, 0, "uroce %s failed:\n%s%s\n%s" % (
            " ".join(args), result.stdout, result.stderr, self.log()))
        return result

    def log(self):
        try:
            with open(os.path.join(self.runtime_dir, "uroced.log"), errors="replace") as f:
                return "--- uroced.log ---\n" + f.read()
        except OSError:
            return "(no uroced.log)"

    def daemon_pid(self):
        try:
            with open(os.path.join(self.runtime_dir, "uroced.pid")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def stop_leftover_daemon(self):
        """After each test: `uroce stop`, and SIGKILL if a daemon survives it."""
        pid = self.daemon_pid()
        self.uroce("stop")
        if pid and process_is_uroced(pid):
            os.kill(pid, signal.SIGKILL)

    def start(self, *args):
        """`uroce start ARGS`, on a RoCEv2 UDP port of its own so that other
        daemons on this host (other tests, a user's) do not get in the way."""
        return self.uroce_ok("start", *args, "--udp-port", str(harness.free_udp_port()))

    def assert_not_running(self):
        result = self.uroce("status")
        self.assertEqual(result.returncode, EXIT_NOT_RUNNING, result.stdout + result.stderr)
        self.assertIn("uroce start", result.stderr, "status says how to start the daemon")

    # --- tests -------------------------------------------------------------------

    def test_start_status_env_exec_stop_round_trip(self):
        """Not running -> start -> devices usable at once through exec and
        through eval "$(uroce env)" in a shell -> stop removes everything ->
        not running again."""
        self.assert_not_running()
        self.start()

        listed = harness.parse_ibv_devices(self.uroce_ok("exec", "--", "ibv_devices").stdout)
        self.assertEqual(listed, {name: harness.guid_hex(harness.node_guid_for(address))
                                  for name, address in DEFAULT_DEVICES.items()})

        status = harness.parse_status(self.uroce_ok("status").stdout)
        self.assertEqual(status.pid, self.daemon_pid())
        self.assertEqual(list(status.devices), list(DEFAULT_DEVICES))
        for name, address in DEFAULT_DEVICES.items():
            device = status.devices[name]
            self.assertEqual(device.address, address)
            self.assertEqual(device.node_guid, harness.guid_colon(harness.node_guid_for(address)))
            # lo: far more than 4096 + 80 bytes.
            self.assertEqual((device.port_state, device.max_mtu, device.active_mtu,
                              device.link_layer), ("active", 4096, 4096, "Ethernet"))
            self.assertEqual(device.gids[0], (harness.gid0_for(address), "RoCE v2"))
            self.assertEqual(device.objects, harness.zero_counts())

        harness.require_program("bash")
        shell = harness.run_program(
            ["bash", "-c", 'set -e; eval "$("$UROCE" env)"; ibv_devinfo'],
            env=dict(self.env, UROCE=self.tool), log=self.log)
        self.assertEqual(shell.returncode, 0, shell.stderr + self.log())
        blocks = harness.split_ibv_devinfo(shell.stdout)
        self.assertEqual(sorted(blocks), sorted(DEFAULT_DEVICES))
        for block in blocks.values():
            self.assertRegex(block, r"state:\s+PORT_ACTIVE")

        pid = self.daemon_pid()
        self.uroce_ok("stop")
        self.assertFalse(process_is_uroced(pid), "uroced %d still runs after stop" % pid)
        for name in ("uroced.sock", "uroced.pid", "sysfs"):
            self.assertFalse(os.path.lexists(os.path.join(self.runtime_dir, name)), name)
        self.assert_not_running()

    def test_env_prints_export_lines_for_the_runtime_dir(self):
        """`uroce env` prints only `export NAME=value` lines that a POSIX
        shell can eval: the runtime dir, its sysfs tree, the bridge first in
        LD_PRELOAD (ahead of existing preloads), the provider, and ASan's
        link-order check turned off ahead of the user's ASan options."""
        existing = "/opt/other/libfoo.so"
        result = self.uroce("env", env=dict(self.env, LD_PRELOAD=existing,
                                            ASAN_OPTIONS="detect_leaks=0"))
        self.assertEqual(result.returncode, 0, result.stderr)
        exported = {}
        for line in result.stdout.splitlines():
            m = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(.*)", line)
            self.assertIsNotNone(m, "not an export line: %r" % line)
            words = shlex.split(m.group(2))
            self.assertEqual(len(words), 1, line)
            exported[m.group(1)] = words[0]
        self.assertEqual(exported["UROCE_RUNTIME_DIR"], self.runtime_dir)
        self.assertEqual(exported["SYSFS_PATH"], os.path.join(self.runtime_dir, "sysfs"))
        preloads = exported["LD_PRELOAD"].split(":")
        self.assertTrue(any(os.path.basename(p) == "liburoce-bridge.so" for p in preloads),
                        preloads)
        self.assertEqual(preloads[-1], existing, "existing preloads come after the bridge")
        self.assertEqual(exported["ASAN_OPTIONS"], "verify_asan_link_order=0:detect_leaks=0",
                         "ASan's order check off, the user's options after it")
        # libibverbs appends -rdmav<N>.so, N the private ABI it was built with.
        self.assertEqual(exported["RDMAV_DRIVERS"] + "-rdmav%s.so" % harness.provider_abi(),
                         harness.required_path("UROCE_PROVIDER_FILE"))

    def test_start_with_one_device(self):
        """`uroce start --device uroce0=127.0.0.1`: status shows that one
        device, and programs see only it."""
        self.start("--device", "uroce0=127.0.0.1")
        status = harness.parse_status(self.uroce_ok("status").stdout)
        self.assertEqual(status.device_count, 1)
        self.assertEqual(list(status.devices), ["uroce0"])
        listed = harness.parse_ibv_devices(self.uroce_ok("exec", "--", "ibv_devices").stdout)
        self.assertEqual(list(listed), ["uroce0"])

    def test_start_raises_the_daemons_priority_over_other_sessions(self):
        """The daemon `uroce start` leaves runs at --nice (default -10) in
        every thread, and its session's autogroup does too: with autogroup,
        a CPU is shared between sessions first, and busy-polling programs of
        another session would otherwise get as much of it as the daemon.
        `--nice 0` leaves both at 0."""
        for flags, nice in (([], -10), (["--nice", "0"], 0)):
            with self.subTest(flags=flags):
                self.start("--device", "uroce0=127.0.0.1", *flags)
                pid = self.daemon_pid()
                if os.geteuid() == 0:  # a user may not go below 0
                    for task in os.listdir("/proc/%d/task" % pid):
                        with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                        self.assertEqual(int(fields[16]), nice, "thread %s" % task)
                    self.assertEqual(os.getsid(pid), pid, "the daemon leads its own session")
                    if os.path.exists("/proc/self/autogroup"):  # else the kernel has none
                        with open("/proc/%d/autogroup" % pid) as f:
                            self.assertRegex(f.read(), r"^/autogroup-\d+ nice %d$" % nice)
                elif nice < 0:
                    self.assertIn("CAP_SYS_NICE", self.log())
                self.uroce_ok("stop")

    def test_start_when_already_running(self):
        """A second `uroce start` says the daemon runs, exits 0, and leaves
        the same daemon in place."""
        self.start()
        pid = self.daemon_pid()
        result = self.uroce_ok("start", "--udp-port", str(harness.free_udp_port()))
        self.assertIn("already running", result.stdout + result.stderr)
        self.assertEqual(self.daemon_pid(), pid)
        self.assertEqual(harness.parse_status(self.uroce_ok("status").stdout).pid, pid)

    def test_start_help_shows_the_daemons_options_and_starts_nothing(self):
        """`uroce start --help` (or -h, among other options) says what start
        does and shows uroced's options, with how to let tcpdump see the
        packets between the daemon's own devices; it exits 0 and no daemon
        runs afterwards, as with any program's --help."""
        for args in (["--help"], ["--udp-port", "4791", "-h"]):
            result = self.uroce_ok("start", *args)
            self.assertIn("usage: uroce start [UROCED OPTIONS]", result.stdout)
            self.assertIn(self.runtime_dir, result.stdout)
            self.assertIn("usage: uroced", result.stdout, "uroced's own options follow")
            self.assertRegex(result.stdout, r"--no-shortcut: [^\n]*\n[^\n]*tcpdump")
            self.assertNotIn("exited", result.stdout + result.stderr)
            self.assert_not_running()

    def test_start_failure_is_reported(self):
        """`uroce start` with a bad --device exits 1 and shows why (the end
        of the daemon's log, from this attempt only: an earlier failure's
        lines are not its reason); nothing runs afterwards."""
        first = self.uroce("start", "--device", "uroce0=not-an-address")
        self.assertEqual(first.returncode, 1, first.stdout + first.stderr)
        self.assertIn("not-an-address", first.stderr)
        second = self.uroce("start", "--device", "uroce0=nor-this-one")
        self.assertEqual(second.returncode, 1, second.stdout + second.stderr)
        self.assertIn("nor-this-one", second.stderr)
        self.assertNotIn("not-an-address", second.stderr)
        self.assert_not_running()

    def test_exec_passes_on_the_command_status(self):
        """`uroce exec` exits with the command's status, and 127 when the
        command does not exist."""
        self.start()
        self.assertEqual(self.uroce("exec", "--", "sh", "-c", "exit 7").returncode, 7)
        missing = self.uroce("exec", "--", os.path.join(self.base, "no-such-program"))
        self.assertEqual(missing.returncode, EXIT_COMMAND_NOT_FOUND, missing.stderr)
        self.assertIn("no-such-program", missing.stderr)

    def test_sanitized_programs_run_under_exec_and_env(self):
        """A pingpong built with AddressSanitizer or ThreadSanitizer, as CI
        suites build their tests, runs under `uroce exec` and after eval
        "$(uroce env)" with no sanitizer option of the user's: ASan's check
        that its runtime comes first, which the preloaded bridge fails, is
        turned off for it. An option the user gives still applies."""
        env = {name: value for name, value in self.env.items()
               if name not in ("ASAN_OPTIONS", "TSAN_OPTIONS")}
        self.start()
        harness.require_program("bash")
        for sanitizer in ("address", "thread"):
            program = os.environ.get("UROCE_CHECK_PROGRAMS_" + sanitizer)
            if not program:
                self.skipTest("a sanitizer build does not build its sanitized programs")
            runs = {
                "exec": [self.tool, "exec", "--", program, "uroce0", "rnr-twin"],
                "env": ["bash", "-c", 'eval "$("$UROCE" env)" && exec "$@"', "bash",
                        program, "uroce1", "rnr-twin"],
            }
            for how, args in runs.items():
                with self.subTest(sanitizer=sanitizer, how=how):
                    result = harness.run_program(args, env=dict(env, UROCE=self.tool),
                                                 log=self.log)
                    self.assertEqual(result.returncode, 0, result.stderr + self.log())
                    self.assertNotIn("Sanitizer", result.stderr)
        # The user's own word on the check wins: ASan refuses to start.
        result = harness.run_program(
            [self.tool, "exec", "--", os.environ["UROCE_CHECK_PROGRAMS_address"], "uroce0",
             "rnr-twin"], env=dict(env, ASAN_OPTIONS="verify_asan_link_order=1"), log=self.log)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ASan runtime does not come first", result.stderr)

    def test_stop_returns_once_the_daemon_has_exited(self):
        """`uroce stop` returns as soon as the daemon has exited, also where
        nobody reaps it at once (a container whose init does not reap, here
        a subreaper that waits): it must not wait out its 10 s timeout and
        claim the daemon ignored SIGTERM."""
        result = harness.run_program([harness.PYTHON, "-c", NON_REAPING_PARENT, self.tool,
                                      str(harness.free_udp_port())],
                                     env=self.env, log=self.log, timeout=40)
        self.assertEqual(result.returncode, 0, result.stderr + self.log())
        outcome = json.loads(result.stdout)
        self.assertEqual(outcome["start"], 0, outcome)
        self.assertEqual(outcome["stop"], 0, outcome)
        self.assertFalse(outcome["daemon_alive_after_stop"], outcome)
        self.assertNotIn("ignored SIGTERM", outcome["stop_stderr"])
        self.assertLess(outcome["stop_seconds"], 5.0, outcome)

    def test_stop_when_not_running(self):
        """`uroce stop` with no daemon exits 0."""
        self.assertEqual(self.uroce("stop").returncode, 0)
        self.assert_not_running()


# Runs `uroce start` and `uroce stop` as a child subreaper that reaps the
# daemon only after stop returns; prints what happened as JSON.
NON_REAPING_PARENT = r"""
import ctypes, json, os, signal, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
tool = sys.argv[1]
start = subprocess.run([tool, "start", "--udp-port", sys.argv[2]], capture_output=True,
                       text=True, timeout=20)
with open(os.path.join(os.environ["UROCE_RUNTIME_DIR"], "uroced.pid")) as f:
    pid = int(f.read())
began = time.monotonic()
stop = subprocess.run([tool, "stop"], capture_output=True, text=True, timeout=30)
seconds = time.monotonic() - began
with open("/proc/%d/stat" % pid) as f:
    alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
print(json.dumps({"start": start.returncode, "stop": stop.returncode,
                  "stop_seconds": seconds, "stop_stderr": stop.stderr,
                  "daemon_alive_after_stop": alive}))
"""


def process_is_uroced(pid):
    """Whether pid is a live uroced (a zombie waiting to be reaped has exited)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().split()
    except OSError:
        return False
    return fields[1] == "(uroced)" and fields[2] != "Z"


if __name__ == "__main__":
    unittest.main()
