"""Check mode (docs/check.md): each class of misuse has a program with the
bug and a correct twin (check_programs.c); the bug is reported with its
class and the program's call site, the twin is not, UROCE_CHECK=abort makes
the bug fatal, and the daemon keeps the findings for `uroce check`."""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import harness
import hosts

# (class, case of check_programs.c, the function where the bug is)
CASES = [
    ("post-in-wrong-state", "wrong-state", "send_before_rts"),
    ("send-queue-unsignaled", "unsignaled", "post_unsignaled_only"),
    ("dereg-in-use", "dereg-in-use", "dereg_under_a_receive"),
    ("bad-local-key", "bad-key", "write_beyond_the_mr"),
    ("bad-local-key", "bad-key-srq", "post_to_an_srq_from_another_pd"),  # names the SRQ
    ("unacked-events", "unacked", "close_rig"),  # where it destroys the CQ
    ("unacked-events", "unarmed", "wait_without_rearming"),
    ("unacked-events", "async-unacked", "close_rig"),  # where it destroys the QP
    ("cq-overrun", "cq-small", "post_more_than_the_cq_holds"),
    ("cq-overrun", "cq-overrun", "overrun_a_cq_through_an_srq"),  # at its IBV_EVENT_CQ_ERR
    ("leak", "leak", "exit_without_cleanup"),
    ("overlapping-receives", "overlap", "post_overlapping_receives"),
    # the same range, of two QPs: one queue's scratch buffer is not reported
    ("overlapping-receives", "overlap-qps", "read_from_two_qps_at_once"),
    ("send-buffer-changed", "changed", "rewrite_before_the_completion"),  # found when polled
    ("memory-unmapped", "unmapped", "send_from_unmapped_memory"),
    ("memory-unmapped", "given-back", "send_from_memory_given_back"),
    ("peer-mismatch", "peer", "send_from_another_psn"),
    ("peer-mismatch", "peer-pair", "connect_a_pair_unevenly"),
    ("rnr-settings", "rnr", "send_before_the_receive"),  # found when polled
    ("rnr-settings", "rnr-wait", "receive_late_with_a_long_rnr_timer"),  # found when polled
    ("bad-remote-key", "bad-rkey", "read_without_remote_read"),  # found when polled
    ("peer-mismatch", "qkey", "send_with_another_qkey"),
    ("write-race", "race", "write_from_two_qps_at_once"),
    ("write-race", "race-devices", "write_from_two_devices_at_once"),
    ("dereg-in-use", "mw-in-use", "dealloc_a_window_being_bound"),
    # a child process of the program's, found when it polls its WRITE
    ("write-race", "race-programs", "write_from_two_programs_at_once"),
    ("stranded-completion", "stranded", "arm_and_wait_without_polling"),
    ("beyond-caps", "caps", "post_more_elements_than_the_cap"),
    ("post-loop-in-error", "flush-loop", "repost_each_flushed_receive"),
    ("fork-unsafe", "fork", "write_after_forking"),
    ("null-argument", "null", "send_without_a_list"),
]

# The portability notes: reported as a NOTE, never fatal.
NOTES = [
    ("inline-beyond-asked", "inline", "inline_beyond_what_was_asked"),
    # Open MPI's finalize over libfabric's verbs provider does it
    ("completions-after-destroy", "after-destroy", "poll_after_destroying_a_qp"),
]

# Those that need a link below 4096 bytes: run on a host of a fabric.
FABRIC_CASES = [
    ("mtu-above-active", "mtu", "connect_above_the_active_mtu"),
]

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)


def catalog():
    """{class: severity} of provider/check/catalog.cpp's rows."""
    with open(os.path.join(ROOT, "provider", "check", "catalog.cpp")) as f:
        rows = re.findall(r'\{k\w+, "([a-z-]+)", k(Finding|Note),', f.read())
    if not rows:
        raise RuntimeError("cannot read the catalog's rows")
    return dict(rows)


def programs():
    return harness.required_path("UROCE_CHECK_PROGRAMS")


# Where a frame names `function`: "in f /src/prog.c:12 (" from the debug
# information, "in f+0x4d (" from the exported symbols.
AT = r"(\+0x[0-9a-f]+| \S+:\d+)"
WHERE = AT + r" \("


def frame_of(function):
    """A frame of a report that names `function` (a regular expression)."""
    return r" in %s%s" % (re.escape(function), WHERE)


