"""Lab 9: shared receive queues (SRQ).

uroce1 has one SRQ and three RC QPs that receive through it, each connected
to a QP of uroce0. uroce1 posts its receives once, to the SRQ, and arms
its limit (ibv_modify_srq with IBV_SRQ_LIMIT): when fewer receives than
the limit remain, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once and
disarms the limit, and the program refills the SRQ.

    build/bin/uroce exec -- python3 tests/system/labs/srq.py --wait
"""

import threading

from labkit import Side, connect, options, pause, poll, rc_qp, say, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

QPS = 3
POSTED = 6
LIMIT = 3
SIZE = 256


def main():
    options("Lab 9: three RC QPs of uroce1 receive through one SRQ.")
    a, b = Side("uroce0"), Side("uroce1")
    srq = SRQ(b.pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=1)))
    senders, receivers = [], []
    for _ in range(QPS):
        qa, qb = rc_qp(a), rc_qp(b, srq=srq)
        connect(qa, qb, b.gid)
        connect(qb, qa, a.gid)
        senders.append(qa)
        receivers.append(qb)
    say("connected: uroce0 QPs %s -> uroce1 QPs %s, all on one SRQ" % (
        [q.qp_num for q in senders], [q.qp_num for q in receivers]))

    src = MR(a.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    dst = MR(b.pd, 16 * SIZE, e.IBV_ACCESS_LOCAL_WRITE)

    def post(first, count):
        for i in range(first, first + count):
            srq.post_recv(RecvWR(wr_id=i, num_sge=1,
                                 sg=[SGE(dst.buf + (i % 16) * SIZE, SIZE, dst.lkey)]))
        say("posted receives %d-%d to the SRQ" % (first, first + count - 1))

    post(0, POSTED)
    srq.modify(SrqAttr(srq_limit=LIMIT), e.IBV_SRQ_LIMIT)
    say("SRQ limit armed at %d (ibv_query_srq: srq_limit %d)" % (LIMIT, srq.query().srq_limit))
    pause("uroce qp: uroce1's QPs show 'srq N' as their receive queue")

    for i in range(4):
        qa = senders[i % QPS]
        qa.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(src.buf, SIZE, src.lkey)]))
        poll(a.cq)
        say("message %d from uroce0 QP %d; uroce1 completion: %s" % (
            i, qa.qp_num, wc_text(poll(b.cq))))
        say("  %d receives left, srq_limit now %d" % (POSTED - i - 1, srq.query().srq_limit))
    # The event is queued on uroce1's context. ibv_get_async_event blocks (and
    # in pyverbs holds the interpreter), so read it in a thread with a bound.
    events = []
    waiter = threading.Thread(target=lambda: events.append(b.ctx.get_async_event()),
                              daemon=True)
    waiter.start()
    waiter.join(10)
    if events:
        events[0].ack()
        say("async event: %s (IBV_EVENT_SRQ_LIMIT_REACHED is %d); srq_limit now %d" % (
            events[0].event_type, e.IBV_EVENT_SRQ_LIMIT_REACHED, srq.query().srq_limit))
    else:
        say("no async event in 10 s")
    post(POSTED, 4)
    pause("uroce qp: the receivers' completions; the SRQ has receives again")
    say("done")


if __name__ == "__main__":
    main()
