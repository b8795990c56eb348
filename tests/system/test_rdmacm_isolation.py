"""rdma_cm programs cannot hang, starve or tear down each other: a program
that misuses its event channel (tests/system/rdmacm_misuse.c) leaves the
daemon answering within a second throughout, and the programs beside it
working; a parent and its forked child share one channel as on the kernel.

Each misuse is the one a fuzzing campaign found to stop the daemon or
another program; each test fails on a daemon that has that defect.
"""

import os
import re
import subprocess
import threading
import time
import unittest

import harness
from test_rdmacm_programs import RdmaCmCase

STATUS_DEADLINE = 1.0  # seconds: how long `uroce status` may take while a program misbehaves


def misuse_program():
    return harness.required_path("UROCE_RDMACM_MISUSE")


class StatusWatch:
    """Asks the daemon for its status again and again in a thread, and
    remembers the slowest answer (or that one did not come)."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.slowest = 0.0
        self.failure = None
        self.asked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with self.daemon.raw_client(timeout=STATUS_DEADLINE * 5) as client:
                    client.status_text()
            except OSError as error:
                self.failure = "status failed after %.1f s: %s" % (
                    time.monotonic() - started, error)
                return
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.asked += 1
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=STATUS_DEADLINE * 10)

    def check(self, test):
        test.assertIsNone(self.failure, self.daemon.log())
        test.assertGreater(self.asked, 0, "status was never answered")
        test.assertLess(self.slowest, STATUS_DEADLINE,
                        "status took %.2f s while a program misused its channel" % self.slowest)


class ChannelMisuseTest(RdmaCmCase):
    """A program that reads, writes, closes or replaces its channel's
    descriptor behind librdmacm's back: the daemon never waits on it."""

    def misuse(self, mode, *args):
        with StatusWatch(self.daemon) as watch:
            result = self.daemon.run([misuse_program(), mode, *map(str, args)], timeout=60)
        context = "%s: exit %d\n%s%s\n%s" % (mode, result.returncode, result.stdout,
                                            result.stderr, self.daemon.log())
        self.assertEqual(result.returncode, 0, context)
        self.assertEqual(result.stdout.strip().split("\n")[-1], "ok", context)
        watch.check(self)
        self.daemon.assert_alive(self)
        return result

    def test_a_drained_channel(self):
        self.misuse("drain")

    def test_a_channel_written_to(self):
        self.misuse("fill")

    def test_a_channel_closed_behind_librdmacms_back(self):
        self.misuse("close")
        harness.wait_for(lambda: not self.cm_lines(), 5.0, "the closed channel's IDs to go",
                         self.daemon.log)

    def test_a_channel_closed_under_a_waiting_thread(self):
        """rdma_get_cm_event asleep in one thread while another closes the
        channel sleeps on, as on the kernel (rping's client exits so)."""
        self.misuse("close-under-waiter")

    def test_a_channel_replaced_behind_librdmacms_back(self):
        self.misuse("replace")
        harness.wait_for(lambda: not self.cm_lines(), 5.0, "the replaced channel's IDs to go",
                         self.daemon.log)

    def test_a_drained_channel_leaves_rping_working(self):
        """The misuse that once stopped every client: rping beside it."""
        self.misuse("drain")
        port = harness.free_tcp_port()
        common = ["-a", "127.0.0.2", "-p", str(port), "-C", "100", "-V"]
        self.run_pair(["rping", "-s", *common], ["rping", "-c", *common], port)


