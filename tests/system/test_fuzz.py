"""Bounded fuzzing campaigns against a real daemon: random control messages,
random and forged RoCEv2 datagrams under live traffic, and random verb
sequences through stock libibverbs (pyverbs) with clients killed midway.
Each asserts what a user relies on: the daemon stays up and answers every
request it gets, traffic between honest peers completes, nothing is left
behind once the clients are gone, and the daemon's memory stays bounded.

The campaigns are seeded (UROCE_FUZZ_SEED; printed) so a failure repeats,
and scaled by UROCE_FUZZ_SCALE (default 1, a few seconds each; tools/fuzz
runs them longer). The suite runs them twice, the second time under
AddressSanitizer and UndefinedBehaviorSanitizer."""

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import MAGIC, VERSION, Op
from roce_wire import icrc_of

SCALE = max(1, int(os.environ.get("UROCE_FUZZ_SCALE", "1")))
SEED = int(os.environ.get("UROCE_FUZZ_SEED", str(int(time.time()))))
HERE = os.path.dirname(os.path.abspath(__file__))


def rng_for(test):
    """A random generator for one test, reproducible from SEED."""
    print("\n%s: UROCE_FUZZ_SEED=%d UROCE_FUZZ_SCALE=%d" % (test.id(), SEED, SCALE),
          file=sys.stderr)
    return random.Random("%d:%s" % (SEED, test.id()))


# Every op the protocol has, and some it does not.
ALL_OPS = sorted({value for name, value in vars(Op).items() if name.isupper()})
BODY_SIZES = (0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 72, 96, 128, 200, 256, 512, 1024, 4096)


class ControlMessageFuzzTest(harness.DaemonTestCase):
    """Random requests on many connections: every message gets exactly one
    reply, which names its request (op and seq) unless the header itself was
    broken, and an error reply says why."""

    def random_request(self, rng, seq):
        op = rng.choice(ALL_OPS + [0, Op.COUNT, 0xffff])
        size = rng.choice(BODY_SIZES)
        body = bytes(rng.getrandbits(8) for _ in range(size))
        if rng.random() < 0.3:  # small handles and counts look real
            body = struct.pack("<I", rng.randrange(8)) + body[4:]
        header = {"seq": seq}
        broken = rng.random() < 0.1
        if broken:
            header.update(rng.choice(({"magic": rng.getrandbits(32)},
                                      {"version": VERSION + 1},
                                      {"length": rng.getrandbits(16)})))
        return op, harness.request_bytes(op, body, **header), broken

    def test_random_requests_are_each_answered(self):
        rng = rng_for(self)
        start_rss = self.daemon.rss()
        answered = 0
        for connection in range(10 * SCALE):
            with self.daemon.raw_client() as client:
                if rng.random() < 0.7:
                    device = rng.choice(list(harness.DEFAULT_DEVICES))
                    self.assertEqual(client.hello(device).error, 0)
                for seq in range(1, 200):
                    op, data, broken = self.random_request(rng, seq)
                    fds = []
                    if rng.random() < 0.05:
                        read_end, write_end = os.pipe()
                        os.close(read_end)
                        fds = [write_end] * rng.randrange(1, harness.MAX_FDS + 2)
                    try:
                        client.send(data, fds)
                    finally:
                        for fd in set(fds):
                            os.close(fd)
                    reply = client.receive()
                    self.assertEqual((reply.magic, reply.version), (MAGIC, VERSION))
                    self.assertEqual(reply.length, reply.size)
                    if not broken:
                        self.assertEqual((reply.op, reply.seq), (op, seq),
                                         "connection %d: a reply to another request" % connection)
                    if reply.error:
                        self.assertNotEqual(reply.message.strip(), "", "op %d" % op)
                    answered += 1
        self.daemon.assert_alive(self)
        self.daemon.wait_until_idle()
        self.assertGreater(answered, 1000)
        self.assertLess(self.daemon.rss() - start_rss,
                        (32 << 20) + harness.SANITIZER_MEMORY_SLACK)


