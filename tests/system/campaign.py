"""The coverage-guided campaign (docs/fuzzing.md): verb programs
(verb_program.c reads their bytes) mutated from a corpus that starts
empty, each run against one private daemon that is reset between cases;
a program is kept when it lights an entry of the device's coverage map
(`uroce coverage`) that no program lit before. Prints cases per second and
coverage as it goes, and can write the curve and compare what it covered
with what the test suite reached (UROCE_COVERAGE_OUT, harness.py).

    campaign.py --seconds N [--seed S] [--report FILE] [--suite DIR]

A verb program that dies of a signal, or a daemon that dies, is a finding:
its bytes are kept in the report's directory and the campaign says so
(exit status 1)."""

import argparse
import glob
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

import harness
from harness import Op

OP_BYTES = 8
OPS = 20  # verb_program.c's kOps
MAX_OPS = 64
COVERAGE_REQUEST = struct.Struct("<II64s")  # clear, reserved, case_id (empty: the daemon's)
PROGRAM_TIMEOUT = 10.0


def random_op(rng):
    """One operation, its code biased towards making and using objects."""
    code = rng.choice((0, 1, 2, 3, 5, 8, 9, 10, 12, 18) * 3 + tuple(range(OPS)))
    return struct.pack("<BBBBI", code, rng.getrandbits(8), rng.getrandbits(8),
                       rng.getrandbits(8), rng.getrandbits(32))


def ops_of(program):
    return [program[i:i + OP_BYTES] for i in range(0, len(program), OP_BYTES)]


# What a verb program usually does first: PDs, MRs, CQs, QPs, connect two
# of them, post and poll (verb_program.c's op codes).
SKELETON = (0, 0, 1, 1, 2, 2, 3, 3, 5, 10, 8, 12, 12)


def generate(rng):
    """A program from nothing: the skeleton's operations with random
    arguments, some left out, and random ones among them."""
    ops = []
    for code in SKELETON:
        if rng.random() < 0.85:
            ops.append(struct.pack("<BBBBI", code, *(rng.getrandbits(8) for _ in range(3)),
                                   rng.getrandbits(32)))
        while rng.random() < 0.3:
            ops.append(random_op(rng))
    return b"".join(ops)


def mutate(rng, corpus):
    """A new program from the corpus (or from nothing while it is empty)."""
    if not corpus or rng.random() < 0.1:
        return generate(rng)
    ops = ops_of(rng.choice(corpus))
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        at = rng.randrange(len(ops) + 1)
        if kind == 0 or not ops:
            ops.insert(at, random_op(rng))
        elif kind == 1 and len(ops) > 1:
            del ops[at % len(ops)]
        elif kind == 2:
            op = bytearray(ops[at % len(ops)])
            op[rng.randrange(OP_BYTES)] ^= 1 << rng.randrange(8)
            ops[at % len(ops)] = bytes(op)
        elif kind == 3:
            op = bytearray(ops[at % len(ops)])
            op[rng.randrange(1, OP_BYTES)] = rng.getrandbits(8)
            ops[at % len(ops)] = bytes(op)
        elif kind == 4:
            ops.insert(at, ops[rng.randrange(len(ops))])
        else:
            other = ops_of(rng.choice(corpus))
            cut = rng.randrange(len(other) + 1)
            ops = ops[:at] + other[cut:]
    return b"".join(ops[:MAX_OPS])