class ClientLimitsTest(RdmaCmCase):
    """One program holds every rdma_cm resource it may (IDs, multicast
    joins, event channels): it is refused at its share with the man page's
    errno, and rping, ucmatose and mckey beside it pass."""

    def limits(self):
        line = next(line for line in self.daemon.status().text.split("\n")
                    if line.startswith("limits per client:"))
        numbers = re.search(r"rdma_cm IDs (\d+) of (\d+), multicast joins (\d+) of (\d+), "
                            r"descriptors (\d+) of (\d+)", line)
        self.assertIsNotNone(numbers, line)
        ids, _, joins, _, descriptors, _ = map(int, numbers.groups())
        return ids, joins, descriptors

    def test_one_program_at_its_limits_leaves_the_others_working(self):
        ids, joins, descriptors = self.limits()
        hog = subprocess.Popen([misuse_program(), "hold"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=self.daemon.env())
        try:
            held = {}
            for _ in range(3):
                line = hog.stdout.readline()
                match = re.match(r"(\w+) (\d+) errno (\w+)$", line.strip())
                self.assertIsNotNone(match, "hold said %r\n%s" % (line, self.daemon.log()))
                held[match.group(1)] = (int(match.group(2)), match.group(3))
            self.assertEqual(held["joins"], (joins, "ENOMEM"), self.daemon.log())
            self.assertEqual(held["ids"], (ids, "ENOMEM"), self.daemon.log())
            # Each channel takes a connection and its pipe, three descriptors
            # of the share; librdmacm's own connections (a device context,
            # netlink) take a few more. The daemon refuses with EMFILE;
            # librdmacm's open_cdev then tries another path to the node and
            # reports that one's errno (ENOENT).
            channels, error = held["channels"]
            self.assertLessEqual(channels, descriptors // 3)
            self.assertGreaterEqual(channels, descriptors // 3 - 3)
            self.assertIn(error, ("EMFILE", "ENOENT"))
            self.assertRegex(self.daemon.log(), r"uroced has no file descriptors left for pid %d's "
                             r"(rdma_cm channel|connection)" % hog.pid)
            with StatusWatch(self.daemon) as watch:
                port = harness.free_tcp_port()
                common = ["-a", "127.0.0.2", "-p", str(port), "-C", "100", "-V"]
                self.run_pair(["rping", "-s", *common], ["rping", "-c", *common], port)
                port = harness.free_tcp_port()
                args = ["-p", str(port), "-c", "4", "-C", "20"]
                server, client, context = self.run_pair(["ucmatose", "-b", "127.0.0.2", *args],
                                                        ["ucmatose", "-s", "127.0.0.2", *args],
                                                        port)
                self.assertIn("test complete", client, context)
                group = "239.9.8.7"
                receiver, sender, context = self.run_pair(
                    ["mckey", "-m", group, "-b", "127.0.0.2", "-C", "20"],
                    ["mckey", "-m", group, "-b", "127.0.0.1", "-C", "20", "-s"], 7174,
                    wait="joined")
                self.assertIn("data transfers complete", receiver, context)
            watch.check(self)
        finally:
            if hog.poll() is None:
                hog.kill()
                hog.wait()
        harness.wait_for(lambda: not self.cm_lines(), 10.0, "the holder's IDs to go",
                         self.daemon.log)


class ForkedChannelTest(RdmaCmCase):
    """After fork(), parent and child issue commands on one inherited channel
    at once: none fails, no reply reaches the other process."""

    def test_parent_and_child_hammer_one_channel(self):
        result = self.daemon.run([misuse_program(), "fork", "2000"], timeout=120)
        self.assertEqual(result.returncode, 0, "%s%s\n%s" % (result.stdout, result.stderr,
                                                             self.daemon.log()))
        self.assertEqual(result.stdout.strip().split("\n")[-1], "ok", result.stdout)


class ResponseAddressTest(RdmaCmCase):
    """Commands whose response the program cannot receive fail with EFAULT
    and, as on the kernel, keep nothing (CREATE_ID) and lose nothing
    (GET_EVENT)."""

    def test_efault_keeps_no_id_and_loses_no_event(self):
        program = subprocess.Popen([misuse_program(), "efault"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=self.daemon.env())
        try:
            line = program.stdout.readline()
            match = re.match(r"ids-held pid (\d+)$", line.strip())
            self.assertIsNotNone(match, "%s%s\n%s" % (line, program.stderr.read()
                                                      if program.poll() is not None else "",
                                                      self.daemon.log()))
            pid = int(match.group(1))
            ids = [line for line in self.cm_lines()
                   if re.match(r"^  cm id \d+ pid %d " % pid, line)]
            # The ID of its GET_EVENT; none of the 100 refused CREATE_IDs.
            self.assertEqual(len(ids), 1, "\n".join(self.cm_lines()))
            out, err = program.communicate("go\n", timeout=30)
        finally:
            if program.poll() is None:
                program.kill()
                program.wait()
        self.assertEqual(program.returncode, 0, out + err)
        self.assertEqual(out.strip(), "ok", out + err)


if __name__ == "__main__":
    unittest.main()
