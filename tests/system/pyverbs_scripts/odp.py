"""On-demand paging with pyverbs between uroce0 and uroce1 over RC: side a
has one implicit ODP MR (the whole address space) and works on plain
process memory through it; side b has an ODP MR prefetched with
ibv_advise_mr. An RDMA WRITE, an RDMA READ back and a SEND, each with its
data checked. Exits 0 and prints "odp ok" when every check holds."""

import ctypes

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 5000  # several packets at the 1024-byte path MTU
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_ON_DEMAND)


def pattern(seed):
    return bytes((i * seed + 3) & 0xff for i in range(SIZE))


class Side:
    def __init__(self, name, implicit):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        self.mr = MR(self.pd, 0, ACCESS, implicit=True) if implicit else MR(self.pd, SIZE, ACCESS)
        self.qp = rc_qp(self.pd, self.cq, e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
        self.gid = self.ctx.query_gid(1, 0)

    def connect(self, peer):
        self.qp.to_rts(rts_attr(peer.qp.qp_num, peer.gid))

    def post(self, wr):
        self.qp.post_send(wr)
        wc = self.poll()
        check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == wr.wr_id,
              "wr %d: status %d" % (wr.wr_id, wc.status))

    def poll(self):
        return poll(self.cq)


def main():
    a, b = Side("uroce0", implicit=True), Side("uroce1", implicit=False)
    a.connect(b)
    b.connect(a)
    # b's MR is faulted in ahead of use; a's memory is plain ctypes buffers
    # that only the implicit MR covers.
    b.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH,
                   [SGE(b.mr.buf, SIZE, b.mr.lkey)])
    source = ctypes.create_string_buffer(pattern(11), SIZE)
    back = ctypes.create_string_buffer(SIZE)

    write = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                   sg=[SGE(ctypes.addressof(source), SIZE, a.mr.lkey)])
    write.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.post(write)
    check(b.mr.read(SIZE, 0) == pattern(11), "written bytes")

    read = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                  sg=[SGE(ctypes.addressof(back), SIZE, a.mr.lkey)])
    read.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.post(read)
    check(back.raw == pattern(11), "read bytes")

    b.qp.post_recv(RecvWR(7, 1, [SGE(b.mr.buf, SIZE, b.mr.lkey)]))
    ctypes.memmove(source, pattern(13), SIZE)
    a.post(SendWR(wr_id=3, num_sge=1, sg=[SGE(ctypes.addressof(source), SIZE, a.mr.lkey)]))
    wc = b.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 7 and wc.byte_len == SIZE,
          "receive: status %d, %d bytes" % (wc.status, wc.byte_len))
    check(b.mr.read(SIZE, 0) == pattern(13), "sent bytes")
    print("odp ok")


if __name__ == "__main__":
    main()
