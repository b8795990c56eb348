"""What the lab programs share. Each lab program imports this file.

Every program prints what it does, one step per line, and with --wait stops
before each interesting step until you press Enter, so that you can look at
`uroce qp`, `uroce stats`, `uroce step` or the console meanwhile.

Run a program with the devices visible, from the top of the checkout:

    build/bin/uroce exec -- python3 tests/system/labs/qp_state_machine.py --wait
"""

import argparse
import os
import sys
import time

# pyverbs_enums.py, one folder up: the enumerations of any pyverbs.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyverbs_enums import ce, e  # noqa: E402,F401

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

# Completion statuses and opcodes by name (enum ibv_wc_status, ibv_wc_opcode).
WC_STATUS = {getattr(e, n): n for n in dir(e)
             if n.startswith("IBV_WC_") and (n.endswith("_ERR") or n == "IBV_WC_SUCCESS")}
WC_OPCODE = {getattr(e, n): n for n in (
    "IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ", "IBV_WC_COMP_SWAP",
    "IBV_WC_FETCH_ADD", "IBV_WC_BIND_MW", "IBV_WC_LOCAL_INV", "IBV_WC_RECV",
    "IBV_WC_RECV_RDMA_WITH_IMM")}
QP_STATE = {getattr(e, "IBV_QPS_" + n): n for n in
            ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")}

_options = argparse.Namespace(wait=False)


def options(description, add=None):
    """Parses the command line: --wait, plus what `add(parser)` adds."""
    global _options
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--wait", action="store_true",
                        help="stop before each step until Enter is pressed")
    if add:
        add(parser)
    _options = parser.parse_args()
    return _options


def say(text):
    """One line of the program's story (flushed at once, also into a pipe)."""
    print(text, flush=True)


def pause(what_to_look_at):
    """With --wait: tells what to look at now and waits for Enter (at the
    end of the input: no more waiting)."""
    if _options.wait:
        say("[paused] %s -- press Enter to go on" % what_to_look_at)
        if not sys.stdin.readline():
            _options.wait = False


def fail(text):
    sys.exit("lab program failed: " + text)


class Side:
    """One end: a device opened, a protection domain and a completion queue."""

    def __init__(self, device, cq_size=64):
        self.name = device
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, cq_size)
        self.gid = self.ctx.query_gid(1, 0)  # GID 0: RoCE v2, ::ffff:IPv4


def rc_qp(side, access=0, srq=None, max_send_wr=16, max_recv_wr=16, sq_sig_all=1):
    """An RC QP of `side`, moved to INIT with the remote `access` it grants.
    sq_sig_all=0: only sends flagged IBV_SEND_SIGNALED complete on the CQ."""
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=side.cq, rcq=side.cq, srq=srq,
                      sq_sig_all=sq_sig_all,
                      cap=QPCap(max_send_wr=max_send_wr,
                                max_recv_wr=0 if srq else max_recv_wr))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    attr.qp_access_flags = access
    return QP(side.pd, init, attr)


def connect(qp, peer_qp, peer_gid, timeout=14, retry_cnt=7, rnr_retry=7, min_rnr_timer=12,
            max_rd_atomic=1, max_dest_rd_atomic=1, psn=0):
    """INIT -> RTR -> RTS towards `peer_qp` at `peer_gid`, path MTU 1024.
    timeout: 4.096 us * 2^timeout before a retransmission (14: 67 ms)."""
    attr = QPAttr()
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = peer_qp.qp_num
    attr.rq_psn = attr.sq_psn = psn
    attr.timeout = timeout
    attr.retry_cnt = retry_cnt
    attr.rnr_retry = rnr_retry
    attr.min_rnr_timer = min_rnr_timer
    attr.max_rd_atomic = max_rd_atomic
    attr.max_dest_rd_atomic = max_dest_rd_atomic
    attr.ah_attr = AHAttr(port_num=1, is_global=1,
                          gr=GlobalRoute(dgid=peer_gid, sgid_index=0))
    qp.to_rts(attr)


def poll(cq, seconds=30.0):
    """The next work completion of `cq`; the program fails when none comes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            return wcs[0]
        time.sleep(0.0005)
    fail("no completion in %.0f s" % seconds)


def wc_text(wc):
    """The fields of a work completion a lab looks at. Only wr_id, status,
    qp_num and vendor_err are valid in a completion with an error."""
    if wc.status != e.IBV_WC_SUCCESS:
        return "wr_id=%d status=%s qp_num=%d vendor_err=%d" % (
            wc.wr_id, WC_STATUS.get(wc.status, wc.status), wc.qp_num, wc.vendor_err)
    text = "wr_id=%d status=%s opcode=%s" % (wc.wr_id, WC_STATUS[wc.status],
                                            WC_OPCODE.get(wc.opcode, wc.opcode))
    if wc.opcode & e.IBV_WC_RECV or wc.opcode in (e.IBV_WC_RDMA_READ, e.IBV_WC_COMP_SWAP,
                                                  e.IBV_WC_FETCH_ADD):
        text += " byte_len=%d" % wc.byte_len  # bytes received, read or fetched
    text += " qp_num=%d" % wc.qp_num
    if wc.wc_flags & e.IBV_WC_WITH_IMM:
        text += " imm_data=0x%x" % wc.imm_data
    if wc.wc_flags & e.IBV_WC_GRH:  # UD: a GRH precedes the data; who sent it
        text += " src_qp=%d flags=GRH" % wc.src_qp
    return text


def state(qp):
    return QP_STATE[qp.query(e.IBV_QP_STATE)[0].qp_state]
