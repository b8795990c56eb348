"""What a fuzzer drives uroce with (docs/fuzzing.md): `uroce reset`
between cases, seeded faults, fault decisions recorded by `uroce trace
--faults` and replayed by `uroce fault --replay`."""

import ctypes
import errno
import json
import os
import re
import signal
import struct
import subprocess
import unittest

import harness
from harness import Op
import test_observability as observability

EXIT_FAILURE = observability.EXIT_FAILURE
EXIT_USAGE = observability.EXIT_USAGE
# rpc::ReplayedFault: src_qpn, dest_qpn, psn_offset, attempt, mad_tid,
# opcode, drop, copies, reserved, delay_us.
REPLAYED_FAULT = struct.Struct("<IIIIQBBBBI")
DEVICES = ("uroce0", "uroce1")


def exec_environment(env, **extra):
    """`env` for `uroce exec -- python3 SCRIPT`: in a sanitizer build the
    preloaded runtimes would judge the interpreter's own leaks."""
    return harness.without_leak_check(dict(env, **extra))


class ResetTest(observability.ObservabilityTestCase):
    """uroce reset (docs/uroce.md): every client's objects on the device go,
    its clients hear IBV_EVENT_DEVICE_FATAL and get EIO after, its faults
    and counters are as at start; the other device is untouched, and a new
    client opens the reset device at once."""

    def test_reset_returns_the_device_to_its_start(self):
        harness.require_pyverbs()
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", 5, 64,
                                              log=self.daemon.log)
        self.assertEqual((server.returncode, client.returncode), (0, 0), server.output)
        victim = harness.VerbsClient(self.daemon)
        self.addCleanup(victim.close)
        for command in (("open", "uroce0"), ("pd",), ("mr",), ("cq",), ("qp",), ("qp_to_init",)):
            victim.must(*command)
        bystander = harness.VerbsClient(self.daemon)
        self.addCleanup(bystander.close)
        bystander.must("open", "uroce1")
        bystander.must("pd")
        self.assert_exit(self.uroce("fault", "uroce0", "--drop", "5%"), 0)
        self.assertGreater(self.stats()["uroce0"]["sent_pkts"], 0)

        result = self.uroce("reset", "uroce0")
        self.assert_exit(result, 0)
        self.assertRegex(result.stdout, r"^reset uroce0: 1 context\(s\) lost, \d+\.\d{3} ms\n$")

        self.assertEqual(victim.must("async_event")["event_type"], harness.IBV_EVENT_DEVICE_FATAL)
        refused = victim.call("pd")
        self.assertFalse(refused["ok"], refused)
        self.assertEqual(refused["errno"], errno.EIO, refused)
        status = self.daemon.status()
        self.assertEqual(status.devices["uroce0"].objects, harness.zero_counts(), status.text)
        self.assertEqual(status.devices["uroce1"].objects, harness.counts(pd=1), status.text)
        self.assertIsNone(self.faults_line("uroce0"))
        counters = self.stats()
        self.assertEqual(set(counters["uroce0"].values()), {0}, counters["uroce0"])
        self.assertGreater(counters["uroce1"]["sent_pkts"], 0)

        # A new client at once, and after each reset the same numbers for
        # the same objects (QPN, keys), as from a daemon just started.
        first = None
        for _ in range(2):
            fresh = harness.VerbsClient(self.daemon)
            self.addCleanup(fresh.close)
            fresh.must("open", "uroce0")
            fresh.must("pd")
            lkey = fresh.must("mr")["lkey"]
            fresh.must("cq")
            numbers = (lkey, fresh.must("qp")["qp_num"])
            self.assertEqual(self.daemon.status().devices["uroce0"].objects,
                             harness.counts(pd=1, mr=1, cq=1, qp=1))
            self.assertEqual(numbers, first or numbers)
            first = numbers
            self.assert_exit(self.uroce("reset", "uroce0"), 0)

    def test_reset_of_every_device_and_of_none(self):
        result = self.uroce("reset")
        self.assert_exit(result, 0)
        self.assertRegex(result.stdout, r"^reset every device: 0 context\(s\) lost")
        self.assert_exit(self.uroce("reset", "nosuch"), EXIT_FAILURE, "no device named nosuch")
        self.assert_exit(self.uroce("reset", "uroce0", "uroce1"), EXIT_USAGE)


