"""Lab 7: atomics and responder resources.

uroce1 exposes one 64-bit counter (an MR with IBV_ACCESS_REMOTE_ATOMIC, on a
QP that allows remote atomics). uroce0 runs atomics on it; each returns
the value the counter had before, into uroce0's memory:

  fetch-and-add:     counter += add; returns the old value
  compare-and-swap:  if counter == compare: counter = swap; returns the old value

Then uroce0 posts --burst fetch-and-adds at once. At most max_rd_atomic
(uroce0's, set at RTS) READs and atomics are outstanding; uroce1 keeps the
answers of the last max_dest_rd_atomic (set at RTR) to answer a repeated
request without executing it twice.

    build/bin/uroce exec -- python3 tests/system/labs/atomics.py --wait --max-rd-atomic 2

and at the pause before the burst, `build/bin/uroce step uroce0 pause` to see
how many atomics are on the wire at once. uroce0's ACK timeout is 4.3 s
(timeout 20), time to act in step mode before it sends anything again.
"""

import struct

from labkit import Side, connect, options, pause, poll, rc_qp, say, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.wr import SGE, SendWR


def add_options(parser):
    parser.add_argument("--max-rd-atomic", type=int, default=1,
                        help="uroce0's outstanding READs/atomics (1)")
    parser.add_argument("--max-dest-rd-atomic", type=int, default=1,
                        help="uroce1's responder resources (1)")
    parser.add_argument("--burst", type=int, default=8, help="fetch-and-adds posted at once")


def main():
    args = options("Lab 7: atomics from uroce0 on a counter in uroce1's memory.", add_options)
    a, b = Side("uroce0"), Side("uroce1")
    qa = rc_qp(a, max_send_wr=args.burst)
    qb = rc_qp(b, access=e.IBV_ACCESS_REMOTE_ATOMIC)
    connect(qa, qb, b.gid, max_rd_atomic=args.max_rd_atomic, timeout=20)
    connect(qb, qa, a.gid, max_dest_rd_atomic=args.max_dest_rd_atomic)
    say("connected: uroce0 QP %d (max_rd_atomic %d) -> uroce1 QP %d (max_dest_rd_atomic %d)"
        % (qa.qp_num, args.max_rd_atomic, qb.qp_num, args.max_dest_rd_atomic))

    counter = MR(b.pd, 8, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC)
    counter.write(struct.pack("<Q", 100), 8)  # uroce1's counter starts at 100
    results = MR(a.pd, 8 * args.burst, e.IBV_ACCESS_LOCAL_WRITE)

    def value():
        return struct.unpack("<Q", counter.read(8, 0))[0]

    def returned(slot=0):
        return struct.unpack("<Q", results.read(8, 8 * slot))[0]

    def atomic(wr_id, opcode, compare_add, swap=0, slot=0):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                    sg=[SGE(results.buf + 8 * slot, 8, results.lkey)])
        # Fetch-and-add adds compare_add; compare-and-swap compares with
        # compare_add and writes swap.
        wr.set_wr_atomic(rkey=counter.rkey, addr=counter.buf, compare_add=compare_add,
                         swap=swap)
        qa.post_send(wr)

    say("uroce1 counter: %d" % value())
    atomic(1, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 5)
    say("fetch-and-add 5: %s" % wc_text(poll(a.cq)))
    say("  returned %d, counter now %d" % (returned(), value()))
    atomic(2, e.IBV_WR_ATOMIC_CMP_AND_SWP, 105, swap=1000)
    say("compare 105, swap 1000: %s" % wc_text(poll(a.cq)))
    say("  returned %d, counter now %d" % (returned(), value()))
    atomic(3, e.IBV_WR_ATOMIC_CMP_AND_SWP, 105, swap=2000)
    say("compare 105, swap 2000: %s" % wc_text(poll(a.cq)))
    say("  returned %d, counter now %d (no swap: 1000 is not 105)" % (returned(), value()))
    pause("the next step posts %d fetch-and-adds at once; to see how many go at once, "
          "pause the wire first (uroce step uroce0 pause)" % args.burst)

    for i in range(args.burst):
        atomic(10 + i, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 1, slot=i)
    say("posted %d fetch-and-adds of 1" % args.burst)
    for i in range(args.burst):
        say("completion: " + wc_text(poll(a.cq, seconds=600)))
    olds = sorted(returned(i) for i in range(args.burst))
    say("returned values: %s" % " ".join(map(str, olds)))
    say("counter now %d" % value())
    say("done")


if __name__ == "__main__":
    main()
