"""RC QPs as the pyverbs scripts make and connect them: the path MTU is
1024 bytes (so a few KiB make a multi-packet message), PSNs start at 0, and
the peer is addressed by GID index 0 (RoCE v2)."""

from checks import e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr


def rc_qp(pd, cq, access=0, srq=None):
    """An RC QP on `pd` in INIT on port 1, completing to `cq`, taking remote
    `access` (IBV_ACCESS_REMOTE_*), with four send and four receive WQEs
    (receiving through `srq` instead when given)."""
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq,
                      cap=QPCap(max_send_wr=4, max_recv_wr=0 if srq else 4))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    attr.qp_access_flags = access
    return QP(pd, init, attr)


def rts_attr(dest_qpn, dgid):
    """What QP.to_rts needs to connect to QP `dest_qpn` at GID `dgid`."""
    attr = QPAttr()
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = dest_qpn
    attr.rq_psn = attr.sq_psn = 0
    attr.timeout = 14
    attr.retry_cnt = attr.rnr_retry = 7
    attr.min_rnr_timer = 1
    attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=dgid, sgid_index=0))
    return attr
