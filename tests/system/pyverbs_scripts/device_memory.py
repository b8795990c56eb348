"""Device memory with pyverbs between uroce0 (a) and uroce1 (b) over RC.
Each side allocates 8 KiB of device memory (ibv_alloc_dm), fills it with
ibv_memcpy_to_dm and registers all of it with ibv_reg_dm_mr, zero-based, so
both sides address it from 0:
- a SENDs [0, 2048) of its memory into b's at 1024;
- a WRITEs [2048, 3072) into b's at 4096, and READs that back to 6144;
- a fetch-and-adds and compare-and-swaps the word at 7168 of b's memory,
  the fetched value landing at 7680 of a's.
Every byte is read back with ibv_memcpy_from_dm. Exits 0 and prints
"device memory ok" when every check holds."""

import struct

from checks import check, poll
from checks import e
from pyverbs.cq import CQ
from pyverbs.device import DM, AllocDmAttr, Context
from pyverbs.mr import DMMR
from pyverbs.pd import PD
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 8192
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
ACCESS = e.IBV_ACCESS_ZERO_BASED | e.IBV_ACCESS_LOCAL_WRITE | REMOTE


def pattern(seed, size):
    return bytes((i * seed + 7) & 0xff for i in range(size))


class Side:
    def __init__(self, name, seed):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 8)
        self.dm = DM(self.ctx, AllocDmAttr(SIZE))
        self.dm.copy_to_dm(0, pattern(seed, SIZE), SIZE)
        self.mr = DMMR(self.pd, SIZE, ACCESS, self.dm, 0)
        self.qp = rc_qp(self.pd, self.cq, REMOTE)

    def post(self, wr):
        self.qp.post_send(wr)
        wc = poll(self.cq)
        check(wc.wr_id == wr.wr_id and wc.status == e.IBV_WC_SUCCESS,
              "wr %d: status %d" % (wc.wr_id, wc.status))

    def sge(self, offset, length):
        return SGE(offset, length, self.mr.lkey)  # zero-based: the offset is the address

    def word(self, offset):
        return struct.unpack("<Q", self.dm.copy_from_dm(offset, 8))[0]


def main():
    a = Side("uroce0", 3)
    b = Side("uroce1", 5)
    a.qp.to_rts(rts_attr(b.qp.qp_num, b.ctx.query_gid(1, 0)))
    b.qp.to_rts(rts_attr(a.qp.qp_num, a.ctx.query_gid(1, 0)))
    sent = pattern(3, SIZE)
    untouched = pattern(5, SIZE)

    b.qp.post_recv(RecvWR(1, 1, [b.sge(1024, 2048)]))
    a.post(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(0, 2048)]))
    wc = poll(b.cq)
    check(wc.wr_id == 1 and wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 2048,
          "receive: status %d, %d bytes" % (wc.status, wc.byte_len))
    check(b.dm.copy_from_dm(1024, 2048) == sent[:2048], "bytes sent into device memory")
    check(b.dm.copy_from_dm(0, 1024) == untouched[:1024], "bytes before the receive untouched")

    wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[a.sge(2048, 1024)])
    wr.set_wr_rdma(b.mr.rkey, 4096)
    a.post(wr)
    check(b.dm.copy_from_dm(4096, 1024) == sent[2048:3072], "bytes written")
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[a.sge(6144, 1024)])
    wr.set_wr_rdma(b.mr.rkey, 4096)
    a.post(wr)
    check(a.dm.copy_from_dm(6144, 1024) == sent[2048:3072], "bytes read back")

    b.dm.copy_to_dm(7168, struct.pack("<Q", 1000), 8)
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[a.sge(7680, 8)])
    wr.set_wr_atomic(b.mr.rkey, 7168, 42, 0)
    a.post(wr)
    check(a.word(7680) == 1000, "fetched %d, expected 1000" % a.word(7680))
    check(b.word(7168) == 1042, "after the add: %d" % b.word(7168))
    wr = SendWR(wr_id=6, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[a.sge(7680, 8)])
    wr.set_wr_atomic(b.mr.rkey, 7168, 1042, 9)
    a.post(wr)
    check(b.word(7168) == 9, "after the swap: %d" % b.word(7168))
    print("device memory ok")


if __name__ == "__main__":
    main()