class FaultScheduleTest(observability.ObservabilityTestCase):
    """uroce trace --faults records each device's fault decisions, by
    packet identity and attempt; the same seed gives the same decisions, and
    uroce fault --replay gives a recorded run's packets the same fates."""

    def recorded_run(self, name, set_faults):
        """After a reset and set_faults(device) on both devices, 50 pings of
        ibv_rc_pingpong while `uroce trace --faults` records both devices.
        Returns ({device: (settings lines, sorted decision lines)}, counters
        and the programs' exit statuses). A lost last ACK fails the side
        that waits for it after the other has exited ("transport retry
        counter exceeded"), as on any RC device: a run's outcome is part of
        what its faults decide."""
        self.assert_exit(self.uroce("reset"), 0)
        for device in DEVICES:
            set_faults(device)
        traces = {}
        for device in DEVICES:
            path = self.path("%s-%s.jsonl" % (name, device))
            trace = self.uroce_popen("trace", device, "--faults", path)
            self.addCleanup(lambda t=trace: t.poll() is not None or (t.kill(), t.communicate()))
            traces[device] = (path, trace)
        for device in DEVICES:
            self.wait_for_tracing(device)
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", 50, 64,
                                              log=self.daemon.log)
        counters = self.stats()
        outcome = {"exit statuses": (server.returncode, client.returncode)}
        records = {}
        for device, (path, trace) in traces.items():
            trace.send_signal(signal.SIGINT)
            out, err = trace.communicate(timeout=10)
            self.assertEqual(trace.returncode, 0, out + err)
            recorded = re.fullmatch(r"(\d+) fault decisions recorded to (.*)\n", out)
            self.assertIsNotNone(recorded, out)
            self.assertEqual(recorded.group(2), path)
            with open(path) as f:
                lines = [json.loads(line) for line in f]
            settings = [line["faults"] for line in lines if "faults" in line]
            decisions = sorted(json.dumps(line, sort_keys=True) for line in lines
                               if "faults" not in line)
            self.assertEqual(int(recorded.group(1)), len(decisions))
            records[device] = (settings, decisions)
        for device in DEVICES:
            outcome[device] = {name: counters[device][name]
                               for name in ("fault_dropped", "fault_duplicated", "sent_pkts")}
        return records, outcome

    def faults(self, *args):
        return lambda device: self.assert_exit(self.uroce("fault", device, *args), 0)

    def decisions(self, records):
        return {device: decisions for device, (_, decisions) in records.items()}

    def assert_every_fate(self, records):
        """The run met drops, duplicates and reorders (held 200 us)."""
        fates = [json.loads(line) for _, decisions in records.values() for line in decisions]
        self.assertTrue(any(fate["drop"] for fate in fates), fates)
        self.assertTrue(any(fate["copies"] == 2 for fate in fates), fates)
        self.assertTrue(any(fate["delay_us"] == 200 for fate in fates), fates)

    def test_the_same_seed_meets_the_same_fault_decisions(self):
        rates = ("--drop", "10%", "--duplicate", "5%", "--reorder", "5%")
        runs = [self.recorded_run("seed%d-%d" % (seed, i), self.faults(*rates, "--seed", str(seed)))
                for i, seed in enumerate((5, 5, 6))]
        (first, first_outcome), (second, second_outcome), (other, _) = runs
        self.assert_every_fate(first)
        for device in DEVICES:
            self.assertEqual(first[device][0], [{"drop": 0.1, "duplicate": 0.05, "reorder": 0.05,
                                                 "delay_us": 0, "seed": 5, "replay": 0}])
        self.assertEqual(self.decisions(first), self.decisions(second))
        self.assertEqual(first_outcome, second_outcome)
        self.assertNotEqual(self.decisions(first), self.decisions(other))

    def test_a_recorded_schedule_replays_a_run_without_a_seed(self):
        """Decisions made by chance, recorded, then replayed: the program's
        packets meet exactly the recorded fates, and only those."""
        recorded, outcome = self.recorded_run(
            "chance", self.faults("--drop", "10%", "--duplicate", "5%", "--reorder", "5%"))
        self.assert_every_fate(recorded)

        def replay(device):
            path = self.path("chance-%s.jsonl" % device)
            result = self.uroce("fault", device, "--replay", path)
            self.assert_exit(result, 0)
            count = len(recorded[device][1])
            self.assertEqual(result.stdout, "%s: replaying %d fault decisions from %s\n" % (
                device, count, path))
            self.assertEqual(self.faults_line(device), "  faults replaying %d decisions" % count)

        replayed, replayed_outcome = self.recorded_run("replayed", replay)
        self.assertEqual(self.decisions(replayed), self.decisions(recorded))
        self.assertEqual(replayed_outcome, outcome)
        for device in DEVICES:
            self.assertEqual(replayed[device][0][-1]["replay"], len(recorded[device][1]))
        self.assert_exit(self.uroce("fault", "uroce0", "--clear"), 0)
        self.assertIsNone(self.faults_line("uroce0"))
        self.assert_exit(self.uroce("reset"), 0)

    def schedule_file(self, *records):
        path = self.path("schedule.bin")
        with open(path, "wb") as f:
            for record in records:
                f.write(REPLAYED_FAULT.pack(*record))
        return path

    def test_bad_schedules_are_refused_and_change_nothing(self):
        self.assert_exit(self.uroce("reset"), 0)
        drop_one = (17, 18, 0, 0, 0, 4, 1, 1, 0, 0)
        cases = [
            # (replayed, records, errno, message)
            (1, None, errno.EBADF, "one file descriptor, not 0"),
            (2, [drop_one], errno.EINVAL, "not a regular file of 64 bytes (2 decisions)"),
            (1, [(17, 18, 0, 0, 0, 4, 1, 3, 0, 0)], errno.EINVAL,
             "decision 1 of the schedule is not one a device makes"),
            (1, [(1 << 24, 18, 0, 0, 0, 4, 1, 1, 0, 0)], errno.EINVAL, "decision 1"),
            (1, [(17, 18, 0, 0, 0, 4, 0, 1, 0, harness.MAX_FAULT_DELAY_US + 1)], errno.EINVAL,
             "decision 1"),
            (2, [drop_one, drop_one], errno.EINVAL,
             "decision 2 of the schedule decides a packet decided before"),
            ((1 << 18) + 1, [drop_one], errno.E2BIG, "more than the 262144 a device replays"),
        ]
        with self.daemon.raw_client() as client:
            for replayed, records, error, message in cases:
                with self.subTest(message=message):
                    fds = []
                    if records is not None:
                        fds = [os.open(self.schedule_file(*records), os.O_RDONLY)]
                    try:
                        reply = client.call(Op.SET_FAULTS, harness.set_faults_body(
                            "uroce0", replayed=replayed), fds=fds)
                    finally:
                        for fd in fds:
                            os.close(fd)
                    self.assert_refused(reply, error, message)
            fd = os.open(self.schedule_file(drop_one), os.O_RDONLY)
            try:
                reply = client.call(Op.SET_FAULTS, harness.set_faults_body(
                    "uroce0", drop=0.1, replayed=1), fds=[fd])
            finally:
                os.close(fd)
            self.assert_refused(reply, errno.EINVAL, "goes alone")
            read_end, write_end = os.pipe()
            try:
                reply = client.call(Op.SET_FAULTS, harness.set_faults_body(
                    "uroce0", replayed=1), fds=[read_end])
            finally:
                os.close(read_end)
                os.close(write_end)
            self.assert_refused(reply, errno.EINVAL, "not a regular file")
        self.assertIsNone(self.faults_line("uroce0"))

    def test_the_tool_names_the_bad_line_of_a_record(self):
        self.assert_exit(self.uroce("reset"), 0)
        good = json.dumps({"src_qpn": 17, "dest_qpn": 18, "opcode": 4, "psn_offset": 0,
                           "mad_tid": 0, "attempt": 0, "drop": True, "copies": 1,
                           "delay_us": 0})
        settings = json.dumps({"faults": {"drop": 0.1}})
        for lines, message in (
                ([settings, good, "{not json"], "bad.jsonl:3: not a fault decision"),
                ([good, good.replace('"copies": 1', '"copies": 3')], "bad.jsonl:2:"),
                ([good.replace('"drop": true', '"drop": 1')], "bad.jsonl:1:"),
                ([good.replace('"src_qpn": 17, ', '')], "bad.jsonl:1:"),
                ([settings], "records no fault decision to replay")):
            with self.subTest(lines=lines):
                path = self.path("bad.jsonl")
                with open(path, "w") as f:
                    f.write("\n".join(lines) + "\n")
                self.assert_exit(self.uroce("fault", "uroce0", "--replay", path), EXIT_FAILURE,
                                 message)
        self.assert_exit(self.uroce("fault", "uroce0", "--replay", self.path("nosuch")),
                         EXIT_FAILURE, "cannot read")
        self.assert_exit(self.uroce("fault", "uroce0", "--replay", path, "--drop", "1%"),
                         EXIT_USAGE, "--replay FILE goes alone")
        self.assertIsNone(self.faults_line("uroce0"))


