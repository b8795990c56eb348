"""SRQ limit events with pyverbs between uroce0 and uroce1 over RC. Side b
receives through an SRQ holding six receive WQEs, armed with srq_limit 3
(ibv_modify_srq). Side a sends four messages, each landing in the next
WQE with its data checked. After the third, three WQEs remain, which is
not below the limit: the SRQ is still armed (ibv_query_srq). The fourth
leaves two: IBV_EVENT_SRQ_LIMIT_REACHED arrives for the SRQ, and the
limit is disarmed (0). Exits 0 and prints "srq limit ok" when every check
holds."""

import threading

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 1500  # two packets at the 1024-byte path MTU
POSTED = 6
LIMIT = 3
EVENT_WAIT = 10  # seconds: only reached when the event never comes


def pattern(seed):
    return bytes((i * seed + 9) & 0xff for i in range(SIZE))


def next_async_event(ctx):
    """The context's next async event (acked); the script fails when none comes."""
    events = []
    waiter = threading.Thread(target=lambda: events.append(ctx.get_async_event()), daemon=True)
    waiter.start()
    waiter.join(EVENT_WAIT)
    check(events, "no async event in %d s" % EVENT_WAIT)
    events[0].ack()
    return events[0].event_type


def main():
    a_ctx, b_ctx = Context(name="uroce0"), Context(name="uroce1")
    a_pd, b_pd = PD(a_ctx), PD(b_ctx)
    a_cq, b_cq = CQ(a_ctx, 8), CQ(b_ctx, 8)
    srq = SRQ(b_pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=1)))
    a_qp, b_qp = rc_qp(a_pd, a_cq), rc_qp(b_pd, b_cq, srq=srq)
    a_qp.to_rts(rts_attr(b_qp.qp_num, b_ctx.query_gid(1, 0)))
    b_qp.to_rts(rts_attr(a_qp.qp_num, a_ctx.query_gid(1, 0)))
    source = MR(a_pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    target = MR(b_pd, POSTED * SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    for i in range(POSTED):
        srq.post_recv(RecvWR(100 + i, 1, [SGE(target.buf + i * SIZE, SIZE, target.lkey)]))
    srq.modify(SrqAttr(srq_limit=LIMIT), e.IBV_SRQ_LIMIT)
    check(srq.query().srq_limit == LIMIT, "armed limit %d" % srq.query().srq_limit)

    for i in range(4):
        if i == 3:
            check(srq.query().srq_limit == LIMIT,
                  "%d WQEs left, not below %d, yet the SRQ was disarmed" % (POSTED - i, LIMIT))
        source.write(pattern(i + 1), SIZE)
        a_qp.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(source.buf, SIZE, source.lkey)]))
        wc = poll(a_cq)
        check(wc.status == e.IBV_WC_SUCCESS, "send %d: status %d" % (i, wc.status))
        wc = poll(b_cq)
        check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 100 + i and wc.byte_len == SIZE,
              "receive %d: status %d, wr_id %d, %d bytes" % (i, wc.status, wc.wr_id, wc.byte_len))
        check(wc.qp_num == b_qp.qp_num, "receive %d: qp_num %d" % (i, wc.qp_num))
        check(target.read(SIZE, i * SIZE) == pattern(i + 1), "bytes of message %d" % i)

    event = next_async_event(b_ctx)
    check(event == e.IBV_EVENT_SRQ_LIMIT_REACHED, "event %d" % event)
    check(srq.query().srq_limit == 0, "limit after the event %d" % srq.query().srq_limit)
    print("srq limit ok")


if __name__ == "__main__":
    main()