class Campaign:
    def __init__(self, seed, workdir):
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.daemon = harness.Daemon()
        self.daemon.start()
        self.client = self.daemon.raw_client(timeout=10.0)
        self.env = self.daemon.env()
        self.env["UROCE_FORGE_PORT"] = self.daemon.args[self.daemon.args.index("--udp-port") + 1]
        # A verb program leaves its objects to its exit on purpose.
        harness.without_leak_check(self.env)
        self.program = harness.required_path("UROCE_VERB_PROGRAM")
        self.corpus = []
        self.covered = set()
        self.cases = 0
        self.findings = []
        self.curve = []  # (seconds, cases, entries covered)

    def close(self):
        self.client.close()
        self.daemon.stop()
        self.daemon.cleanup()

    def take_coverage(self):
        """The ids the last case lit, cleared as they are read."""
        reply = self.client.call(Op.COVERAGE, COVERAGE_REQUEST.pack(1, 0, b""))
        if reply.error:
            raise RuntimeError("coverage refused: %s" % reply.message)
        ids, _ = struct.unpack_from("<II", reply.body)
        counts = struct.unpack_from("<%dI" % ids, reply.body, 8)
        return {i for i, count in enumerate(counts) if count}

    def run_case(self, program):
        path = os.path.join(self.workdir, "case")
        with open(path, "wb") as f:
            f.write(program)
        try:
            result = subprocess.run([self.program, path], env=self.env, timeout=PROGRAM_TIMEOUT,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            died = result.returncode < 0 or result.returncode == 2
            why = "exit status %d: %s" % (result.returncode, result.stderr.decode()[-300:])
        except subprocess.TimeoutExpired:
            died, why = True, "no exit in %.0f s" % PROGRAM_TIMEOUT
        if self.daemon.proc.poll() is not None:
            self.keep_finding(program, "the daemon died (status %d)" % self.daemon.proc.returncode)
            raise RuntimeError("the daemon died; see %s" % self.daemon.log_path)
        if died:
            self.keep_finding(program, why)
        lit = self.take_coverage()
        reply = self.client.call(Op.RESET, harness.device_body(""))
        if reply.error:
            raise RuntimeError("reset refused: %s" % reply.message)
        self.cases += 1
        if lit - self.covered:
            self.covered |= lit
            self.corpus.append(program)

    def keep_finding(self, program, why):
        path = os.path.join(self.workdir, "finding-%d" % len(self.findings))
        with open(path, "wb") as f:
            f.write(program)
        self.findings.append({"case": path, "why": why})
        print("finding: %s (%s)" % (why, path), flush=True)

    def run(self, seconds, every=1.0):
        began = time.monotonic()
        next_report = began
        while True:
            now = time.monotonic()
            if now >= next_report or now - began >= seconds:
                elapsed = now - began
                self.curve.append((round(elapsed, 1), self.cases, len(self.covered)))
                print("%6.1f s  %7d cases  %6.1f cases/s  corpus %4d  covered %4d" % (
                    elapsed, self.cases, self.cases / elapsed if elapsed else 0,
                    len(self.corpus), len(self.covered)), flush=True)
                next_report += every
                if elapsed >= seconds:
                    return
            self.run_case(mutate(self.rng, self.corpus))


# The harness loop's program: a PD, an MR, a CQ and an RC QP on uroce0,
# connected to itself (INIT, RTR, RTS), a receive and a signaled 64-byte
# SEND posted, both completions polled.
SMALL_PROGRAM = b"".join(struct.pack("<BBBBI", *op) for op in (
    (0, 0, 0, 0, 0), (1, 0, 1, 0, 4095), (2, 0, 8, 0, 0), (3, 0, 0, 0, 0x11),
    (5, 0, 0, 0, 7), (10, 0, 0, 0, 64), (8, 0, 0, 0, 0x8000 | 64), (12, 0, 1, 0, 0)))


def loop(seconds):
    """Runs SMALL_PROGRAM again and again against one daemon, a reset
    between runs; returns (programs, seconds)."""
    workdir = tempfile.mkdtemp(prefix="uroce-loop-")
    run = Campaign(0, workdir)
    path = os.path.join(workdir, "small")
    with open(path, "wb") as f:
        f.write(SMALL_PROGRAM)
    programs = 0
    try:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            result = subprocess.run([run.program, path], env=run.env, timeout=PROGRAM_TIMEOUT,
                                    stdin=subprocess.DEVNULL)
            if result.returncode != 0:
                raise RuntimeError("the small program failed: status %d" % result.returncode)
            reply = run.client.call(Op.RESET, harness.device_body(""))
            if reply.error:
                raise RuntimeError("reset refused: %s" % reply.message)
            programs += 1
        elapsed = time.monotonic() - began
    finally:
        run.close()
    return programs, elapsed


def suite_reach(directory):
    """The ids the test suite's daemons lit (harness.py's UROCE_COVERAGE_OUT)."""
    reached = set()
    for path in glob.glob(os.path.join(directory, "*.ids")):
        with open(path) as f:
            reached |= {int(line) for line in f if line.strip()}
    return reached


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--report", help="write the curve and figures as JSON here")
    parser.add_argument("--suite", help="the suite's coverage ids (UROCE_COVERAGE_OUT)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between lines")
    parser.add_argument("--loop", action="store_true",
                        help="only the harness loop: the small program, programs per second")
    args = parser.parse_args()
    if args.loop:
        programs, elapsed = loop(args.seconds)
        print("harness loop: %d programs in %.1f s, %.1f programs/s (a reset after each)" % (
            programs, elapsed, programs / elapsed))
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    print("campaign seed %d (--seed %d repeats the programs it writes)" % (seed, seed))
    workdir = tempfile.mkdtemp(prefix="uroce-campaign-")
    campaign = Campaign(seed, workdir)
    try:
        campaign.run(args.seconds, args.every)
    finally:
        campaign.close()
    report = {"seed": seed, "seconds": args.seconds, "cases": campaign.cases,
              "cases_per_second": campaign.cases / args.seconds, "corpus": len(campaign.corpus),
              "covered": len(campaign.covered), "curve": campaign.curve,
              "findings": campaign.findings, "workdir": workdir}
    if args.suite:
        reached = suite_reach(args.suite)
        report["suite_reached"] = len(reached)
        report["suite_covered"] = len(reached & campaign.covered)
        report["suite_fraction"] = len(reached & campaign.covered) / max(1, len(reached))
        report["suite_missed"] = sorted(reached - campaign.covered)
        print("the suite reached %d entries; the campaign covered %d of them (%.1f %%)" % (
            len(reached), report["suite_covered"], 100 * report["suite_fraction"]))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print("%d cases in %.0f s (%.1f/s), %d entries covered, corpus %d, %d findings" % (
        campaign.cases, args.seconds, report["cases_per_second"], len(campaign.covered),
        len(campaign.corpus), len(campaign.findings)))
    return 1 if campaign.findings else 0


if __name__ == "__main__":
    sys.exit(main())