class CoverageTest(observability.ObservabilityTestCase):
    maxDiff = None
    """uroce coverage: the device's map of behaviours, lit exactly by what a
    known program does, cleared on demand, and added to an AFL++ map by
    uroce exec when __AFL_SHM_ID names one."""

    def coverage(self, *args):
        result = self.uroce("coverage", "--json", *args)
        self.assert_exit(result, 0)
        return json.loads(result.stdout)

    def lit(self, report):
        return {(entry["area"], entry["name"]): entry["count"]
                for entry in report["entries"] if entry["count"]}

    def test_the_map_is_fixed_and_named(self):
        report = self.coverage()
        entries = report["entries"]
        ids = [entry["id"] for entry in entries]
        self.assertEqual(ids, sorted(set(ids)), "ids are unique and in order")
        self.assertLess(ids[-1], report["ids"])
        names = {(entry["area"], entry["name"]) for entry in entries}
        self.assertEqual(len(names), len(entries), "names are unique within an area")
        self.assertEqual({entry["area"] for entry in entries},
                         {"qp_transition", "work_request", "packet_sent", "packet_received",
                          "responder", "completion", "async_event", "cm_message_sent",
                          "cm_message_received", "cm_state", "cm_id_state", "refusal"})
        for expected in (("qp_transition", "UD RTR->RTS refused: missing attribute"),
                         ("work_request", "XRC_INI ATOMIC_WRITE"),
                         ("packet_received", "RC_RDMA_READ_REQUEST (0x0c)"),
                         ("responder", "NAK remote access error"),
                         ("completion", "RECV WR_FLUSH_ERR"),
                         ("async_event", "SRQ_LIMIT_REACHED"),
                         ("cm_message_sent", "DREQ"),
                         ("cm_state", "req-sent->established"),
                         ("cm_id_state", "route-resolved->connect"),
                         ("refusal", "create_qp EINVAL")):
            self.assertIn(expected, names)
        self.assertEqual(self.coverage()["ids"], report["ids"])

    # ibv_rc_pingpong's entries (test_a_known_program_lights_exactly_its_entries).
    KNOWN_PINGPONG = {("qp_transition", "RC %s accepted" % move): 2
                      for move in ("RESET->INIT", "INIT->RTR", "RTR->RTS")}
    KNOWN_PINGPONG.update({("work_request", "RC SEND"): 10, ("work_request", "RC RECV"): 10,
                           ("responder", "ACK"): 10, ("completion", "SEND SUCCESS"): 10,
                           ("completion", "RECV SUCCESS"): 10})
    for area in ("packet_sent", "packet_received"):
        KNOWN_PINGPONG.update({(area, "RC_SEND_FIRST (0x00)"): 10,
                               (area, "RC_SEND_MIDDLE (0x01)"): 20,
                               (area, "RC_SEND_LAST (0x02)"): 10,
                               (area, "RC_ACKNOWLEDGE (0x11)"): 10})
    del area

    def test_a_known_program_lights_exactly_its_entries(self):
        """ibv_rc_pingpong, 5 iterations of 4096 bytes at MTU 1024 between
        uroce0 and uroce1: each side's QP goes RESET->INIT->RTR->RTS; each
        side sends 5 messages of 4 packets (first, two middle, last), each
        acknowledged once at its end; each takes 5 receives; every work
        request completes. Nothing else (no refusal, no event, no CM)."""
        self.assert_exit(self.uroce("reset"), 0)
        self.coverage("--reset")
        server, client = harness.run_pingpong(self.daemon.env(), "uroce0", "uroce1", 5, 4096,
                                              log=self.daemon.log, extra_args=("-m", "1024"))
        self.assertEqual((server.returncode, client.returncode), (0, 0), server.output)
        self.assertEqual(self.lit(self.coverage("--reset")), self.KNOWN_PINGPONG)
        self.assertEqual(self.lit(self.coverage()), {}, "--reset cleared the counts")
        result = self.uroce("coverage")
        self.assert_exit(result, 0)
        self.assertRegex(result.stdout, r"^0 of \d+ entries lit\n$")

    def run_known_script(self, env_extra=None):
        harness.require_pyverbs()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyverbs_scripts",
                              "coverage_known.py")
        env = exec_environment(self.env, **(env_extra or {}))
        result = harness.run_program([self.tool, "exec", "--", harness.PYTHON, script], env=env,
                                     log=self.daemon.log)
        self.assert_exit(result, 0)

    KNOWN_SCRIPT = {("qp_transition", "RC RESET->INIT accepted"): 1,
                    ("qp_transition", "RC INIT->RTR refused: missing attribute"): 1,
                    ("qp_transition", "RC INIT->RTS refused: not allowed"): 1,
                    ("refusal", "modify_qp EINVAL"): 2}

    def test_refusals_and_reset(self):
        self.coverage("--reset")
        self.run_known_script()
        self.assertEqual(self.lit(self.coverage()), self.KNOWN_SCRIPT)
        self.assert_exit(self.uroce("reset", "uroce1"), 0)
        self.assertEqual(self.lit(self.coverage()), self.KNOWN_SCRIPT,
                         "a reset of one device keeps the daemon's map")
        self.assert_exit(self.uroce("reset"), 0)
        self.assertEqual(self.lit(self.coverage()), {}, "a reset of every device clears it")
        self.assert_exit(self.uroce("coverage", "--bogus"), EXIT_USAGE, "usage:")

    def test_cases_at_once_each_see_only_their_own(self):
        """An ibv_rc_pingpong server of case-rc holds its QP (and waits on
        TCP) while the known pyverbs script of case-py runs; then its client
        completes the pair. `uroce coverage --case` shows each case exactly
        its own entries, the daemon's map both; --reset of a case clears
        that case's alone."""
        self.assert_exit(self.uroce("reset"), 0)
        program = harness.require_program("ibv_rc_pingpong")
        port = harness.free_tcp_port()
        common = ["-g", "0", "-n", "5", "-s", "4096", "-m", "1024", "-p", str(port)]
        env = dict(self.daemon.env(), UROCE_CASE="case-rc")
        server = subprocess.Popen([program, "-d", "uroce0", *common], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: server.poll() is None and server.kill())
        harness.wait_for(lambda: harness.tcp_port_listening(port, server.pid) or
                         server.poll() is not None, 10.0, "the server to listen", self.daemon.log)
        self.run_known_script({"UROCE_CASE": "case-py"})
        self.assertIsNone(server.poll(), "the server of case-rc ran all the while")
        client = harness.run_program([program, "-d", "uroce1", *common, "127.0.0.1"], env,
                                     log=self.daemon.log)
        self.assert_exit(client, 0)
        self.assertEqual(server.wait(timeout=60), 0, server.communicate()[0])

        self.assertEqual(self.lit(self.coverage("--case", "case-rc")), self.KNOWN_PINGPONG)
        self.assertEqual(self.lit(self.coverage("--case", "case-py")), self.KNOWN_SCRIPT)
        both = dict(self.KNOWN_PINGPONG)
        for entry, count in self.KNOWN_SCRIPT.items():
            both[entry] = both.get(entry, 0) + count
        self.assertEqual(self.lit(self.coverage()), both)

        self.assertEqual(self.lit(self.coverage("--case", "case-py", "--reset")),
                         self.KNOWN_SCRIPT)
        self.assertEqual(self.lit(self.coverage("--case", "case-py")), {})
        self.assertEqual(self.lit(self.coverage("--case", "case-rc")), self.KNOWN_PINGPONG)
        self.assert_exit(self.uroce("coverage", "--case", "case-nobody"), EXIT_FAILURE,
                         "no coverage is kept for case case-nobody")
        self.assert_exit(self.uroce("coverage", "--case"), EXIT_USAGE, "usage:")
        self.assert_exit(self.uroce("reset"), 0)
        # a reset of every device forgets the cases' maps
        self.assert_exit(self.uroce("coverage", "--case", "case-rc"), EXIT_FAILURE,
                         "no coverage is kept")

    def test_uroce_exec_adds_the_device_coverage_to_an_afl_map(self):
        """With __AFL_SHM_ID, `uroce exec` adds what the device did while its
        command ran into that System V shared memory: entry id i at byte
        size - ids + i of a map of at least `ids` bytes, at id mod size in a
        smaller one, each count saturating at 255."""
        for size in (65536, 1024):
            with self.subTest(size=size):
                self.coverage("--reset")
                shm = SharedMemory(size)
                self.addCleanup(shm.remove)
                self.run_known_script({"__AFL_SHM_ID": str(shm.id)})
                report = self.coverage()
                self.assertEqual(self.lit(report), self.KNOWN_SCRIPT)
                expected = bytearray(size)
                for entry in report["entries"]:
                    if entry["count"]:
                        index = (size - report["ids"] + entry["id"] if size >= report["ids"]
                                 else entry["id"] % size)
                        expected[index] = min(255, expected[index] + entry["count"])
                self.assertEqual(shm.read(), bytes(expected))
        bad = self.uroce("exec", "--", "true")
        env = dict(self.env, __AFL_SHM_ID="x")
        result = harness.run_program([self.tool, "exec", "--", "true"], env=env,
                                     log=self.daemon.log)
        self.assert_exit(bad, 0)
        self.assert_exit(result, EXIT_FAILURE, "is not a shared memory id")


