"""Lab 8: UD, address handles and multicast.

A UD QP has no connection: every SEND names its destination with an
address handle (the peer's GID), the peer's QPN and a Q_Key. The receiver
finds a 40-byte GRH in front of the data: on RoCE v2, 20 unused bytes and
the packet's IPv4 header. Nothing is acknowledged: a datagram with the
wrong Q_Key, or one that finds no receive posted, is lost silently (and
counted by the receiving device), and so is one longer than the path MTU.
Multicast is done with mckey in the lab (docs/labs/08-ud-address-handles-multicast.md).

    build/bin/uroce exec -- python3 tests/system/labs/ud_address_handles.py --wait
"""

import ipaddress

from labkit import Side, options, pause, poll, say, wc_text
from labkit import e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.mr import MR
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

GRH = 40
QKEY = 0x11111111


def ud_qp(side):
    """A UD QP in RTS. INIT needs a Q_Key; given attributes, pyverbs moves a
    UD QP on through RTR (nothing more needed) to RTS (an sq_psn)."""
    init = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=side.cq, rcq=side.cq,
                      cap=QPCap(max_send_wr=8, max_recv_wr=8))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    attr.qkey = QKEY
    return QP(side.pd, init, attr)


def main():
    options("Lab 8: UD datagrams between uroce0 and uroce1.")
    a, b = Side("uroce0"), Side("uroce1")
    qa, qb = ud_qp(a), ud_qp(b)
    buf_a = MR(a.pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
    buf_b = MR(b.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    say("UD QPs: uroce0 QP %d, uroce1 QP %d, Q_Key 0x%x" % (qa.qp_num, qb.qp_num, QKEY))

    # The address handle: where uroce1 is (GID index 0 of port 1 there).
    ah = AH(a.pd, attr=AHAttr(port_num=1, is_global=1,
                              gr=GlobalRoute(dgid=b.gid, sgid_index=0)))

    def send(qkey, size, wr_id):
        """A SEND of `size` bytes from uroce0 to uroce1's QP, through the AH."""
        buf_a.write(bytes(i & 0xff for i in range(size)), size)
        wr = SendWR(wr_id=wr_id, num_sge=1, sg=[SGE(buf_a.buf, size, buf_a.lkey)])
        wr.set_wr_ud(ah, qb.qp_num, qkey)
        qa.post_send(wr)
        say("uroce0 completion: " + wc_text(poll(a.cq)))

    def post(wr_id):
        """A receive on uroce1 with room for the GRH and 1024 bytes."""
        qb.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(buf_b.buf, GRH + 1024, buf_b.lkey)]))

    post(100)
    send(QKEY, 100, 1)
    wc = poll(b.cq)
    say("uroce1 completion: " + wc_text(wc))
    grh = buf_b.read(GRH, 0)
    ip = grh[20:]
    say("GRH: first 20 bytes all zero: %s; then an IPv4 header, version %d, protocol %d "
        "(UDP), from %s to %s" % (grh[:20] == bytes(20), ip[0] >> 4, ip[9],
                                  ipaddress.IPv4Address(ip[12:16]),
                                  ipaddress.IPv4Address(ip[16:20])))
    pause("uroce stats uroce1: rdma_recvs; the trace shows UD_SEND_ONLY with a DETH")

    # A wrong Q_Key: the receiving QP drops the datagram.
    post(101)
    send(QKEY + 1, 100, 2)
    say("sent with Q_Key 0x%x instead of 0x%x" % (QKEY + 1, QKEY))
    say("uroce1 completions: %d (receive 101 is still posted)" % b.cq.poll()[0])
    pause("uroce stats uroce1: rcvd_qkey_err")
    send(QKEY, 100, 3)  # takes receive 101
    say("uroce1 completion: " + wc_text(poll(b.cq)))

    # No receive posted: the datagram is dropped; there is no RNR NAK in UD.
    send(QKEY, 100, 4)
    say("sent to uroce1, which has no receive posted; uroce1 completions: %d" %
        b.cq.poll()[0])
    pause("uroce stats uroce1: rcvd_msg_dropped")

    # Longer than the path MTU (4096): UD messages are one packet at most.
    send(QKEY, 5000, 5)
    say("sent 5000 bytes; uroce1 completions: %d" % b.cq.poll()[0])
    pause("uroce stats uroce0: ud_oversize")
    say("done")


if __name__ == "__main__":
    main()
