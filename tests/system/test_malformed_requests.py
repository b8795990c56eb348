"""Requests no correct client sends: each gets an error reply (the protocol
promises "an error reply, never a dropped connection"), and neither the
daemon nor its other clients notice."""

import errno
import os
import select
import shutil
import struct
import subprocess
import time
import unittest

import harness
from harness import MAGIC, VERSION, Op, REQUEST_HEADER

EMPTY_BODY = b"\0"  # the body of an empty C++ request struct is one byte
QUERY_PORT_1 = struct.pack("<I", 1)  # QueryPortRequest{port_num = 1}


class MalformedRequestTest(harness.DaemonTestCase):

    def setUp(self):
        self.client = self.daemon.raw_client()

    def tearDown(self):
        """The daemon survived, and once this test's connections are closed
        nothing of them is left for the next test."""
        self.client.close()
        self.daemon.assert_alive(self)
        self.daemon.wait_until_idle()

    def assert_error_reply(self, reply, op=None, seq=None):
        """A well-formed reply carrying a non-zero errno and a message."""
        self.assertEqual((reply.magic, reply.version), (MAGIC, VERSION))
        self.assertEqual(reply.length, reply.size, "length field of the reply")
        self.assertGreater(reply.error, 0, "errno of the reply to a bad request")
        self.assertNotEqual(reply.message.strip(), "", "the reply says why")
        if op is not None:
            self.assertEqual(reply.op, op)
        if seq is not None:
            self.assertEqual(reply.seq, seq)

    def assert_connection_usable(self, client=None):
        """The same connection still answers a valid status request."""
        text = (client or self.client).status_text()
        self.assertTrue(text.startswith("uroced pid "), text)

    def send_and_expect_error(self, data, op=None, seq=None):
        self.client.send(data)
        reply = self.client.receive()
        self.assert_error_reply(reply, op, seq)
        self.assert_connection_usable()
        return reply

    def open_device(self, device="uroce0"):
        reply = self.client.hello(device)
        self.assertEqual(reply.error, 0, reply.message)
        return reply

    # --- control: the raw client gets real answers to valid requests --------

    def test_valid_requests_are_answered(self):
        """A correct hello, query_port and alloc_pd from a raw client succeed;
        the PD is counted and released when the connection closes."""
        reply = self.open_device("uroce1")
        device_index, _, token = struct.unpack("<IIQ", reply.body)  # HelloReply
        self.assertEqual(device_index, 1)
        self.assertNotEqual(token, 0, "a context has an attach token")
        reply = self.client.call(Op.QUERY_PORT, QUERY_PORT_1)
        self.assertEqual(reply.error, 0, reply.message)
        state, max_mtu = struct.unpack_from("<ii", reply.body)  # ibv_port_attr starts so
        self.assertEqual((state, max_mtu), (harness.IBV_PORT_ACTIVE, harness.IBV_MTU_4096))
        reply = self.client.call(Op.ALLOC_PD, EMPTY_BODY)
        self.assertEqual(reply.error, 0, reply.message)
        self.assertEqual((reply.op, reply.seq), (Op.ALLOC_PD, self.client.seq))
        self.assertEqual(self.daemon.device_counts("uroce1"), harness.counts(pd=1))
        self.client.close()
        self.daemon.wait_for_counts("uroce1", harness.zero_counts())

    # --- framing -----------------------------------------------------------

    def test_message_shorter_than_a_header(self):
        """1-byte and 15-byte messages get an error reply."""
        for size in (1, REQUEST_HEADER.size - 1):
            with self.subTest(size=size):
                self.send_and_expect_error(request_bytes_of_size(size))

    def test_empty_message(self):
        """A zero-length message is a message shorter than a header, too: it
        gets an error reply, and the connection (with its device and
        objects) survives."""
        self.open_device()
        self.assertEqual(self.client.call(Op.ALLOC_PD, EMPTY_BODY).error, 0)
        self.client.send(b"")
        try:
            reply = self.client.receive()
        except ConnectionError:
            reply = None
        self.assertIsNotNone(reply, "uroced dropped the connection on an empty message")
        self.assert_error_reply(reply)
        self.assert_connection_usable()
        self.assertEqual(self.daemon.device_counts("uroce0"), harness.counts(pd=1))

    def test_oversized_message(self):
        """A message larger than the protocol's 64 KiB maximum gets an error reply."""
        body = bytes(harness.MAX_MESSAGE + 100)
        self.send_and_expect_error(harness.request_bytes(Op.STATUS, body))

    def test_bad_magic(self):
        """A header with the wrong magic gets an error reply."""
        self.send_and_expect_error(
            harness.request_bytes(Op.STATUS, EMPTY_BODY, magic=0x12345678, seq=7))

    def test_wrong_version(self):
        """Protocol version 0 and the next version are refused with an error
        reply that echoes the request's op and seq."""
        for version in (0, VERSION + 1):
            with self.subTest(version=version):
                self.send_and_expect_error(
                    harness.request_bytes(Op.STATUS, EMPTY_BODY, version=version, seq=9),
                    op=Op.STATUS, seq=9)

    def test_length_field_not_matching_the_message(self):
        """A length field smaller or larger than the message gets an error reply."""
        true_length = REQUEST_HEADER.size + len(EMPTY_BODY)
        for length in (0, true_length - 1, true_length + 1, 0xffffffff):
            with self.subTest(length=length):
                self.send_and_expect_error(
                    harness.request_bytes(Op.STATUS, EMPTY_BODY, length=length, seq=11),
                    op=Op.STATUS, seq=11)

    # --- ops and bodies ------------------------------------------------------

    def test_unknown_op(self):
        """Op numbers outside the protocol get an error reply, before and after hello."""
        for op in (0, Op.COUNT, 0xffff):
            with self.subTest(op=op, hello=False):
                self.send_and_expect_error(harness.request_bytes(op, EMPTY_BODY, seq=3),
                                           op=op, seq=3)
        self.open_device()
        for op in (0, Op.COUNT, 0xffff):
            with self.subTest(op=op, hello=True):
                self.send_and_expect_error(harness.request_bytes(op, EMPTY_BODY, seq=4),
                                           op=op, seq=4)

    def test_wrong_body_size(self):
        """query_port with a body one byte short or long, and hello with a
        short body, get error replies; the connection stays usable."""
        self.open_device()
        for body in (QUERY_PORT_1[:-1], QUERY_PORT_1 + b"\0", b""):
            with self.subTest(body=body):
                self.send_and_expect_error(harness.request_bytes(Op.QUERY_PORT, body, seq=5),
                                           op=Op.QUERY_PORT, seq=5)
        reply = self.client.call(Op.QUERY_PORT, QUERY_PORT_1)
        self.assertEqual(reply.error, 0, reply.message)

        with self.daemon.raw_client() as other:
            other.send(harness.request_bytes(Op.HELLO, b"uroce0\0", seq=6))
            self.assert_error_reply(other.receive(), op=Op.HELLO, seq=6)
            self.assert_connection_usable(other)

    def test_verb_before_hello(self):
        """query_device, query_port and alloc_pd before hello get error replies."""
        for op, body in ((Op.QUERY_DEVICE, EMPTY_BODY), (Op.QUERY_PORT, QUERY_PORT_1),
                         (Op.ALLOC_PD, EMPTY_BODY)):
            with self.subTest(op=op):
                self.send_and_expect_error(harness.request_bytes(op, body, seq=8),
                                           op=op, seq=8)
        self.assertEqual(self.daemon.device_counts("uroce0"), harness.zero_counts())

    def test_verb_after_tool_hello(self):
        """A connection that said hello without a device (as the uroce tool
        does) cannot run verbs."""
        reply = self.client.hello("")
        self.assertEqual(reply.error, 0, reply.message)
        self.send_and_expect_error(harness.request_bytes(Op.ALLOC_PD, EMPTY_BODY, seq=2),
                                   op=Op.ALLOC_PD, seq=2)

    def test_hello_for_a_device_that_does_not_exist(self):
        """hello for 'uroce9' or 'mlx5_0' is refused with ENODEV, naming the
        device; a later hello for a real device on the same connection works."""
        for name in ("uroce9", "mlx5_0"):
            with self.subTest(device=name):
                reply = self.client.hello(name)
                self.assert_error_reply(reply, op=Op.HELLO)
                self.assertEqual(reply.error, errno.ENODEV, reply.message)
                self.assertIn(name, reply.message)
        self.open_device("uroce0")

    def test_hello_for_a_device_without_the_event_pipe(self):
        """hello for a device must carry the async event pipe."""
        self.assert_error_reply(self.client.hello("uroce0", with_event_pipe=False),
                                op=Op.HELLO)
        self.assert_connection_usable()

    def test_second_hello(self):
        """A connection cannot be bound twice."""
        self.open_device("uroce0")
        self.assert_error_reply(self.client.hello("uroce1"), op=Op.HELLO)
        self.assertEqual(self.client.call(Op.ALLOC_PD, EMPTY_BODY).error, 0)
        self.assertEqual(self.daemon.device_counts("uroce1"), harness.zero_counts())

    def test_unexpected_descriptors_are_not_kept(self):
        """Descriptors sent with requests that take none, with malformed
        requests, or more than the protocol allows are closed by the daemon;
        the event pipe of a hello is closed when its connection ends. (The
        read end of a pipe sees end-of-file once every copy of the write end
        is closed.)"""
        cases = {
            "status": lambda c, w: c.send(harness.request_bytes(Op.STATUS, EMPTY_BODY), [w]),
            "bad magic": lambda c, w: c.send(
                harness.request_bytes(Op.STATUS, EMPTY_BODY, magic=0), [w, w]),
            "verb before hello": lambda c, w: c.send(
                harness.request_bytes(Op.ALLOC_PD, EMPTY_BODY), [w]),
            "more than the protocol allows": lambda c, w: c.send(
                harness.request_bytes(Op.STATUS, EMPTY_BODY), [w] * (harness.MAX_FDS + 1)),
            "unknown device": lambda c, w: c.send(
                harness.request_bytes(Op.HELLO, harness.hello_body("nosuch")), [w]),
        }
        for case, send in cases.items():
            with self.subTest(case=case):
                read_end, write_end = os.pipe()
                try:
                    with self.daemon.raw_client() as other:
                        send(other, write_end)
                        os.close(write_end)
                        write_end = None
                        other.receive()
                        self.assert_connection_usable(other)
                        self.assert_pipe_closed(read_end, "while the connection is open")
                finally:
                    os.close(read_end)
                    if write_end is not None:
                        os.close(write_end)

        read_end, write_end = os.pipe()
        try:
            with self.daemon.raw_client() as other:
                reply = other.call(Op.HELLO, harness.hello_body("uroce0"), fds=[write_end])
                os.close(write_end)
                self.assertEqual(reply.error, 0, reply.message)
            self.assert_pipe_closed(read_end, "after the connection closed")
        finally:
            os.close(read_end)

    def assert_pipe_closed(self, read_end, when, timeout=5.0):
        readable, _, _ = select.select([read_end], [], [], timeout)
        self.assertTrue(readable and os.read(read_end, 1) == b"",
                        "uroced still holds the write end of a pipe it was sent (%s)\n%s" % (
                            when, self.daemon.log()))

    # --- peers that go away ---------------------------------------------------

    def test_client_that_disconnects_without_reading_its_reply(self):
        """A client that sends requests and closes before the replies arrive,
        and one that opens a device, allocates a PD and closes mid-session,
        leave no objects and no session."""
        with self.daemon.raw_client() as quitter:
            quitter.send(harness.request_bytes(Op.STATUS, EMPTY_BODY))
            quitter.send(harness.request_bytes(Op.STATUS, EMPTY_BODY, seq=2))
        with self.daemon.raw_client() as quitter:
            self.assertEqual(quitter.hello("uroce0").error, 0)
            self.assertEqual(quitter.call(Op.ALLOC_PD, EMPTY_BODY).error, 0)
            quitter.send(harness.request_bytes(Op.ALLOC_PD, EMPTY_BODY, seq=99))
        self.daemon.wait_until_idle()

    def test_peer_that_sends_garbage_and_closes(self):
        """Connections that send random bytes (with and without waiting) and
        close, or close without sending anything, do not disturb the daemon."""
        for size in (3, 16, 100, 4096):
            with self.daemon.raw_client() as peer:
                peer.send(os.urandom(size))
        with self.daemon.raw_client():
            pass
        with self.daemon.raw_client() as peer:
            peer.send(os.urandom(64))
            peer.receive()
        self.assert_connection_usable()

    def test_real_clients_work_after_abuse(self):
        """After a burst of malformed requests on several connections,
        ibv_devinfo still opens both devices."""
        harness.require_program("ibv_devinfo")
        for data in (b"x", harness.request_bytes(Op.STATUS, EMPTY_BODY, magic=1),
                     harness.request_bytes(Op.STATUS, EMPTY_BODY, version=VERSION + 1),
                     harness.request_bytes(0xffff, EMPTY_BODY),
                     harness.request_bytes(Op.HELLO, b"nosuch")):
            with self.daemon.raw_client() as peer:
                peer.send(data)
                self.assert_error_reply(peer.receive())
        result = self.run_ok(["ibv_devinfo"])
        self.assertEqual(sorted(harness.split_ibv_devinfo(result.stdout)),
                         sorted(harness.DEFAULT_DEVICES))