class CaseIdTest(observability.ObservabilityTestCase):
    """UROCE_CASE: what a program run with it causes in the daemon (log
    lines, refusals, the counters while it was open, check-mode findings)
    carries the id, and `uroce log --case ID` prints exactly those lines."""

    def setUp(self):
        super().setUp()
        # `uroce log` reads the runtime directory's log, where `uroce start` puts it.
        link = os.path.join(self.daemon.runtime_dir, "uroced.log")
        if not os.path.lexists(link):
            os.symlink(self.daemon.log_path, link)

    def known_script(self, case_id):
        harness.require_pyverbs()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyverbs_scripts",
                              "coverage_known.py")
        return harness.run_program([self.tool, "exec", "--", harness.PYTHON, script],
                                   env=exec_environment(self.env, UROCE_CASE=case_id),
                                   log=self.daemon.log)

    def case_lines(self, case_id):
        """The log lines of the case, without their time and level."""
        result = self.uroce("log", "--case", case_id)
        self.assert_exit(result, 0)
        return [line.split(" ", 3)[3] for line in result.stdout.splitlines()]

    def test_a_cases_lines_carry_its_id_and_no_other(self):
        script = self.known_script("case-8")
        self.assert_exit(script, 0)
        env = dict(self.daemon.env(), UROCE_CASE="case-7")
        server, client = harness.run_pingpong(env, "uroce0", "uroce1", 5, 64,
                                              log=self.daemon.log)
        self.assertEqual((server.returncode, client.returncode), (0, 0), server.output)

        lines = self.case_lines("case-8")
        self.assertTrue(all(line.endswith(" [case case-8]") for line in lines), lines)
        text = "\n".join(lines)
        self.assertRegex(text, r"client pid (\d+) opened uroce0 \[case case-8\]")
        pid = re.search(r"client pid (\d+) opened uroce0", text).group(1)
        self.assertEqual(len(re.findall(r"client pid %s on uroce0: modify_qp refused: RC "
                                        r"INIT->(RTR|RTS) .*\(Invalid argument\)" % pid, text)),
                         2, text)
        self.assertIn("client pid %s closed uroce0 [case case-8]" % pid, lines)
        self.assertIn("client pid %s: uroce0's counters while it was open: none [case case-8]"
                      % pid, lines)

        pingpong = self.case_lines("case-7")
        for side, device in ((server, "uroce0"), (client, "uroce1")):
            snapshot = [line for line in pingpong if "%s's counters while it was open" % device
                        in line]
            self.assertEqual(len(snapshot), 1, pingpong)
            # 5 single-packet messages each way, each acknowledged: 10 packets out, 10 in.
            self.assertRegex(snapshot[0], r" sent_pkts \+10 rcvd_pkts \+10 rdma_sends \+5 "
                                          r"rdma_recvs \+5 completions \+5 \[case case-7\]$")
        self.assertFalse(set(lines) & set(pingpong))
        whole = self.uroce("log")
        self.assert_exit(whole, 0)
        self.assertTrue(set(lines + pingpong) <=
                        {line.split(" ", 3)[3] for line in whole.stdout.splitlines()})
        self.assertEqual(self.case_lines("case-nobody"), [])

    def test_check_findings_name_the_case(self):
        env = dict(self.daemon.env(), UROCE_CHECK="report", UROCE_CASE="case-9")
        result = harness.run_program([harness.required_path("UROCE_CHECK_PROGRAMS"), "uroce0",
                                      "leak"], env, log=self.daemon.log)
        self.assertIn("==ERROR: uroce check: leak", result.stderr)
        report = json.loads(self.uroce("check", "--json").stdout)
        self.assertEqual(report["kept"][-1]["case"], "case-9", report["kept"][-1])
        self.assertRegex(self.uroce("check").stdout, r"pid \d+, uroce0, case case-9:\n")
        self.assertTrue(any(re.search(r"check: client pid \d+ on uroce0: .*leak", line)
                            for line in self.case_lines("case-9")), self.case_lines("case-9"))

    def test_a_bad_case_id_is_refused_with_why(self):
        for bad, why in (("a b", "is not a case id: letters, digits and ._:/+=@- only"),
                         ("x" * 64, "UROCE_CASE is longer than 63 bytes")):
            with self.subTest(case_id=bad):
                result = self.known_script(bad)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(why, result.stderr)
        with self.daemon.raw_client() as client:
            reply = client.call(Op.HELLO, harness.hello_body("uroce0", "a]b"))
            self.assertEqual(reply.error, errno.EINVAL, reply.message)
        self.assert_exit(self.uroce("log", "--case"), EXIT_USAGE, "usage:")


