"""Where uroced cannot reach a program's memory (process_vm_readv and
process_vm_writev, which follow ptrace's rules), ibv_open_device fails at
once with EPERM or EACCES and a sentence naming the cause and its fix, on
the program's stderr and in the daemon's log, instead of every transfer
failing later with a protection error and no reason (docs/memory-access.md).
Yama's rules, which these machines' kernel lacks, are tested in the guest
of tools/yama-guest."""

import errno
import os
import subprocess
import unittest

import harness

NOBODY, AS_NOBODY = harness.NOBODY, harness.AS_NOBODY
REFUSE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tools",
                      "refuse-syscalls")

# Opens uroce0 with pyverbs (after making itself undumpable when asked) and
# prints "opened" or "errno N".
OPEN_DEVICE = r"""
import ctypes, sys
if sys.argv[1:] == ["undumpable"]:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
import pyverbs.device
try:
    pyverbs.device.Context(name="uroce0").close()
    print("opened")
except Exception as e:
    print("errno", getattr(e, "error_code", None))
"""


class MemoryAccessTest(unittest.TestCase):

    def setUp(self):
        harness.require_pyverbs()

    def open_uroce0(self, env, user=(), *args):
        """(the errno ibv_open_device failed with or 0, the program's output)."""
        result = subprocess.run([*user, harness.PYTHON, "-c", OPEN_DEVICE, *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, timeout=60)
        out = result.stdout.split()
        self.assertTrue(out == ["opened"] or (len(out) == 2 and out[0] == "errno"),
                        "%s\n%s" % (result.stdout, result.stderr))
        return (0 if out == ["opened"] else int(out[1])), result.stderr

    def daemon_as_nobody(self):
        daemon = harness.NobodysDaemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        return daemon, daemon.env()

    def assert_refused(self, daemon, error, stderr, cause):
        self.assertIn("uroce: cannot open uroce0: uroced cannot reach the program's memory: " +
                      cause, stderr)
        self.assertIn("Fix: ", stderr)
        harness.wait_for(lambda: cause in daemon.log(), 5, "the refusal in the daemon's log",
                         daemon.log)
        self.assertEqual(daemon.status().clients, [], "a refused open left a client")
        self.assertTrue(daemon.running(), daemon.log())

    def test_process_vm_calls_refused_to_the_daemon(self):
        """A seccomp filter on the daemon (as under a custom container
        profile; gVisor answers ENOSYS): EPERM, naming the filter."""
        for code in ("EPERM", "ENOSYS"):
            with self.subTest(errno=code):
                daemon = harness.Daemon()
                self.addCleanup(daemon.cleanup)
                daemon.start(wrapper=[REFUSE, "--errno", code, "process_vm_readv",
                                      "process_vm_writev", "--"])
                error, stderr = self.open_uroce0(daemon.env())
                self.assertEqual(error, errno.EPERM, stderr)
                self.assert_refused(daemon, error, stderr,
                                    "uroced may not call process_vm_readv (%s: a seccomp filter "
                                    "on uroced" % os.strerror(getattr(errno, code)))
                daemon.stop()

    def test_a_program_of_another_user(self):
        """Root's program and nobody's daemon (which lets root connect): the
        daemon may not read root's memory, and the sentence says whose
        daemon to use."""
        daemon, env = self.daemon_as_nobody()
        error, stderr = self.open_uroce0(env)
        self.assertEqual(error, errno.EACCES, stderr)
        self.assert_refused(daemon, error, stderr,
                            "the program runs as uid 0 and uroced as uid %d" % NOBODY)

    def test_a_program_that_is_not_dumpable(self):
        """Same user, but the program made itself undumpable."""
        daemon, env = self.daemon_as_nobody()
        error, stderr = self.open_uroce0(env, AS_NOBODY)
        self.assertEqual(error, 0, stderr)
        error, stderr = self.open_uroce0(env, AS_NOBODY, "undumpable")
        self.assertEqual(error, errno.EACCES, stderr)
        self.assert_refused(daemon, error, stderr, "the program is not dumpable")

    def test_a_probe_that_names_other_bytes(self):
        """A hello whose probe names bytes that are not the ones there, or
        memory that is not mapped, is refused (a raw client)."""
        daemon = harness.Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        for probe, code, words in (
                (harness.memory_probe(value=0), errno.EACCES, "not the bytes the program put"),
                (harness.memory_probe(address=8), errno.EFAULT, "is not mapped")):
            with self.subTest(code=errno.errorcode[code]), daemon.raw_client() as client:
                read_end, write_end = os.pipe()
                try:
                    reply = client.call(harness.Op.HELLO, harness.hello_body("uroce0", probe=probe),
                                        fds=[write_end])
                finally:
                    os.close(read_end)
                    os.close(write_end)
                self.assertEqual(reply.error, code, reply.message)
                self.assertIn(words, reply.message)


if __name__ == "__main__":
    unittest.main()