class LogBoundTest(harness.DaemonTestCase):
    """No client can fill the runtime directory's disk through the log."""

    MAX_LOG_BYTES = 16384
    daemon_args = ("--max-log-bytes", str(MAX_LOG_BYTES))

    def refuse(self, client, times):
        for _ in range(times):
            reply = client.call(Op.QUERY_PORT, struct.pack("<I", 9))  # no port 9
            self.assertEqual(reply.error, errno.EINVAL, reply.message)

    def test_refusals_are_rate_limited_and_the_log_rotates(self):
        """Eight clients have 4,000 verbs refused: each gets a burst of
        lines, the rest are counted in a later line, and the log is started
        anew at its limit with the full one kept as uroced.log.1."""
        clients = [self.daemon.raw_client() for _ in range(8)]
        try:
            for client in clients:
                self.assertEqual(client.hello("uroce0").error, 0)
            for client in clients:
                self.refuse(client, 500)
        finally:
            for client in clients:
                client.close()
        # A fresh client past its burst: once it may log again, the line
        # says how many were left out.
        with self.daemon.raw_client() as client:
            self.assertEqual(client.hello("uroce0").error, 0)
            self.refuse(client, 300)
            time.sleep(0.3)
            self.refuse(client, 1)
        rotated = self.daemon.log_path + ".1"
        self.assertTrue(os.path.exists(rotated), "the log was never rotated")
        # Every descriptor that wrote the log (stdout and stderr here) moved
        # to the new file: none still names the rotated one.
        fds = "/proc/%d/fd" % self.daemon.proc.pid
        still = []
        for fd in os.listdir(fds):
            try:
                if os.readlink(os.path.join(fds, fd)).startswith(rotated):
                    still.append(fd)
            except FileNotFoundError:
                pass  # a client's, closed meanwhile
        self.assertEqual(still, [], "descriptors still writing %s" % rotated)
        text = ""
        for path in (rotated, self.daemon.log_path):
            size = os.path.getsize(path)
            self.assertLessEqual(size, self.MAX_LOG_BYTES + 600, path)
            with open(path, errors="replace") as f:
                text += f.read()
        refused = text.count("port 9 does not exist")
        self.assertLess(refused, 8 * 150, "refusals are not rate-limited")
        self.assertRegex(text, r"client pid \d+: \d+ more refusals not logged")
        self.daemon.assert_alive(self)


