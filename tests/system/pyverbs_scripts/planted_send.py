"""One SEND with immediate data (argv[1], hex) over RC from uroce0 to
uroce1, its completions checked on both sides. With 0x0badc0de it meets
the bug planted in uroced_planted (test_fuzzing). Prints "send ok" and
exits 0 when both completions are successes."""

import sys

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 64


def main():
    imm = int(sys.argv[1], 16)
    a_ctx, b_ctx = Context(name="uroce0"), Context(name="uroce1")
    a_pd, b_pd = PD(a_ctx), PD(b_ctx)
    a_cq, b_cq = CQ(a_ctx, 8), CQ(b_ctx, 8)
    a_qp, b_qp = rc_qp(a_pd, a_cq), rc_qp(b_pd, b_cq)
    a_qp.to_rts(rts_attr(b_qp.qp_num, b_ctx.query_gid(1, 0)))
    b_qp.to_rts(rts_attr(a_qp.qp_num, a_ctx.query_gid(1, 0)))
    source = MR(a_pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    target = MR(b_pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    b_qp.post_recv(RecvWR(7, 1, [SGE(target.buf, SIZE, target.lkey)]))
    send = SendWR(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                  sg=[SGE(source.buf, SIZE, source.lkey)], imm_data=imm)
    a_qp.post_send(send)
    wc = poll(b_cq)
    check(wc.status == e.IBV_WC_SUCCESS, "receive: status %d" % wc.status)
    wc = poll(a_cq)
    check(wc.status == e.IBV_WC_SUCCESS, "send: status %d" % wc.status)
    print("send ok")


if __name__ == "__main__":
    main()
