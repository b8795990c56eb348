"""The provider's own refusals of a post say why: with VERBS_LOG_LEVEL=1
each refused post logs, through libibverbs' log, its verb, its errno and a
sentence naming the argument and the limit it broke, for the posts that
never reach the daemon (whose refusals uroced.log has). Check mode reports
the refusals of the caps as beyond-caps (test_check)."""

import re
import unittest

import harness

# What each refusal of check_programs' "refused" case logs, in its order:
# the verb, strerror of its errno, and the sentence (a regular expression).
REFUSALS = [
    ("ibv_post_send", "Invalid argument", r"the QP is in RESET: it takes sends from RTS on"),
    ("ibv_post_recv", "Invalid argument", r"the QP is in RESET: it takes receives from INIT on"),
    ("ibv_post_send", "Invalid argument", r"num_sge 2 is beyond the queue's max_send_sge of 1"),
    ("ibv_post_send", "Invalid argument", r"sg_list is NULL with num_sge 1"),
    ("ibv_post_recv", "Invalid argument", r"num_sge 2 is beyond the queue's max_recv_sge of 1"),
    ("ibv_post_send", "Invalid argument",
     r"opcode 99 \(unknown\) is not one that RC QPs post"),
    ("ibv_post_send", "Invalid argument",
     r"1024 bytes inline are beyond the QP's max_inline_data of \d+"),
    ("ibv_post_send", "Invalid argument",
     r"IBV_SEND_INLINE on RDMA_READ, which sends no data of its own"),
    ("ibv_post_send", "Invalid argument",
     r"an atomic needs 8 bytes to an 8-byte aligned remote_addr: 8 to 0x[0-9a-f]*[13579bdf]"),
    ("ibv_post_recv", "Cannot allocate memory",
     r"the receive queue is full: its (1[6-9]|[2-9]\d|\d{3,}) receives are posted and not taken"),
    ("ibv_post_send", "Cannot allocate memory",
     r"the send queue is full: its (1[6-9]|[2-9]\d|\d{3,}) sends are posted and not retired "
     r"\(a send's slot frees when its completion, or a later signaled one, is polled\)"),
    ("ibv_post_send", "Invalid argument", r"a UD send needs an address handle: wr.ud.ah is NULL"),
    ("ibv_post_srq_recv", "Invalid argument", r"num_sge 2 is beyond the queue's max_sge of 1"),
    ("ibv_post_recv", "Invalid argument", r"the QP receives through its SRQ: post to the SRQ"),
]

# The same for check_programs' "refused-null" case: NULL where a verb
# reads an argument.
NULL_REFUSALS = [
    ("ibv_modify_qp", "Invalid argument", r"attr is NULL"),
    ("ibv_query_qp", "Invalid argument", r"attr is NULL"),
    ("ibv_create_qp", "Invalid argument", r"attr is NULL"),
    ("ibv_create_srq", "Invalid argument", r"attr is NULL"),
    ("ibv_create_ah", "Invalid argument", r"attr is NULL"),
    ("ibv_post_send", "Invalid argument", r"wr is NULL: no work request to post"),
    ("ibv_post_recv", "Invalid argument", r"bad_wr is NULL"),
    ("ibv_post_recv", "Invalid argument", r"wr is NULL: no work request to post"),
]


class RefusalsTest(harness.DaemonTestCase):

    def run_case(self, case, **env):
        return harness.run_program(
            [harness.required_path("UROCE_CHECK_PROGRAMS"), "uroce0", case],
            dict(self.daemon.env(), **env), log=self.daemon.log)

    def assert_logged(self, case, refusals):
        result = self.run_case(case, VERBS_LOG_LEVEL="1", VERBS_LOG_FILE="/dev/stderr")
        self.assertEqual(result.returncode, 0, result.stderr)
        logged = [line for line in result.stderr.splitlines() if line.startswith("uroce: ")]
        self.assertEqual(len(logged), len(refusals), result.stderr)
        for line, (verb, error, sentence) in zip(logged, refusals):
            self.assertRegex(line, "^uroce: %s: %s: %s$" % (verb, error, sentence))

    def test_each_refused_post_logs_its_reason(self):
        self.assert_logged("refused", REFUSALS)

    def test_null_arguments_are_refused_not_followed(self):
        self.assert_logged("refused-null", NULL_REFUSALS)

    def test_a_loop_of_refusals_logs_a_burst(self):
        # 1000 sends in RESET: the first 32 are logged, the rest are counted
        # for the next line that passes, a second later.
        result = self.run_case("refused-loop", VERBS_LOG_LEVEL="1", VERBS_LOG_FILE="/dev/stderr")
        self.assertEqual(result.returncode, 0, result.stderr)
        logged = [line for line in result.stderr.splitlines() if line.startswith("uroce: ")]
        self.assertGreaterEqual(len(logged), 32, result.stderr)
        self.assertLess(len(logged), 40, result.stderr)
        self.assertRegex(logged[-2], r"^uroce: \d+ refusals not logged \(at most 1 a second\)$")
        self.assertRegex(logged[-1], "^uroce: ibv_post_send: Invalid argument: the QP is in RESET")

    def test_nothing_is_logged_unless_asked(self):
        # libibverbs' log is off by default: a program's stderr stays its own.
        result = self.run_case("refused")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("uroce:", result.stderr)


if __name__ == "__main__":
    unittest.main()
