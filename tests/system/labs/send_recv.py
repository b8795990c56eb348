"""Lab 3: SEND/RECV and work completions.

uroce0 sends to uroce1 over an RC connection. Each message consumes one
receive that uroce1 posted beforehand; both sides read a work completion.
Messages: 100 bytes; 3000 bytes with immediate data (three packets at the
1024-byte path MTU); one unsignaled SEND (no completion for the sender);
and last, 5000 bytes into a 4096-byte receive, which fails.

    build/bin/uroce exec -- python3 tests/system/labs/send_recv.py --wait
"""

from labkit import Side, connect, options, pause, poll, rc_qp, say, state, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.wr import SGE, RecvWR, SendWR

BUFFER = 4096


def main():
    options("Lab 3: SEND/RECV between uroce0 and uroce1, and their completions.")
    a, b = Side("uroce0"), Side("uroce1")
    # sq_sig_all=0: a SEND completes on the sender's CQ only if it asks to.
    qa, qb = rc_qp(a, sq_sig_all=0), rc_qp(b)
    connect(qa, qb, b.gid)
    connect(qb, qa, a.gid)
    say("connected: uroce0 QP %d <-> uroce1 QP %d" % (qa.qp_num, qb.qp_num))
    src = MR(a.pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
    dst = MR(b.pd, 4 * BUFFER, e.IBV_ACCESS_LOCAL_WRITE)

    # The receiver posts its buffers first: a SEND needs a receive waiting.
    for i in range(4):
        qb.post_recv(RecvWR(wr_id=100 + i, num_sge=1,
                            sg=[SGE(dst.buf + i * BUFFER, BUFFER, dst.lkey)]))
    say("posted: 4 receives of %d bytes on uroce1 (wr_id 100-103)" % BUFFER)
    pause("uroce qp: uroce1's RQ q/f/c is 4/0/0")

    def send(wr_id, size, signaled=True, imm=None):
        src.write(bytes([wr_id]) * size, size)
        wr = SendWR(wr_id=wr_id, num_sge=1, sg=[SGE(src.buf, size, src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
        if imm is not None:
            wr.opcode = e.IBV_WR_SEND_WITH_IMM
            wr.imm_data = imm
        qa.post_send(wr)
        say("sent: wr_id %d, %d bytes%s%s" % (wr_id, size,
                                               " with immediate 0x%x" % imm if imm else "",
                                               "" if signaled else ", unsignaled"))

    send(1, 100)
    say("uroce0 completion: " + wc_text(poll(a.cq)))
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    check = dst.read(100, 0) == bytes([1]) * 100
    say("uroce1 buffer 0 holds the 100 bytes sent: %s" % check)
    pause("uroce qp: SQ/RQ completed counts; uroce stats: rdma_sends, rdma_recvs")

    send(2, 3000, imm=0x1234)
    say("uroce0 completion: " + wc_text(poll(a.cq)))
    say("uroce1 completion: " + wc_text(poll(b.cq)))

    send(3, 200, signaled=False)
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    n, _ = a.cq.poll()
    say("uroce0 completions for the unsignaled SEND: %d" % n)
    pause("uroce qp: uroce0's SQ shows the unsignaled SEND completed all the same")

    # The receive is 4096 bytes: a 5000-byte message does not fit.
    send(4, 5000)
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    say("uroce0 completion: " + wc_text(poll(a.cq)))
    say("states: uroce0 QP %d %s, uroce1 QP %d %s" % (qa.qp_num, state(qa),
                                                      qb.qp_num, state(qb)))
    pause("uroce qp: both QPs in ERR, and why (LAST NAK OR ERROR)")
    say("done")


if __name__ == "__main__":
    main()