# RC, UC, UD and XRC opcodes of requests and responses, and some no one uses.
OPCODES = list(range(0x00, 0x18)) + list(range(0x20, 0x2c)) + [0x64, 0x65, 0x81] + \
    list(range(0xa0, 0xb8)) + [0x1f, 0x3f, 0xff]


class PacketFuzzTest(harness.DaemonTestCase):
    """Random and forged datagrams arrive at both devices while ib_send_lat
    runs between them over UDP: the honest pair finishes, the forged
    packets are counted where the daemon drops them, and memory stays
    bounded."""

    # --open: the forger is not one of the daemon's devices, which on
    # loopback would take its packets otherwise (docs/uroced.md).
    daemon_args = ("--no-shortcut", "--open")

    def forged(self, rng, dst, port):
        """One datagram: a header-shaped one with a valid ICRC (it reaches
        the QP lookup and the transport), or one with a broken ICRC, or
        plain noise."""
        kind = rng.random()
        if kind < 0.1:
            return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        bth = struct.pack("!BBHII", rng.choice(OPCODES), rng.getrandbits(8) & 0xf0,
                          rng.choice((0xffff, rng.getrandbits(16))),
                          rng.randrange(0, 0x40), rng.getrandbits(32))
        rest = bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 4, 16, 28, 64, 1024))))
        payload = bth + rest
        icrc = icrc_of("127.0.0.9", dst, port, port, payload)
        if kind < 0.3:
            icrc = bytes(b ^ 0x5a for b in icrc)
        return payload + icrc

    def test_forged_datagrams_do_not_disturb_honest_traffic(self):
        rng = rng_for(self)
        program = harness.require_program("ib_send_lat")
        port = int(self.daemon.args[self.daemon.args.index("--udp-port") + 1])
        before = harness.parse_stats(self.daemon.stats_text())
        start_rss = self.daemon.rss()
        tcp_port = harness.free_tcp_port()
        common = ["-x", "0", "-n", str(3000 * SCALE), "-s", "64", "-p", str(tcp_port)]
        env = self.daemon.env()
        server = subprocess.Popen([program, "-d", "uroce0", *common], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        forger.bind(("127.0.0.9", port))
        sent = 0
        try:
            time.sleep(0.5)
            client = subprocess.Popen([program, "-d", "uroce1", *common, "127.0.0.1"], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 60 * SCALE
            while client.poll() is None and time.monotonic() < deadline:
                for _ in range(200):
                    dst = rng.choice(list(harness.DEFAULT_DEVICES.values()))
                    forger.sendto(self.forged(rng, dst, port), (dst, port))
                    sent += 1
                time.sleep(0.002)
            outputs = []
            for proc in (client, server):
                try:
                    outputs.append(proc.communicate(timeout=30)[0])
                except subprocess.TimeoutExpired:
                    proc.kill()
                    outputs.append(proc.communicate()[0])
        finally:
            forger.close()
            for proc in (server,):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for name, proc, output in (("client", client, outputs[0]), ("server", server, outputs[1])):
            self.assertEqual(proc.returncode, 0, "ib_send_lat %s failed:\n%s\n%s" % (
                name, output, self.daemon.log()))
        self.assertGreater(sent, 1000)
        self.daemon.assert_alive(self)
        after = harness.parse_stats(self.daemon.stats_text())
        dropped = sum(after[d][c] - before[d][c] for d in harness.DEFAULT_DEVICES
                      for c in ("rcvd_icrc_err", "rcvd_malformed", "rcvd_unknown_qp",
                                "rcvd_dropped", "rcvd_qkey_err"))
        self.assertGreater(dropped, sent // 2, after)
        self.assertEqual(sum(after[d]["retry_exceeded_err"] - before[d]["retry_exceeded_err"]
                             for d in harness.DEFAULT_DEVICES), 0)
        self.daemon.wait_until_idle()
        self.assertLess(self.daemon.rss() - start_rss,
                        (32 << 20) + harness.SANITIZER_MEMORY_SLACK)


class VerbSequenceFuzzTest(harness.DaemonTestCase):
    """Random verb sequences through stock libibverbs (pyverbs), several
    processes at once, a tenth of them killed midway: every refused verb
    fails with an errno its man page allows, every process that is not
    killed finishes, and once all are gone the daemon holds nothing."""

    @classmethod
    def setUpClass(cls):
        harness.require_pyverbs()
        super().setUpClass()

    def test_random_verb_sequences(self):
        rng = rng_for(self)
        script = os.path.join(HERE, "pyverbs_scripts", "verb_fuzz.py")
        start_rss = self.daemon.rss()
        for batch in range(3 * SCALE):
            procs = []
            for _ in range(4):
                seed = rng.getrandbits(32)
                proc = subprocess.Popen([harness.PYTHON, script, str(seed), "300"],
                                        env=self.daemon.env(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                procs.append((seed, proc, rng.random() < 0.1))
            for seed, proc, kill in procs:
                if kill:
                    time.sleep(rng.random() * 0.5)
                    proc.send_signal(signal.SIGKILL)
                output = proc.communicate(timeout=120)[0]
                if not kill:
                    self.assertEqual(proc.returncode, 0, "verb_fuzz.py %d:\n%s\n%s" % (
                        seed, output, self.daemon.log()))
            self.daemon.wait_until_idle(timeout=10.0)
        self.daemon.assert_alive(self)
        self.assertLess(self.daemon.rss() - start_rss,
                        (64 << 20) + harness.SANITIZER_MEMORY_SLACK)


class VerbProgramTest(harness.DaemonTestCase):
    """Sequences the fuzzers found that once crashed a program, run as
    verb_program.c programs (8-byte operations: code, a, b, c, then d)."""

    def run_program(self, *ops):
        path = os.path.join(tempfile.mkdtemp(prefix="uroce-verb-program-"), "case")
        self.addCleanup(shutil.rmtree, os.path.dirname(path), True)
        with open(path, "wb") as f:
            f.write(b"".join(struct.pack("<BBBBI", *op) for op in ops))
        env = self.daemon.env()
        harness.without_leak_check(env)  # a verb program leaves its objects to its exit
        return harness.run_program([harness.required_path("UROCE_VERB_PROGRAM"), path], env,
                                   log=self.daemon.log)

    def test_xrc_target_given_queues_it_ignores(self):
        # An XRC_TGT QP created with another type's CQs and SRQ, those CQs
        # destroyed (the QP holds none), then both XRC QPs destroyed: the
        # provider once followed the freed CQ and crashed (SIGSEGV).
        make_pd, make_mr, make_cq, make_srq, destroy, xrc = 0, 1, 2, 4, 14, 19
        result = self.run_program((make_pd, 0, 0, 0, 0), (make_mr, 0, 0, 0, 4095),
                                  (make_cq, 0, 7, 0, 0), (make_srq, 0, 3, 0, 0),
                                  (xrc, 2, 0, 0, 64), (destroy, 2, 0, 0, 0),
                                  (destroy, 0, 0, 0, 0), (destroy, 0, 0, 0, 0))
        self.assertEqual(result.returncode, 0, result.stderr + self.daemon.log())
        self.daemon.assert_alive(self)


class CoverageGuidedCampaignTest(unittest.TestCase):
    """campaign.py, the coverage-guided verb-program fuzzer (docs/fuzzing.md),
    for 15 s per UROCE_FUZZ_SCALE from an empty corpus against one daemon
    reset between cases: no verb program dies of a signal or hangs, the
    daemon survives, and the corpus grows as new map entries are lit."""

    def test_a_short_seeded_round(self):
        import campaign
        seed = rng_for(self).getrandbits(32)
        workdir = tempfile.mkdtemp(prefix="uroce-campaign-")
        self.addCleanup(shutil.rmtree, workdir, True)
        run = campaign.Campaign(seed, workdir)
        try:
            run.run(15 * SCALE, every=5.0)
        finally:
            run.close()
        self.assertEqual(run.findings, [], "campaign seed %d" % seed)
        self.assertGreater(run.cases, len(run.corpus))
        # Each program kept lit something no program before it did.
        self.assertGreater(len(run.corpus), 1)


if __name__ == "__main__":
    unittest.main()
