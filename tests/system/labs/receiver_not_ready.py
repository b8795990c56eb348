"""Lab 6: receiver not ready (RNR NAKs).

uroce0 sends a message to uroce1 before uroce1 has posted a receive. uroce1
answers each attempt with an RNR NAK that carries its min_rnr_timer; uroce0
waits that long and sends again, up to rnr_retry times (7: forever). The
program posts the receive only after --delay seconds (or, with --wait, when
you press Enter); then the message goes through.

Second part: a new connection whose requester has rnr_retry 1 and a
receiver that never posts: the SEND fails with IBV_WC_RNR_RETRY_EXC_ERR.

min_rnr_timer is a code (IBA table 45): 0 is 655 ms, the longest; 1 is
0.01 ms, 14 is 1.28 ms, 24 is 40.96 ms, 31 is 491 ms.

    build/bin/uroce exec -- python3 tests/system/labs/receiver_not_ready.py --wait
"""

import time

from labkit import Side, connect, options, pause, poll, rc_qp, say, state, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.wr import SGE, RecvWR, SendWR


def add_options(parser):
    parser.add_argument("--min-rnr-timer", type=int, default=31,
                        help="uroce1's min_rnr_timer code (31: 491 ms)")
    parser.add_argument("--delay", type=float, default=2.0,
                        help="seconds before uroce1 posts its receive (2)")


def main():
    args = options("Lab 6: RNR NAKs from uroce1 while it has no receive posted.", add_options)
    a, b = Side("uroce0"), Side("uroce1")
    qa, qb = rc_qp(a), rc_qp(b)
    # rnr_retry is the requester's (uroce0's) budget; min_rnr_timer is what
    # the responder (uroce1) asks the requester to wait.
    connect(qa, qb, b.gid, rnr_retry=7)
    connect(qb, qa, a.gid, min_rnr_timer=args.min_rnr_timer)
    say("connected: uroce0 QP %d -> uroce1 QP %d; uroce0 rnr_retry 7 (infinite), "
        "uroce1 min_rnr_timer %d" % (qa.qp_num, qb.qp_num, args.min_rnr_timer))
    src = MR(a.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    dst = MR(b.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    src.write(b"hello", 5)

    qa.post_send(SendWR(wr_id=1, num_sge=1, sg=[SGE(src.buf, 5, src.lkey)]))
    say("uroce0 sent a SEND; uroce1 has no receive posted")
    if args.wait:
        pause("uroce qp: uroce0's TIMER says 'RNR wait', LAST NAK is an RNR NAK; "
              "uroce stats: send_rnr_err, rcvd_rnr_err")
    else:
        time.sleep(args.delay)
    n, _ = a.cq.poll()
    say("uroce0 completions so far: %d (the SEND is still waiting)" % n)
    qb.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(dst.buf, 64, dst.lkey)]))
    say("uroce1 posted a receive")
    say("uroce0 completion: " + wc_text(poll(a.cq)))
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    pause("uroce stats: how many RNR NAKs did uroce1 send while it had no receive?")

    # Part 2: one RNR retry only, and no receive ever.
    qc, qd = rc_qp(a), rc_qp(b)
    connect(qc, qd, b.gid, rnr_retry=1)
    connect(qd, qc, a.gid, min_rnr_timer=args.min_rnr_timer)
    say("connected: uroce0 QP %d -> uroce1 QP %d; uroce0 rnr_retry 1" % (qc.qp_num,
                                                                         qd.qp_num))
    qc.post_send(SendWR(wr_id=3, num_sge=1, sg=[SGE(src.buf, 5, src.lkey)]))
    say("uroce0 sent a SEND; uroce1 will never post a receive")
    say("uroce0 completion: " + wc_text(poll(a.cq)))
    say("states: uroce0 QP %d %s, uroce1 QP %d %s" % (qc.qp_num, state(qc),
                                                      qd.qp_num, state(qd)))
    pause("uroce qp: uroce0 QP %d in ERR and why; uroce stats: retry_rnr_exceeded_err"
          % qc.qp_num)
    say("done")


if __name__ == "__main__":
    main()