def read_until(process, stream, end, log, timeout=30):
    """What `process` writes on `stream` (its stdout or stderr, a pipe) up to
    and with `end`; fails the test if it does not come in `timeout` s."""
    text = b""
    deadline = time.monotonic() + timeout
    while not text.endswith(end):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise AssertionError("%r did not come from %s in %d s: %r\n%s" % (
                end, process.args, timeout, text, log()))
        byte = os.read(stream.fileno(), 1)
        if not byte:
            raise AssertionError("%s ended its output: %r\n%s" % (process.args, text, log()))
        text += byte
    return text.decode(errors="replace")


class CheckModeTest(harness.DaemonTestCase):

    def run_case(self, case, mode="report", env=None):
        env = dict(self.daemon.env(), UROCE_CHECK=mode, **(env or {}))
        return harness.run_program([programs(), "uroce0", case], env, log=self.daemon.log)

    def reports(self, stderr, severity="ERROR"):
        """(class, text) of each report (or NOTE) in a program's stderr."""
        found = []
        for block in re.split(r"==(?:ERROR|NOTE): uroce check: ", stderr)[1:]:
            found.append((block.split(" ", 1)[0], block))
        marked = re.findall(r"==(ERROR|NOTE): uroce check: ", stderr)
        return [r for r, mark in zip(found, marked) if mark == severity]

    def test_each_bug_is_reported_with_its_class_and_call_site(self):
        for kind, case, function in CASES:
            with self.subTest(case=case):
                result = self.run_case(case)
                self.assertEqual(result.returncode, 0, result.stderr)
                reports = self.reports(result.stderr)
                self.assertEqual([k for k, _ in reports], [kind], result.stderr)
                text = reports[0][1]
                self.assertRegex(text, frame_of(function), "the call site is named")
                for part in ("  A NIC: ", "  Fix: ", "  See: docs/check.md#" + kind + "\n",
                             "SUMMARY: uroce check: " + kind + "\n"):
                    self.assertIn(part, text)

    def suppressions(self, *lines):
        """UROCE_CHECK_OPTIONS naming a suppressions file of `lines`."""
        folder = tempfile.mkdtemp(prefix="uroce-check-")
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, "suppressions")
        with open(path, "w") as f:
            f.write("# check mode's suppressions\n" + "".join(line + "\n" for line in lines))
        return {"UROCE_CHECK_OPTIONS": "suppressions=" + path}

    def test_a_suppression_silences_one_class_at_one_frame(self):
        # In abort mode: a suppressed report is not made, nor fatal.
        quiet = self.run_case("bad-key", "abort",
                              self.suppressions("bad-local-key:write_beyond_the_mr"))
        self.assertEqual(quiet.returncode, 0, quiet.stderr)
        self.assertNotIn("uroce check", quiet.stderr)
        # The same class at another frame, another class at that frame.
        for case, lines in (("bad-key", ["bad-local-key:^write_after_rts$"]),
                            ("changed", ["bad-local-key:rewrite_before_the_completion"]),
                            ("bad-key", ["send-buffer-changed:write_beyond_the_mr"])):
            with self.subTest(case=case, lines=lines):
                result = self.run_case(case, env=self.suppressions(*lines))
                self.assertEqual(len(self.reports(result.stderr)), 1, result.stderr)
        # Every class, by the program's module; a wildcard within a name.
        for line in ("*:check_programs$", "bad-local-key:write_*_mr"):
            with self.subTest(line=line):
                result = self.run_case("bad-key", env=self.suppressions(line))
                self.assertNotIn("uroce check", result.stderr)

    def test_a_program_without_exported_names_is_named_from_its_debug_information(self):
        # Built with -g and without -rdynamic: the report names the function,
        # the file and the line of its call of the verb, as a sanitizer does.
        with open(os.path.join(ROOT, "tests", "system", "check_programs.c")) as f:
            lines = f.read().splitlines()
        start = next(i for i, line in enumerate(lines) if "void write_beyond_the_mr(" in line)
        call = next(i for i in range(start, len(lines)) if "ibv_post_send(" in lines[i]) + 1
        env = dict(self.daemon.env(), UROCE_CHECK="report")
        plain = harness.required_path("UROCE_CHECK_PROGRAMS_PLAIN")
        result = harness.run_program([plain, "uroce0", "bad-key"], env, log=self.daemon.log)
        self.assertEqual(result.returncode, 0, result.stderr)
        report = self.reports(result.stderr)[0][1]
        self.assertRegex(report, r"    #0 0x[0-9a-f]+ in write_beyond_the_mr "
                                 r"\S*tests/system/check_programs\.c:%d \(\S*check_programs_plain"
                                 r"\+0x[0-9a-f]+\)\n" % call)
        # A suppression by source file.
        env.update(self.suppressions("bad-local-key:check_programs.c$"))
        result = harness.run_program([plain, "uroce0", "bad-key"], env, log=self.daemon.log)
        self.assertNotIn("uroce check", result.stderr)

    def test_exitcode_and_log_path(self):
        folder = tempfile.mkdtemp(prefix="uroce-check-")
        self.addCleanup(shutil.rmtree, folder, True)
        log = os.path.join(folder, "report")
        options = {"UROCE_CHECK_OPTIONS": "exitcode=23:log_path=" + log}
        found = self.run_case("bad-key", env=options)
        self.assertEqual(found.returncode, 23, found.stderr)
        self.assertNotIn("uroce check", found.stderr, "the report goes to log_path")
        written = [name for name in os.listdir(folder) if name.startswith("report.")]
        self.assertEqual(len(written), 1, written)
        with open(os.path.join(folder, written[0])) as f:
            self.assertEqual([k for k, _ in self.reports(f.read())], ["bad-local-key"])
        self.assertEqual(self.run_case("bad-key-twin", env=options).returncode, 0)
        # A note is not a finding.
        self.assertEqual(self.run_case("inline", env=options).returncode, 0)

    def test_options_that_cannot_be_read_are_said(self):
        result = self.run_case("bad-key-twin", env={"UROCE_CHECK_OPTIONS": "exitcode=300:color=1"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("UROCE_CHECK_OPTIONS: 'exitcode=300' is not", result.stderr)
        self.assertIn("UROCE_CHECK_OPTIONS: 'color=1' is not", result.stderr)

    def test_aborted_batches_post_nothing(self):
        # ibv_wr_abort forgets its work requests: none counts towards a full queue.
        result = self.run_case("aborted-batches")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("uroce check", result.stderr)

    def test_each_note_is_reported_with_its_class_and_call_site_and_never_aborts(self):
        for kind, case, function in NOTES:
            for mode in ("report", "abort"):
                with self.subTest(case=case, mode=mode):
                    result = self.run_case(case, mode)
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertEqual(self.reports(result.stderr), [], result.stderr)
                    notes = self.reports(result.stderr, "NOTE")
                    self.assertEqual([k for k, _ in notes], [kind], result.stderr)
                    self.assertRegex(notes[0][1], frame_of(function))
                    self.assertIn("SUMMARY: uroce check: %s (a note)" % kind, notes[0][1])

    def test_the_catalog_is_documented_and_each_class_has_a_case(self):
        with open(os.path.join(ROOT, "docs", "check.md")) as f:
            documented = re.findall(r"^### `([a-z-]+)`", f.read(), re.M)
        classes = catalog()
        self.assertEqual(sorted(documented), sorted(classes))
        tested = {kind for kind, _, _ in CASES + NOTES + FABRIC_CASES}
        self.assertEqual(tested, set(classes))
        self.assertEqual({kind for kind, _, _ in NOTES},
                         {c for c, severity in classes.items() if severity == "Note"})

    def test_the_correct_twins_are_not_reported(self):
        for _, case, _ in CASES + NOTES:
            with self.subTest(case=case):
                result = self.run_case(case + "-twin")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn("uroce check", result.stderr)

    def test_what_each_report_says(self):
        unsignaled = self.reports(self.run_case("unsignaled").stderr)[0][1]
        # The queue's depth is what ibv_create_qp gave (16 asked for, rounded up).
        self.assertRegex(unsignaled, r"ibv_post_send: (\d+) work requests are on a send "
                                 r"queue of (\d+), \1 of them posted since the last signaled "
                                 r"one \(none was signaled\)")
        on_queue, depth = re.search(r"(\d+) work requests are on a send queue of (\d+)",
                                    unsignaled).groups()
        # At the post that fills the queue: no completion can free it.
        self.assertEqual(int(on_queue), int(depth))
        self.assertIn("(none was signaled): the queue is full, and no completion can free it.",
                      unsignaled)
        self.assertGreaterEqual(int(depth), 16)
        self.assertIn("ENOMEM", unsignaled)
        wrong = self.reports(self.run_case("wrong-state").stderr)[0][1]
        self.assertIn("ibv_post_send on a QP in INIT: ibv_modify_qp moved it RESET -> INIT.",
                      wrong)
        dereg = self.reports(self.run_case("dereg-in-use").stderr)[0][1]
        self.assertRegex(dereg, r"ibv_dereg_mr of the MR with lkey 0x[0-9a-f]+ \(4096 bytes at "
                                r"0x[0-9a-f]+\) while a receive work request \(wr_id 0x7\)")
        bad_key = self.reports(self.run_case("bad-key").stderr)[0][1]
        self.assertRegex(bad_key, r"ibv_post_send: element 0 of wr_id 0x5 \(4160 bytes at "
                                  r"0x[0-9a-f]+, lkey 0x[0-9a-f]+\): the lkey covers 4096 bytes "
                                  r"from 0x[0-9a-f]+, and the element reaches beyond them\.")
        srq_key = self.reports(self.run_case("bad-key-srq").stderr)[0][1]
        self.assertRegex(srq_key, r"ibv_post_srq_recv: element 0 of wr_id 0x6 \(64 bytes at "
                                  r"0x[0-9a-f]+, lkey 0x[0-9a-f]+\): the lkey is an MR of another "
                                  r"protection domain than the SRQ's\.")
        self.assertIn("Fix: name each element by the lkey of an MR of the SRQ's PD", srq_key)
        unacked = self.reports(self.run_case("unacked").stderr)[0][1]
        self.assertIn("whose 1 of 1 completion event(s) from ibv_get_cq_event were never "
                      "acknowledged", unacked)
        overlap = self.reports(self.run_case("overlap").stderr)[0][1]
        self.assertRegex(overlap, r"ibv_post_recv: element 0 of wr_id 0x2 \(1024 bytes at "
                                  r"0x[0-9a-f]+, lkey 0x[0-9a-f]+\) overlaps 512 bytes of a "
                                  r"receive \(wr_id 0x1, QP 0x[0-9a-f]+\) that has not completed")
        changed = self.reports(self.run_case("changed").stderr)[0][1]
        self.assertIn("the bytes of element 0 of wr_id 0x3 (64 bytes at ", changed)
        # The program's call of the verb: post_write's, or under a sanitizer
        # (no inlining) that of the static ibv_post_send of verbs.h in it.
        self.assertRegex(changed, r"  posted at:\n    #0 0x[0-9a-f]+ "
                                  r"(in (post_write|ibv_post_send)" + AT + r" )?"
                                  r"\(\S*check_programs\+0x[0-9a-f]+\)\n",
                         "the report names the posting call")
        unmapped = self.reports(self.run_case("unmapped").stderr)[0][1]
        self.assertRegex(unmapped, r"ibv_post_send: element 0 of wr_id 0x4 \(64 bytes at "
                                   r"0x[0-9a-f]+, lkey 0x[0-9a-f]+\): the element is in the MR "
                                   r"with lkey 0x[0-9a-f]+ \(16777216 bytes at 0x[0-9a-f]+\), and "
                                   r"part of it is no longer mapped")
        given_back = self.reports(self.run_case("given-back").stderr)[0][1]
        self.assertRegex(given_back, r"ibv_post_send: element 0 of wr_id 0x13 \(64 bytes at "
                                     r"0x[0-9a-f]+, lkey 0x[0-9a-f]+\): the element is in the MR "
                                     r"with lkey 0x[0-9a-f]+ \(65536 bytes at 0x[0-9a-f]+\), and "
                                     r"the program gave 4096 bytes of it at 0x[0-9a-f]+ back with "
                                     r"madvise\(MADV_DONTNEED\) while the MR is registered\.")
        self.assertRegex(given_back, r"  given back at:\n    #0 0x[0-9a-f]+ (in send_after_madvise"
                                     + AT + r" )?\(\S*check_programs\+0x[0-9a-f]+\)\n",
                         "the report names the madvise call")
        unarmed = self.reports(self.run_case("unarmed").stderr)[0][1]
        self.assertIn("ibv_get_cq_event has waited a second on a completion channel none of "
                      "whose 1 CQ(s) is armed; they hold 1 completion(s) not polled.", unarmed)
        async_unacked = self.reports(self.run_case("async-unacked").stderr)[0][1]
        self.assertIn("ibv_destroy_qp while 1 of the 1 async event(s) ibv_get_async_event "
                      "returned for it (the last IBV_EVENT_QP_ACCESS_ERR) are not acknowledged",
                      async_unacked)
        peer = self.reports(self.run_case("peer").stderr)[0][1]
        self.assertRegex(peer, r"ibv_modify_qp: QP 0x([0-9a-f]+) is connected to QP 0x\1 of uroce0, "
                               r"which names it back: this QP sends from PSN 0x5 \(sq_psn\) and "
                               r"the peer expects PSN 0x0 \(rq_psn\)")
        pair = self.reports(self.run_case("peer-pair").stderr)[0][1]
        self.assertIn("this QP's path MTU is 1024 bytes and its peer's 4096", pair)
        self.assertIn("the peer keeps up to 4 RDMA READs and atomics outstanding (max_rd_atomic) "
                      "and this QP takes 1 (max_dest_rd_atomic)", pair)
        rnr = self.reports(self.run_case("rnr").stderr)[0][1]
        self.assertIn("a send (wr_id 0x2) completed with IBV_WC_RNR_RETRY_EXC_ERR", rnr)
        self.assertIn("this QP's rnr_retry is 0, so RNR NAK 1 in a row ended it.", rnr)
        self.assertIn("(0 is the longest, 655.36 ms; 12 is 0.64 ms)", rnr)
        wait = self.reports(self.run_case("rnr-wait").stderr)[0][1]
        self.assertIn("an RNR NAK (the peer had no receive posted) made this QP wait 655.36 ms "
                      "before sending wr_id 0x2 again: the responder's min_rnr_timer is 0.", wait)
        self.assertRegex(wait, r"  posted at:\n    #0 0x[0-9a-f]+ ")
        rkey = self.reports(self.run_case("bad-rkey").stderr)[0][1]
        self.assertRegex(rkey, r"wr_id 0xa completed with IBV_WC_REM_ACCESS_ERR: QP 0x([0-9a-f]+) "
                               r"of uroce0, its peer, refused an RDMA READ of 64 bytes at "
                               r"0x[0-9a-f]+ with rkey 0x[0-9a-f]+: the memory region does not "
                               r"allow this access, without IBV_ACCESS_REMOTE_READ\.")
        qkey = self.reports(self.run_case("qkey").stderr)[0][1]
        self.assertRegex(qkey, r"ibv_post_send on this UD QP to QP 0x[0-9a-f]+ with remote_qkey "
                               r"0x3333: QP 0x[0-9a-f]+ of uroce0, where these datagrams go, has "
                               r"Q_Key 0x2222 and they carry 0x3333: it drops every one "
                               r"\(rcvd_qkey_err\), and the sender's completions say success\.\n")
        race = self.reports(self.run_case("race").stderr)[0][1]
        self.assertRegex(race, r"ibv_post_send: an RDMA WRITE \(wr_id 0xd\) of 64 bytes to "
                               r"0x[0-9a-f]+ \(rkey 0x[0-9a-f]+\) overlaps 32 bytes of an RDMA "
                               r"WRITE \(wr_id 0xc\) from QP 0x[0-9a-f]+ of uroce0 to the same "
                               r"memory that its program has not seen complete")
        self.assertRegex(race, r"  posted at:\n    #0 0x[0-9a-f]+ "
                               r"(in (write_into|ibv_post_send)" + AT + r" )?"
                               r"\(\S*check_programs\+0x[0-9a-f]+\)\n",
                         "the report names the posting call")
        devices = self.reports(self.run_case("race-devices").stderr)[0][1]
        self.assertRegex(devices, r"write-race on uroce1, QP 0x[0-9a-f]+\n  ibv_post_send: an RDMA "
                                  r"WRITE \(wr_id 0x10\) .* overlaps 32 bytes of an RDMA WRITE "
                                  r"\(wr_id 0xf\) from QP 0x[0-9a-f]+ of uroce0")
        programs = self.reports(self.run_case("race-programs").stderr)[0][1]
        self.assertRegex(programs, r"ibv_post_send: an RDMA WRITE \(wr_id 0x12\) .* overlaps 32 "
                                   r"bytes of an RDMA WRITE \(wr_id 0x11\) from QP 0x[0-9a-f]+ of "
                                   r"uroce0 to the same memory that its program has not seen "
                                   r"complete")
        stranded = self.reports(self.run_case("stranded").stderr)[0][1]
        self.assertIn("ibv_get_cq_event has waited a second on a completion channel whose 1 "
                      "armed CQ(s) hold 1 completion(s) not polled", stranded)
        caps = self.reports(self.run_case("caps").stderr)[0][1]
        self.assertRegex(caps, r"ibv_post_send failed with EINVAL at wr_id 0x4: num_sge (\d+) "
                               r"is above the QP's max_send_sge (\d+) \(as ibv_create_qp gave "
                               r"them\)\.")
        asked, cap = re.search(r"num_sge (\d+) is above the QP's max_send_sge (\d+)", caps).groups()
        self.assertEqual(int(asked), int(cap) + 1)
        loop = self.reports(self.run_case("flush-loop").stderr)[0][1]
        self.assertRegex(loop, r"ibv_post_recv on a QP in ERR: (\d+) posts since it went to "
                               r"ERR, each flushed at once\.")
        after = self.reports(self.run_case("after-destroy").stderr, "NOTE")[0][1]
        self.assertRegex(after, r"ibv_poll_cq on a CQ that held 1 completion\(s\) of QP "
                                r"0x[0-9a-f]+ not polled when ibv_destroy_qp destroyed it\.")
        self.assertIn("  NICs differ (completions-after-destroy): uroce takes a destroyed QP's "
                      "completions out of its CQs; mlx5 and bnxt_re remove them too; rxe and EFA "
                      "leave them", after)
        fork = self.reports(self.run_case("fork").stderr)[0][1]
        self.assertRegex(fork, r"ibv_post_send: element 0 of wr_id 0x5 \(64 bytes at 0x[0-9a-f]+, "
                               r"lkey 0x[0-9a-f]+\) is in the MR with lkey 0x[0-9a-f]+ \(4096 "
                               r"bytes at 0x[0-9a-f]+\), registered before this process called "
                               r"fork\(\), and neither ibv_fork_init nor RDMAV_FORK_SAFE asked "
                               r"for fork safety\.")
        safe = self.run_case("fork", env={"RDMAV_FORK_SAFE": "1"})
        self.assertEqual(safe.returncode, 0, safe.stderr)
        self.assertNotIn("uroce check", safe.stderr)
        inline = self.reports(self.run_case("inline").stderr, "NOTE")[0][1]
        self.assertRegex(inline, r"ibv_post_send: wr_id 0x3 carries 16 bytes inline, and "
                                 r"ibv_create_qp was asked for max_inline_data 0 \(this device "
                                 r"granted (\d+)\)\.")
        self.assertIn("  NICs differ (inline-granted): uroce grants ", inline)
        leak = self.reports(self.run_case("leak").stderr)[0][1]
        self.assertIn("the program exits with the device open and 4 object(s) still alive:", leak)
        for line in ("    PD\n", "    CQ of ", "    QP 0x", "    MR lkey 0x"):
            self.assertIn(line, leak)

    def test_a_block_free_unmapped_after_a_send_read_it_is_reported(self):
        """A send reads its MR's bytes in place (no system call while the
        program released nothing); glibc's free() then unmaps the block by
        no call the bridge stands in front of, and the next send from it is
        reported, where reading it would fault. A sanitizer's allocator keeps
        a freed block mapped (the program says which): nothing to report."""
        result = self.run_case("freed")
        self.assertEqual(result.returncode, 0, result.stderr)
        reports = self.reports(result.stderr)
        if "free() kept the block" in result.stdout:
            self.assertTrue(os.environ.get("UROCE_SANITIZER_PRELOAD"), result.stdout)
            self.assertEqual(reports, [], result.stderr)
        else:
            self.assertIn("free() unmapped the block", result.stdout)
            self.assertEqual([k for k, _ in reports], ["memory-unmapped"], result.stderr)
            self.assertRegex(reports[0][1], frame_of("send_from_freed_memory"))
            self.assertRegex(reports[0][1], r"ibv_post_send: element 0 of wr_id 0x6 \(4096 bytes")
        twin = self.run_case("freed-twin")
        self.assertEqual(twin.returncode, 0, twin.stderr)
        self.assertEqual(self.reports(twin.stderr), [], twin.stderr)

    def test_each_null_argument_is_reported_where_the_verb_refuses_it(self):
        """The verbs that read an object refuse NULL with EINVAL (the refused-
        null case, test_refusals.py); in check mode each is a null-argument
        finding naming the verb and the argument."""
        result = self.run_case("refused-null")
        self.assertEqual(result.returncode, 0, result.stderr)
        texts = [text for kind, text in self.reports(result.stderr) if kind == "null-argument"]
        said = [re.search(r"^null-argument on uroce0\n  (.*)\n", text, re.M).group(1)
                for text in texts]
        self.assertEqual(said, ["ibv_modify_qp was given attr NULL, which it reads.",
                                "ibv_query_qp was given attr NULL, which it reads.",
                                "ibv_create_qp was given attr NULL, which it reads.",
                                "ibv_create_srq was given attr NULL, which it reads.",
                                "ibv_create_ah was given attr NULL, which it reads.",
                                "ibv_post_send was given wr NULL, which it reads.",
                                "ibv_post_recv was given bad_wr NULL, which it reads.",
                                "ibv_post_recv was given wr NULL, which it reads."], result.stderr)
        null = self.reports(self.run_case("null").stderr)[0][1]
        self.assertIn("ibv_post_send: wr_id 0x7 has sg_list NULL, which the post reads.", null)

    def test_an_event_acknowledged_on_another_cq(self):
        # Each CQ is reported for what it is: over- and never acknowledged.
        result = self.run_case("unacked-other-cq")
        self.assertEqual(result.returncode, 0, result.stderr)
        reports = self.reports(result.stderr)
        self.assertEqual([k for k, _ in reports], ["unacked-events"] * 2, result.stderr)
        over, never = reports[0][1], reports[1][1]
        self.assertIn("on which ibv_ack_cq_events acknowledged 1 completion event(s), 1 more "
                      "than the 0 ibv_get_cq_event returned for it: they were meant for another "
                      "CQ.", over)
        self.assertRegex(over, frame_of("ack_on_another_cq"))
        self.assertIn("  Fix: acknowledge each event on the CQ that ibv_get_cq_event returned",
                      over)
        self.assertIn("whose 1 of 1 completion event(s) from ibv_get_cq_event were never "
                      "acknowledged", never)
        self.assertRegex(never, frame_of("close_rig"))
        # Where NICs differ is said in full once per program.
        self.assertIn("  NICs differ (destroy-with-unacked-events): uroce destroys an object "
                      "whose events were not all acknowledged at once; every kernel provider",
                      over)
        self.assertIn("  NICs differ (destroy-with-unacked-events): as said above\n", never)

    def test_unsignaled_is_decided_by_the_nics_rule_while_the_daemon_lags(self):
        # The daemon stopped: nothing leaves the send queue's ring, which
        # refuses the post after it is full. The report comes at the post
        # that fills the queue, before the ring refuses any, and the program
        # writes it while the daemon is still stopped (its copy to the
        # daemon waits for it).
        env = dict(self.daemon.env(), UROCE_CHECK="report")
        program = subprocess.Popen([programs(), "uroce0", "unsignaled-lagging"], env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        try:
            read_until(program, program.stdout, b"connected\n", self.daemon.log)
            os.kill(self.daemon.proc.pid, signal.SIGSTOP)
            try:
                program.stdin.write(b"post\n")
                program.stdin.flush()
                report = read_until(program, program.stderr,
                                    b"SUMMARY: uroce check: send-queue-unsignaled\n",
                                    self.daemon.log)
            finally:
                os.kill(self.daemon.proc.pid, signal.SIGCONT)
            posted = read_until(program, program.stdout, b"\n", self.daemon.log)
            program.stdin.write(b"end\n")
            program.stdin.flush()
            _, rest = program.communicate(timeout=harness.RUN_TIMEOUT)
        finally:
            if program.poll() is None:
                program.kill()
                program.wait()
        stderr = report + rest.decode(errors="replace")
        self.assertEqual(program.returncode, 0, stderr)
        self.assertEqual([k for k, _ in self.reports(stderr)], ["send-queue-unsignaled"], stderr)
        on_queue, depth = map(int, re.search(r"(\d+) work requests are on a send queue of "
                                             r"(\d+)", report).groups())
        self.assertEqual(on_queue, depth, "reported at the post that filled the queue")
        self.assertGreaterEqual(int(re.fullmatch(r"posted (\d+)\n", posted).group(1)), depth)
        self.assertRegex(report, frame_of("post_unsignaled_while_it_lags"))

    def test_abort_makes_the_first_finding_fatal(self):
        for _, case, _ in CASES:
            with self.subTest(case=case):
                result = self.run_case(case, mode="abort")
                self.assertNotEqual(result.returncode, 0, result.stderr)
                self.assertIn("UROCE_CHECK=abort: aborting", result.stderr)
                self.assertEqual(len(self.reports(result.stderr)), 1, result.stderr)

    def test_log_mode_leaves_stderr_alone_and_the_daemon_keeps_the_finding(self):
        result = self.run_case("wrong-state", mode="log")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("uroce check", result.stderr)
        kept = self.findings()["kept"]
        self.assertTrue(any(f["kind"] == "post-in-wrong-state" and
                            re.search(frame_of("send_before_rts"), f["text"]) for f in kept), kept)
        self.assertIn("check: client pid", self.daemon.log())

    def test_off_reports_nothing(self):
        for mode in ("off", "0"):
            result = self.run_case("unsignaled", mode=mode)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertNotIn("uroce check", result.stderr)

    def findings(self):
        tool = harness.tool_path()
        if not tool:
            self.fail("the uroce command is not built (UROCE_TOOL is not set)")
        result = harness.run_program([tool, "check", "--json"],
                                     harness.tool_environment(self.daemon.runtime_dir))
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)


class FabricCheckModeTest(unittest.TestCase):
    """The cases of FABRIC_CASES on a host whose link is 1500 bytes (its
    device's active_mtu 1024)."""

    @classmethod
    def setUpClass(cls):
        cls.fabric = hosts.Fabric().start()
        cls.host = cls.fabric.hosts[0]

    @classmethod
    def tearDownClass(cls):
        cls.fabric.close()

    def run_case(self, case, mode="report"):
        return self.host.run(["env", "UROCE_CHECK=" + mode, programs(), self.host.device, case])

    def test_each_bug_is_reported_and_its_twin_is_not(self):
        for kind, case, function in FABRIC_CASES:
            with self.subTest(case=case):
                result = self.run_case(case)
                self.assertEqual(result.returncode, 0, result.stdout + self.fabric.log())
                self.assertEqual(re.findall(r"==ERROR: uroce check: (\S+)", result.stdout),
                                 [kind], result.stdout)
                self.assertRegex(result.stdout, frame_of(function))
                self.assertIn("  See: docs/check.md#%s\n" % kind, result.stdout)
                twin = self.run_case(case + "-twin")
                self.assertEqual(twin.returncode, 0, twin.stdout)
                self.assertNotIn("uroce check", twin.stdout)
                aborted = self.run_case(case, "abort")
                self.assertNotEqual(aborted.returncode, 0, aborted.stdout)
                self.assertIn("UROCE_CHECK=abort: aborting", aborted.stdout)

    def test_what_the_report_says(self):
        result = self.run_case("mtu")
        self.assertIn("ibv_modify_qp: path_mtu 4096 is above the port's active_mtu 1024 "
                      "(ibv_query_port), which the link carries.", result.stdout)
        self.assertIn("  NICs differ (mtu-above-active): uroce lowers a path MTU above the "
                      "port's active MTU to it;", result.stdout)


class OthersProgramsTest(harness.DaemonTestCase):
    """Correct programs nobody here wrote run under UROCE_CHECK=abort with
    every check on: a false report would kill them. (perftest's send tests
    are left out: they leak a CQ, a real bug docs/check.md writes up.)"""

    daemon_args = ("--check",)

    def run_both(self, server, client):
        port = harness.free_tcp_port()
        env = dict(self.daemon.env(), UROCE_CHECK="abort")
        sides = harness.run_server_client(
            env, [harness.require_program(server[0]), *server[1:], "-p", str(port)],
            [harness.require_program(client[0]), *client[1:], "-p", str(port), "127.0.0.1"],
            port, log=self.daemon.log)
        for side in sides:
            self.assertEqual(side.returncode, 0, "%s\n%s" % (" ".join(side.args), side.output))
            self.assertNotIn("uroce check", side.output)

    def test_rdma_core_examples(self):
        for program, extra in (("ibv_rc_pingpong", ["-e"]), ("ibv_rc_pingpong", []),
                               ("ibv_srq_pingpong", []), ("ibv_ud_pingpong", []),
                               ("ibv_uc_pingpong", [])):
            with self.subTest(program=program, extra=extra):
                common = [program, "-g", "0", "-n", "50", "-c", *extra]
                self.run_both(common + ["-d", "uroce0"], common + ["-d", "uroce1"])

    def test_perftest(self):
        for program, extra in (("ib_write_bw", []), ("ib_read_bw", []), ("ib_atomic_bw", []),
                               ("ib_write_lat", []), ("ib_read_lat", []), ("ib_send_lat", []),
                               ("ib_write_bw", ["-q", "4"])):
            with self.subTest(program=program, extra=extra):
                common = [program, "-x", "0", "-n", "100", *extra]
                self.run_both(common + ["-d", "uroce0"], common + ["-d", "uroce1"])


class DaemonCheckFlagTest(harness.DaemonTestCase):
    """uroced --check: every client checks, with nothing in its environment."""

    daemon_args = ("--check",)

    def test_every_client_checks(self):
        env = self.daemon.env()
        env.pop("UROCE_CHECK", None)
        result = harness.run_program([programs(), "uroce0", "leak"], env, log=self.daemon.log)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("==ERROR: uroce check: leak", result.stderr)
        env["UROCE_CHECK"] = "off"
        result = harness.run_program([programs(), "uroce0", "leak"], env, log=self.daemon.log)
        self.assertNotIn("uroce check", result.stderr, "UROCE_CHECK=off has the last word")


if __name__ == "__main__":
    unittest.main()