class ParanoidTest(unittest.TestCase):
    """uroced --paranoid checks each QP's invariants after every step: a
    daemon bug planted in a test build (uroced_planted: a SEND with
    immediate data 0x0badc0de makes the requester take unsent PSNs as
    acknowledged) aborts the daemon with a report naming the case, while
    the built uroced runs real traffic under --paranoid without a report."""

    TRIGGER = "0x0badc0de"

    def daemon(self, args, binary=None):
        daemon = harness.Daemon(args, binary=binary)
        if "--paranoid" not in args and "--paranoid" in daemon.args:
            daemon.args.remove("--paranoid")  # UROCE_DAEMON_ARGS asked for it, not this test
        self.addCleanup(daemon.cleanup)
        daemon.start()
        self.addCleanup(lambda: daemon.proc.poll() is not None or daemon.stop())
        return daemon

    def send(self, daemon, imm, case_id="planted-1"):
        harness.require_pyverbs()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyverbs_scripts",
                              "planted_send.py")
        return harness.run_program([harness.PYTHON, script, imm],
                                   env=dict(daemon.env(), UROCE_CASE=case_id), log=daemon.log)

    def test_a_planted_bug_aborts_the_daemon_naming_the_case(self):
        daemon = self.daemon(["--paranoid"], harness.required_path("UROCED_PLANTED"))
        self.assertEqual(self.send(daemon, "0x1234").returncode, 0, daemon.log())
        self.send(daemon, self.TRIGGER)
        daemon.proc.wait(timeout=30)
        self.assertEqual(daemon.proc.returncode, -signal.SIGABRT, daemon.log())
        with open(daemon.log_path, errors="replace") as f:
            log = f.read()
        self.assertRegex(log, r"paranoid: a daemon invariant broke on uroce0 QP 0x[0-9a-f]+ after "
                              r"its requester's turn: requester: the oldest unacknowledged PSN "
                              r"0x[0-9a-f]+ is past what was sent \(up to 0x[0-9a-f]+\)\. This is "
                              r"a bug of uroced, not of the program; aborting \[case planted-1\]")

    def test_a_device_touched_from_another_engine_aborts_the_daemon(self):
        """The second planted bug (SEND with immediate data 0x0badf00d):
        uroce0's requester, on engine 0's thread, counts a packet on uroce1,
        which engine 1 owns (--threads 2). --paranoid's ownership check
        stops the daemon there, naming both engines."""
        daemon = self.daemon(["--paranoid", "--threads", "2"],
                             harness.required_path("UROCED_PLANTED"))
        self.assertEqual(self.send(daemon, "0x1234").returncode, 0, daemon.log())
        self.send(daemon, "0x0badf00d")
        daemon.proc.wait(timeout=30)
        self.assertEqual(daemon.proc.returncode, -signal.SIGABRT, daemon.log())
        with open(daemon.log_path, errors="replace") as f:
            log = f.read()
        self.assertIn("paranoid: a device of engine 1 was touched from engine 0's thread outside "
                      "a control turn. This is a bug of uroced; aborting", log)

    def test_without_paranoid_the_planted_bug_goes_unseen(self):
        """The same broken invariant, without --paranoid: nothing reports it
        (here the send even completes), which is what --paranoid is for."""
        daemon = self.daemon([], harness.required_path("UROCED_PLANTED"))
        self.send(daemon, self.TRIGGER)
        self.assertIsNone(daemon.proc.poll(), daemon.log())
        self.assertNotIn("invariant", daemon.log())

    def test_real_traffic_keeps_every_invariant(self):
        """RC SENDs of several packets, READs, atomics and UD under --paranoid,
        through the built uroced: no report, the daemon stays up."""
        daemon = self.daemon(["--paranoid"])
        self.assertEqual(self.send(daemon, self.TRIGGER).returncode, 0, daemon.log())
        for program, size in (("ibv_rc_pingpong", 8192), ("ibv_ud_pingpong", 512)):
            server, client = harness.run_pingpong(daemon.env(), "uroce0", "uroce1", 50, size,
                                                  program=program, log=daemon.log)
            self.assertEqual((server.returncode, client.returncode), (0, 0), server.output)
        for program in ("ib_read_lat", "ib_atomic_lat", "ib_write_bw"):
            port = harness.free_tcp_port()
            common = [program, "-x", "0", "-n", "200", "-p", str(port)]
            pair = harness.run_server_client(daemon.env(), [*common, "-d", "uroce0"],
                                             [*common, "-d", "uroce1", "127.0.0.1"], port,
                                             log=daemon.log)
            self.assertEqual([side.returncode for side in pair], [0, 0],
                             "%s\n%s" % (pair[1].output, daemon.log()))
        self.assertIsNone(daemon.proc.poll(), daemon.log())
        self.assertNotIn("paranoid: a daemon invariant broke", daemon.log())


class SharedMemory:
    """A System V shared memory segment, as AFL++ makes its map."""

    IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0

    def __init__(self, size):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.shmat.restype = ctypes.c_void_p
        self.size = size
        self.id = self.libc.shmget(self.IPC_PRIVATE, size, self.IPC_CREAT | 0o600)
        if self.id < 0:
            raise OSError(ctypes.get_errno(), "shmget")

    def read(self):
        address = self.libc.shmat(self.id, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "shmat")
        try:
            return ctypes.string_at(address, self.size)
        finally:
            self.libc.shmdt(ctypes.c_void_p(address))

    def remove(self):
        self.libc.shmctl(self.id, self.IPC_RMID, None)


if __name__ == "__main__":
    unittest.main()
