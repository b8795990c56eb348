"""Extended CQ polling with pyverbs between uroce0 and uroce1 over RC. Side
b's completions go to an extended CQ asking for every standard field and
both completion timestamps; side a sends a multi-packet SEND with
immediate, then an RDMA WRITE with immediate. Side b reads both
completions in one ibv_start_poll/ibv_next_poll/ibv_end_poll batch and
checks each field, the data, and that both timestamps lie between the
clocks read before the first post and after the batch, in order. Exits 0
and prints "extended cq ok" when every check holds."""

import errno
import time

from checks import check, poll
from checks import e
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, RecvWR, SendWR
from rc import rc_qp, rts_attr

SIZE = 3000  # three packets at the 1024-byte path MTU
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
WC_FLAGS = (e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
            e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)


def pattern(seed):
    return bytes((i * seed + 5) & 0xff for i in range(SIZE))


def device_clock(ctx):
    values = ctx.query_rt_values_ex(e.IBV_VALUES_MASK_RAW_CLOCK)
    return values[0] * 1_000_000_000 + values[1]


def next_completion(cq, first):
    """Starts the batch (first) or moves on in it, waiting for a completion."""
    for _ in range(2_000_000):
        ret = cq.start_poll(PollCqAttr()) if first else cq.poll_next()
        if ret == 0:
            return
        check(ret == errno.ENOENT, "polling failed: %d" % ret)
        if not first:
            cq.end_poll()
            first = True
    check(False, "no completion")


def main():
    a_ctx, b_ctx = Context(name="uroce0"), Context(name="uroce1")
    a_pd, b_pd = PD(a_ctx), PD(b_ctx)
    a_cq = CQ(a_ctx, 8)
    b_cq = CQEX(b_ctx, CqInitAttrEx(cqe=8, wc_flags=WC_FLAGS))
    a_qp = rc_qp(a_pd, a_cq, e.IBV_ACCESS_REMOTE_WRITE)
    b_qp = rc_qp(b_pd, b_cq, e.IBV_ACCESS_REMOTE_WRITE)
    a_qp.to_rts(rts_attr(b_qp.qp_num, b_ctx.query_gid(1, 0)))
    b_qp.to_rts(rts_attr(a_qp.qp_num, a_ctx.query_gid(1, 0)))
    source = MR(a_pd, 2 * SIZE, ACCESS)
    source.write(pattern(3) + pattern(7), 2 * SIZE)
    target = MR(b_pd, 2 * SIZE, ACCESS)

    b_qp.post_recv(RecvWR(21, 1, [SGE(target.buf, SIZE, target.lkey)]))
    b_qp.post_recv(RecvWR(22, 1, [SGE(target.buf, 0, target.lkey)]))  # the immediate only
    clock_before, wall_before = device_clock(b_ctx), time.clock_gettime_ns(time.CLOCK_REALTIME)
    send = SendWR(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                  sg=[SGE(source.buf, SIZE, source.lkey)], imm_data=0x1234)
    write = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1,
                   sg=[SGE(source.buf + SIZE, SIZE, source.lkey)], imm_data=0x5678)
    write.set_wr_rdma(target.rkey, target.buf + SIZE)
    for wr in (send, write):
        a_qp.post_send(wr)
        wc = poll(a_cq)
        check(wc.status == e.IBV_WC_SUCCESS, "wr %d: status %d" % (wr.wr_id, wc.status))

    expected = [(21, e.IBV_WC_RECV, 0x1234), (22, e.IBV_WC_RECV_RDMA_WITH_IMM, 0x5678)]
    stamps = []
    for index, (wr_id, opcode, imm) in enumerate(expected):
        next_completion(b_cq, index == 0)
        check(b_cq.status == e.IBV_WC_SUCCESS, "completion %d: status %d" % (wr_id, b_cq.status))
        check(b_cq.wr_id == wr_id, "wr_id %d, expected %d" % (b_cq.wr_id, wr_id))
        check(b_cq.read_opcode() == opcode, "opcode %d" % b_cq.read_opcode())
        check(b_cq.read_byte_len() == SIZE, "byte_len %d" % b_cq.read_byte_len())
        check(b_cq.read_wc_flags() & e.IBV_WC_WITH_IMM, "IBV_WC_WITH_IMM")
        check(b_cq.read_imm_data() == imm, "imm_data 0x%x" % b_cq.read_imm_data())
        check(b_cq.read_qp_num() == b_qp.qp_num, "qp_num %d" % b_cq.read_qp_num())
        check(b_cq.read_vendor_err() == 0, "vendor_err")
        stamps.append((b_cq.read_timestamp(), b_cq.read_completion_wallclock_ns()))
    b_cq.end_poll()
    clock_after, wall_after = device_clock(b_ctx), time.clock_gettime_ns(time.CLOCK_REALTIME)

    check(clock_before <= stamps[0][0] <= stamps[1][0] <= clock_after,
          "device clock stamps %s outside [%d, %d]" % (stamps, clock_before, clock_after))
    check(wall_before <= stamps[0][1] <= stamps[1][1] <= wall_after,
          "wall clock stamps %s outside [%d, %d]" % (stamps, wall_before, wall_after))
    check(target.read(2 * SIZE, 0) == pattern(3) + pattern(7), "received bytes")
    print("extended cq ok")


if __name__ == "__main__":
    main()
