"""UD with pyverbs between uroce0 and uroce1: an address handle to the
peer's GID 0, a SEND with immediate, and the receive checked (GRH, source
QP, immediate, payload), then a reply through an address handle made from
the completion (ibv_create_ah_from_wc). Exits 0 when every check holds."""

from checks import check, poll
from checks import e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

GRH = 40
QKEY = 0x11111111
SIZE = 1024


class Side:
    def __init__(self, name):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        self.mr = MR(self.pd, 2 * (GRH + SIZE), e.IBV_ACCESS_LOCAL_WRITE)
        init = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=4, max_recv_wr=4))
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.qkey = QKEY
        attr.port_num = 1
        self.qp = QP(self.pd, init, attr)
        self.gid = self.ctx.query_gid(1, 0)

    def post_recv(self, wr_id):
        self.qp.post_recv(RecvWR(wr_id, 1, [SGE(self.mr.buf, GRH + SIZE, self.mr.lkey)]))

    def poll(self):
        return poll(self.cq)


def main():
    a, b = Side("uroce0"), Side("uroce1")
    b.post_recv(7)
    payload = bytes((i * 7) & 0xff for i in range(SIZE))
    a.mr.write(payload, SIZE, GRH + SIZE)
    ah = AH(a.pd, attr=AHAttr(is_global=1, port_num=1,
                              gr=GlobalRoute(dgid=b.gid, sgid_index=0)))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1, imm_data=0x1234,
                sg=[SGE(a.mr.buf + GRH + SIZE, SIZE, a.mr.lkey)])
    wr.set_wr_ud(ah, b.qp.qp_num, QKEY)
    a.qp.post_send(wr)
    sent = a.poll()
    check(sent.status == e.IBV_WC_SUCCESS and sent.wr_id == 1, "send completion")

    wc = b.poll()
    check(wc.status == e.IBV_WC_SUCCESS, "receive status %d" % wc.status)
    check(wc.wr_id == 7, "receive wr_id")
    check(wc.byte_len == GRH + SIZE, "byte_len %d" % wc.byte_len)
    check(wc.src_qp == a.qp.qp_num, "src_qp")
    check(wc.wc_flags & e.IBV_WC_GRH and wc.wc_flags & e.IBV_WC_WITH_IMM, "wc_flags")
    check(wc.imm_data == 0x1234, "imm_data 0x%x" % wc.imm_data)
    check(b.mr.read(SIZE, GRH) == payload, "payload")

    # Answer the sender through an AH made from the completion and its GRH.
    a.post_recv(8)
    reply = AH(b.pd, wc=wc, grh=b.mr.buf, port_num=1)
    back = SendWR(wr_id=2, num_sge=1, sg=[SGE(b.mr.buf + GRH, 64, b.mr.lkey)])
    back.set_wr_ud(reply, wc.src_qp, QKEY)
    b.qp.post_send(back)
    got = a.poll()
    check(got.status == e.IBV_WC_SUCCESS and got.wr_id == 8, "reply received")
    check(got.src_qp == b.qp.qp_num, "reply src_qp")
    check(a.mr.read(64, GRH) == payload[:64], "reply payload")
    check(b.poll().wr_id == 2, "reply send completion")
    print("ud ok")


if __name__ == "__main__":
    main()