class OutOfDescriptorsTest(unittest.TestCase):
    """A daemon whose descriptors run out refuses new clients with EMFILE
    and a sentence, answering each request it received (never a reply that
    belongs to another), and serves again once clients leave."""

    def setUp(self):
        prlimit = shutil.which("prlimit")
        self.assertIsNotNone(prlimit, "prlimit (util-linux) is not installed")
        self.daemon = harness.Daemon(())
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start(wrapper=[prlimit, "--nofile=48:48", "--"])
        self.addCleanup(self.daemon.stop)

    def test_clients_beyond_the_limit_are_refused_with_emfile(self):
        clients = []
        refusals = []
        try:
            for _ in range(40):
                client = self.daemon.raw_client()
                clients.append(client)
                reply = client.hello("uroce0")
                self.assertEqual((reply.op, reply.seq), (Op.HELLO, client.seq),
                                 "a reply that is not this request's")
                if reply.error:
                    refusals.append(reply)
            self.assertGreater(len(refusals), 0, "40 clients fit in 48 descriptors?")
            for reply in refusals:
                self.assertEqual(reply.error, errno.EMFILE, reply.message)
                self.assertIn("no file descriptors left", reply.message)
        finally:
            for client in clients:
                client.close()
        self.daemon.assert_alive(self)
        self.daemon.wait_until_idle()
        with self.daemon.raw_client() as client:
            self.assertEqual(client.hello("uroce0").error, 0)

    # A process that opens devices until refused, and holds them until its
    # stdin closes.
    HOLDER = """
import sys, harness
clients = []
while True:
    client = harness.RawClient(sys.argv[1], 5.0)
    clients.append(client)
    if client.hello("uroce0").error:
        break
print(len(clients), flush=True)
sys.stdin.read()
"""

    def test_status_tells_refusing_from_not_running(self):
        """Four processes take all the descriptors the daemon keeps for its
        clients (each its share): `uroce status` says the daemon refuses new
        clients, and why, rather than that it is not running."""
        tool = harness.tool_path()
        self.assertIsNotNone(tool, "the uroce command is not built (UROCE_TOOL is not set)")
        holders = [subprocess.Popen([harness.PYTHON, "-c", self.HOLDER, self.daemon.socket_path],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__)))
                   for _ in range(4)]
        try:
            for holder in holders:
                self.assertTrue(holder.stdout.readline().strip().isdigit(), self.daemon.log())
            status = harness.run_program([tool, "status"],
                                         harness.tool_environment(self.daemon.runtime_dir))
            self.assertEqual(status.returncode, 1, status.stdout + status.stderr)
            self.assertIn("is running but refusing new clients", status.stderr)
            self.assertIn("no file descriptors left", status.stderr)
        finally:
            for holder in holders:
                holder.communicate("", timeout=30)
        self.daemon.wait_until_idle()
        status = harness.run_program([tool, "status"],
                                     harness.tool_environment(self.daemon.runtime_dir))
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)


def request_bytes_of_size(size):
    """The first `size` bytes of a valid status request."""
    return harness.request_bytes(Op.STATUS, bytes(REQUEST_HEADER.size))[:size]


if __name__ == "__main__":
    unittest.main()
