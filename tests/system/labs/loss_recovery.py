"""Lab 5: loss and recovery on an RC connection.

uroce0 sends --count messages of --size bytes to uroce1, one after the
other, and uroce1 checks every byte. The path MTU is 1024 bytes, so a
4096-byte message is four packets. Whatever the wire loses, duplicates or
reorders (`uroce fault`, `uroce step`), RC delivers every message once, in
order, or fails with an error completion after retry_cnt retries.

--timeout sets the QP's local ACK timeout: 4.096 us * 2^timeout (14: 67 ms,
18: 1.07 s, 20: 4.3 s). In step mode use 20 or more, so that you have time
to act between the requester's retransmissions.

    build/bin/uroce step uroce0 pause
    build/bin/uroce exec -- python3 tests/system/labs/loss_recovery.py --count 2 --timeout 20
"""

import time

from labkit import Side, connect, options, pause, poll, rc_qp, say, state, wc_text
from labkit import e
from pyverbs.mr import MR
from pyverbs.wr import SGE, RecvWR, SendWR


def add_options(parser):
    parser.add_argument("--count", type=int, default=20, help="messages to send (20)")
    parser.add_argument("--size", type=int, default=4096, help="bytes per message (4096)")
    parser.add_argument("--timeout", type=int, default=14, help="local ACK timeout code (14)")
    parser.add_argument("--retry-cnt", type=int, default=7, help="retransmissions (7)")


def main():
    args = options("Lab 5: RC messages from uroce0 to uroce1 through a lossy wire.",
                   add_options)
    a, b = Side("uroce0"), Side("uroce1")
    qa, qb = rc_qp(a, max_send_wr=4, max_recv_wr=args.count), rc_qp(b, max_recv_wr=args.count)
    connect(qa, qb, b.gid, timeout=args.timeout, retry_cnt=args.retry_cnt)
    connect(qb, qa, a.gid)
    say("connected: uroce0 QP %d -> uroce1 QP %d, timeout %d (%.0f ms), retry_cnt %d" % (
        qa.qp_num, qb.qp_num, args.timeout, 4.096e-3 * 2 ** args.timeout, args.retry_cnt))
    src = MR(a.pd, args.size, e.IBV_ACCESS_LOCAL_WRITE)
    dst = MR(b.pd, args.count * args.size, e.IBV_ACCESS_LOCAL_WRITE)
    for i in range(args.count):
        qb.post_recv(RecvWR(wr_id=i, num_sge=1,
                            sg=[SGE(dst.buf + i * args.size, args.size, dst.lkey)]))
    pause("set faults (uroce fault uroce0 ...) or pause the wire (uroce step uroce0 pause)")

    started = time.monotonic()
    for i in range(args.count):
        data = bytes((i + j) & 0xff for j in range(args.size))
        src.write(data, args.size)
        sent = time.monotonic()
        say("message %d: posted, %d bytes" % (i, args.size))
        qa.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(src.buf, args.size, src.lkey)]))
        wc = poll(a.cq, seconds=600)
        say("message %d: uroce0 completion after %.0f ms: %s" % (
            i, 1000 * (time.monotonic() - sent), wc_text(wc)))
        if wc.status != e.IBV_WC_SUCCESS:
            say("message %d failed; uroce0 QP %d is in %s" % (i, qa.qp_num, state(qa)))
            pause("uroce qp: why uroce0's QP is in ERR; uroce step uroce0: what is held")
            raise SystemExit(1)
        received = poll(b.cq)
        intact = received.status == e.IBV_WC_SUCCESS and received.wr_id == i and \
            dst.read(args.size, i * args.size) == data
        say("message %d: uroce1 received it, data intact: %s" % (i, intact))
        if not intact:
            raise SystemExit("message %d arrived damaged: %s" % (i, wc_text(received)))
    say("done: %d messages delivered intact in %.2f s" % (args.count,
                                                          time.monotonic() - started))


if __name__ == "__main__":
    main()
