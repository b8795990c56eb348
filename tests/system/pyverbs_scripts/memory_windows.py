"""Memory windows with pyverbs between uroce0 (a) and uroce1 (b) over RC.
b's MR has no remote access of its own (IBV_ACCESS_MW_BIND only); windows
open parts of it to a:
- type 1, bound by ibv_bind_mw over [1024, 2048): a writes into it and
  reads it back through the window's rkey, data checked;
- type 2, bound by an IBV_WR_BIND_MW work request over [2048, 4096): a
  writes through its rkey, then invalidates it with a SEND with invalidate
  (b's receive reports the rkey); a WRITE through it afterwards fails with
  a remote access error.
Exits 0 and prints "memory windows ok" when every check holds."""

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 4096
WINDOW = 1024
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def pattern(seed, size):
    return bytes((i * seed + 11) & 0xff for i in range(size))


class Side:
    def __init__(self, name, access):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 8)
        self.mr = MR(self.pd, SIZE, access)
        self.qp = rc_qp(self.pd, self.cq, REMOTE)

    def post(self, wr, status=e.IBV_WC_SUCCESS):
        self.qp.post_send(wr)
        wc = poll(self.cq)
        check(wc.wr_id == wr.wr_id and wc.status == status,
              "wr %d: status %d, expected %d" % (wc.wr_id, wc.status, status))
        return wc

    def rdma(self, wr_id, opcode, offset, rkey, va, status=e.IBV_WC_SUCCESS):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                    sg=[SGE(self.mr.buf + offset, WINDOW, self.mr.lkey)])
        wr.set_wr_rdma(rkey, va)
        self.post(wr, status)


def main():
    a = Side("uroce0", e.IBV_ACCESS_LOCAL_WRITE)
    b = Side("uroce1", e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
    a.qp.to_rts(rts_attr(b.qp.qp_num, b.ctx.query_gid(1, 0)))
    b.qp.to_rts(rts_attr(a.qp.qp_num, a.ctx.query_gid(1, 0)))
    a.mr.write(pattern(3, WINDOW) + pattern(5, WINDOW), 2 * WINDOW)
    b.mr.write(bytes(SIZE), SIZE)

    # Type 1: ibv_bind_mw, a window of [1024, 2048) that a writes and reads.
    type1 = MW(b.pd, e.IBV_MW_TYPE_1)
    allocated = type1.rkey
    b.qp.bind_mw(type1, MWBind(MWBindInfo(b.mr, b.mr.buf + WINDOW, WINDOW, REMOTE),
                               e.IBV_SEND_SIGNALED, wr_id=1))
    wc = poll(b.cq)
    check(wc.wr_id == 1 and wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW,
          "type 1 bind: wr_id %d, status %d, opcode %d" % (wc.wr_id, wc.status, wc.opcode))
    check(type1.rkey != allocated, "the bound window has a new rkey")
    a.rdma(2, e.IBV_WR_RDMA_WRITE, 0, type1.rkey, b.mr.buf + WINDOW)
    check(b.mr.read(WINDOW, WINDOW) == pattern(3, WINDOW), "bytes written through type 1")
    check(b.mr.read(WINDOW, 0) == bytes(WINDOW), "bytes before the window untouched")
    a.rdma(3, e.IBV_WR_RDMA_READ, 2 * WINDOW, type1.rkey, b.mr.buf + WINDOW)
    check(a.mr.read(WINDOW, 2 * WINDOW) == pattern(3, WINDOW), "bytes read through type 1")

    # Type 2: bound by a work request, written, then invalidated by a's SEND.
    type2 = MW(b.pd, e.IBV_MW_TYPE_2)
    bind = SendWR(wr_id=4, opcode=e.IBV_WR_BIND_MW)
    bind.set_bind_wr(type2, MWBindInfo(b.mr, b.mr.buf + 2 * WINDOW, 2 * WINDOW, REMOTE))
    wc = b.post(bind)
    check(wc.opcode == e.IBV_WC_BIND_MW, "type 2 bind opcode %d" % wc.opcode)
    rkey = bind.rkey
    a.rdma(5, e.IBV_WR_RDMA_WRITE, WINDOW, rkey, b.mr.buf + 3 * WINDOW)
    check(b.mr.read(WINDOW, 3 * WINDOW) == pattern(5, WINDOW), "bytes written through type 2")

    b.qp.post_recv(RecvWR(6, 1, [SGE(b.mr.buf, 16, b.mr.lkey)]))
    a.post(SendWR(wr_id=7, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1, imm_data=rkey,
                  sg=[SGE(a.mr.buf, 16, a.mr.lkey)]))
    wc = poll(b.cq)
    check(wc.wr_id == 6 and wc.status == e.IBV_WC_SUCCESS, "receive status %d" % wc.status)
    check(wc.wc_flags & e.IBV_WC_WITH_INV, "IBV_WC_WITH_INV")
    check(wc.imm_data == rkey, "invalidated rkey 0x%x, expected 0x%x" % (wc.imm_data, rkey))
    check(b.mr.read(16, 0) == pattern(3, 16), "bytes of the SEND")
    a.rdma(8, e.IBV_WR_RDMA_WRITE, 0, rkey, b.mr.buf + 3 * WINDOW, e.IBV_WC_REM_ACCESS_ERR)
    check(b.mr.read(WINDOW, 3 * WINDOW) == pattern(5, WINDOW), "invalidated window unchanged")
    # A bound window keeps its MR registered: windows go first.
    type1.close()
    type2.close()
    print("memory windows ok")


if __name__ == "__main__":
    main()
