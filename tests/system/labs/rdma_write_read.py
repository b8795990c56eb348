"""Lab 4: RDMA WRITE and READ, keys and access rights.

uroce1 registers a 4096-byte buffer that others may write and read, and
tells uroce0 its address and rkey (here: a variable; in real programs: a
message). uroce0 writes into it, reads it back, and writes with immediate
data. No receive is consumed by a WRITE or a READ, except for the
immediate. Then uroce0 makes one mistake on purpose (--mistake):

  rkey    the rkey of the buffer plus one: a key that names nothing
  access  an MR on uroce1 registered without IBV_ACCESS_REMOTE_WRITE
  bounds  a WRITE that runs past the end of the buffer
  qp      uroce1 takes remote write away from its QP (RTS -> RTS with
          IBV_QP_ACCESS_FLAGS) before the WRITE

    build/bin/uroce exec -- python3 tests/system/labs/rdma_write_read.py --wait --mistake access
"""

from labkit import Side, connect, options, pause, poll, rc_qp, say, state, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 4096


def main():
    args = options("Lab 4: RDMA WRITE/READ from uroce0 into uroce1's memory.",
                   lambda p: p.add_argument("--mistake", default="rkey",
                                            choices=("rkey", "access", "bounds", "qp")))
    a, b = Side("uroce0"), Side("uroce1")
    # The responder's QP must allow remote writes and reads too.
    remote = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    qa, qb = rc_qp(a), rc_qp(b, access=remote)
    connect(qa, qb, b.gid)
    connect(qb, qa, a.gid)
    say("connected: uroce0 QP %d <-> uroce1 QP %d" % (qa.qp_num, qb.qp_num))

    local = MR(a.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    target = MR(b.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | remote)
    # Registered for local use only: remote access is refused.
    private = MR(b.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    inbox = MR(b.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)  # for receives; WRITE data goes elsewhere
    say("uroce1 MR: addr 0x%x length %d lkey 0x%x rkey 0x%x (remote write and read)" % (
        target.buf, SIZE, target.lkey, target.rkey))
    say("uroce1 MR without remote access: addr 0x%x rkey 0x%x" % (private.buf, private.rkey))

    def rdma(wr_id, opcode, addr, rkey, size=SIZE, imm=None):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                    sg=[SGE(local.buf, size, local.lkey)])
        wr.set_wr_rdma(rkey, addr)
        if imm is not None:
            wr.imm_data = imm
        qa.post_send(wr)
        return poll(a.cq)

    pattern = bytes(range(256)) * (SIZE // 256)
    local.write(pattern, SIZE)
    say("uroce0 completion: " + wc_text(rdma(1, e.IBV_WR_RDMA_WRITE, target.buf, target.rkey)))
    say("uroce1 memory now holds what uroce0 wrote: %s" % (target.read(SIZE, 0) == pattern))
    n, _ = b.cq.poll()
    say("uroce1 completions for the WRITE: %d" % n)
    pause("uroce qp: uroce1's RQ did not move; uroce stats: rdma_sends")

    target.write(b"read me!" * (SIZE // 8), SIZE)
    local.write(bytes(SIZE), SIZE)
    say("uroce0 completion: " + wc_text(rdma(2, e.IBV_WR_RDMA_READ, target.buf, target.rkey)))
    say("uroce0 memory now holds uroce1's: %s" % (local.read(8, 0) == b"read me!"))

    qb.post_recv(RecvWR(wr_id=200, num_sge=1, sg=[SGE(inbox.buf, 64, inbox.lkey)]))
    say("uroce0 completion: " + wc_text(rdma(3, e.IBV_WR_RDMA_WRITE_WITH_IMM, target.buf,
                                             target.rkey, 64, imm=0xcafe)))
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    pause("the next step makes the mistake: %s" % args.mistake)

    # A receive waiting on uroce1: flushed when uroce1's QP fails.
    qb.post_recv(RecvWR(wr_id=201, num_sge=1, sg=[SGE(inbox.buf, 64, inbox.lkey)]))
    if args.mistake == "rkey":
        addr, rkey, size = target.buf, target.rkey + 1, SIZE
    elif args.mistake == "access":
        addr, rkey, size = private.buf, private.rkey, SIZE
    elif args.mistake == "bounds":
        addr, rkey, size = target.buf + SIZE - 100, target.rkey, 200
    else:
        addr, rkey, size = target.buf, target.rkey, SIZE
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_READ
        qb.modify(attr, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
        say("uroce1's QP now allows remote READ only")
    say("mistake '%s': WRITE %d bytes to addr 0x%x rkey 0x%x" % (args.mistake, size, addr,
                                                                   rkey))
    say("uroce0 completion: " + wc_text(rdma(4, e.IBV_WR_RDMA_WRITE, addr, rkey, size)))
    say("uroce1 completion: " + wc_text(poll(b.cq)))
    say("states: uroce0 QP %d %s, uroce1 QP %d %s" % (qa.qp_num, state(qa),
                                                      qb.qp_num, state(qb)))
    pause("uroce qp: LAST NAK OR ERROR of both QPs; uroce qp uroce1 %d" % qb.qp_num)
    say("done")


if __name__ == "__main__":
    main()
