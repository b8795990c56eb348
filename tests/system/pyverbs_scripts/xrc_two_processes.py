"""XRC with pyverbs across two processes. This process owns an XRC_INI QP on
uroce0 and an XRC_TGT QP with an XRC SRQ on uroce1; a second process opens
the same XRC domain on uroce1 (through the same file) with an SRQ and
memory of its own. Through the one target QP, a SEND reaches each process's
SRQ and an RDMA WRITE reaches the second process's memory (on its PD, which
its SRQ carries). Exits 0 and prints "xrc ok" when every check holds."""

import json
import os
import subprocess
import sys
import tempfile

from checks import check, poll
from checks import e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqInitAttrEx
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs.xrcd import XRCD, XRCDInitAttr

SIZE = 3000  # three packets at the 1024-byte path MTU
PSN = 0x42
REMOTE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def pattern(seed):
    return bytes((i * seed + 1) & 0xff for i in range(SIZE))


class SrqOwner:
    """A client of uroce1 with the XRC domain of `path`, a PD, memory and an
    XRC SRQ whose completions go to its own CQ."""

    def __init__(self, path):
        self.ctx = Context(name="uroce1")
        self.fd = os.open(path, os.O_RDONLY)
        self.xrcd = XRCD(self.ctx, XRCDInitAttr(
            e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, os.O_CREAT, self.fd))
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        self.mr = MR(self.pd, 2 * SIZE, REMOTE)
        attr = SrqInitAttrEx(max_wr=8)
        attr.srq_type = e.IBV_SRQT_XRC
        attr.pd = self.pd
        attr.xrcd = self.xrcd
        attr.cq = self.cq
        attr.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD |
                          e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD)
        self.srq = SRQ(self.ctx, attr)
        self.srq.post_recv(RecvWR(5, 1, [SGE(self.mr.buf, SIZE, self.mr.lkey)]))

    def expect_send(self, tgt_qpn, seed):
        wc = poll(self.cq)
        check(wc.status == e.IBV_WC_SUCCESS, "receive status %d" % wc.status)
        check(wc.wr_id == 5 and wc.opcode == e.IBV_WC_RECV, "receive wr_id/opcode")
        check(wc.byte_len == SIZE, "byte_len %d" % wc.byte_len)
        check(wc.qp_num == tgt_qpn, "qp_num 0x%x, not the target QP's" % wc.qp_num)
        check(self.mr.read(SIZE, 0) == pattern(seed), "received payload")


def child(path):
    """The second process: reports its SRQ number and memory, then checks
    what arrived once told the sends completed."""
    owner = SrqOwner(path)
    print(json.dumps({"srqn": owner.srq.get_srq_num(), "addr": owner.mr.buf + SIZE,
                      "rkey": owner.mr.rkey}), flush=True)
    tgt_qpn = int(sys.stdin.readline())
    owner.expect_send(tgt_qpn, 3)
    check(owner.mr.read(SIZE, SIZE) == pattern(5), "written payload")
    print("child ok", flush=True)


def connect(initiator, target, ini_gid, tgt_gid):
    route = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=tgt_gid, sgid_index=0))
    attr = QPAttr()
    attr.path_mtu = e.IBV_MTU_1024
    attr.rq_psn = PSN
    attr.sq_psn = PSN
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.min_rnr_timer = 1
    attr.max_rd_atomic = 1
    attr.max_dest_rd_atomic = 1
    attr.ah_attr = route
    attr.dest_qp_num = target.qp_num
    initiator.to_rts(attr)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ini_gid, sgid_index=0))
    attr.dest_qp_num = initiator.qp_num
    target.to_rtr(attr)


def main():
    with tempfile.NamedTemporaryFile(prefix="uroce-xrcd-") as domain:
        owner = SrqOwner(domain.name)
        tgt_init = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        tgt_init.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
        tgt = QP(owner.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV,
                                          comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=owner.xrcd),
                 tgt_init)
        ini_ctx = Context(name="uroce0")
        ini_pd = PD(ini_ctx)
        ini_cq = CQ(ini_ctx, 16)
        ini_mr = MR(ini_pd, 2 * SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        ini = QP(ini_ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, sq_sig_all=1,
                                        comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=ini_pd, scq=ini_cq,
                                        cap=QPCap(max_send_wr=8, max_recv_wr=0, max_recv_sge=0)),
                 QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1))
        connect(ini, tgt, ini_ctx.query_gid(1, 0), owner.ctx.query_gid(1, 0))

        other = subprocess.Popen([sys.executable, __file__, "child", domain.name],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        peer = json.loads(other.stdout.readline())

        def send(wr_id, opcode, seed, srqn, remote=None):
            ini_mr.write(pattern(seed), SIZE, 0)
            wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1,
                        sg=[SGE(ini_mr.buf, SIZE, ini_mr.lkey)])
            if remote:
                wr.set_wr_rdma(remote["rkey"], remote["addr"])
            wr.set_qp_type_xrc(srqn)
            ini.post_send(wr)
            wc = poll(ini_cq)
            check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == wr_id,
                  "send %d status %d" % (wr_id, wc.status))

        send(1, e.IBV_WR_SEND, 3, peer["srqn"])  # to the other process's SRQ
        send(2, e.IBV_WR_RDMA_WRITE, 5, peer["srqn"], remote=peer)  # into its memory
        send(3, e.IBV_WR_SEND, 7, owner.srq.get_srq_num())  # and to this one's
        owner.expect_send(tgt.qp_num, 7)
        out, _ = other.communicate("%d\n" % tgt.qp_num, timeout=60)
        check(other.returncode == 0 and out.strip() == "child ok",
              "the other process: exit %s, %r" % (other.returncode, out))
    print("xrc ok")


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2])
    else:
        main()
