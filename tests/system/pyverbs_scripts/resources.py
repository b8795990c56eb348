"""Holds a known set of objects for the `rdma` tool to report: on uroce0 and
uroce1 a PD, a CQ of at least CQE entries (it prints how many it got), an MR of MR_BYTES and RC QPs
(QP_PAIRS of them, each connected to its peer on the other device with the
PSNs below), and an rdma_cm ID listening on 127.0.0.2:PORT. Prints one JSON
line describing them, then waits for a line on stdin and exits.

With 'removal' it then reports, as a second JSON line, what it sees after
uroce1 was deleted: the async event of its uroce1 context, the listener's
rdma_cm event, the errno of a new PD on uroce1 and whether its uroce0 QPs
still answer a query; and leaves without tearing down (the daemon does).

usage: resources.py PORT QP_PAIRS [removal]"""

import json
import os
import sys

from checks import ce
from checks import e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

CQE = 64
MR_BYTES = 8192
SQ_PSN = {"uroce0": 0x123, "uroce1": 0x456}

port, pairs = int(sys.argv[1]), int(sys.argv[2])
sides = {}
for name in ("uroce0", "uroce1"):
    ctx = Context(name=name)
    pd = PD(ctx)
    cq = CQ(ctx, CQE)
    mr = MR(pd, MR_BYTES, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    cap = QPCap(max_send_wr=4, max_recv_wr=4)
    qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(pairs)]
    sides[name] = dict(ctx=ctx, pd=pd, cq=cq, mr=mr, qps=qps, gid=ctx.query_gid(1, 0))

for name, peer in (("uroce0", "uroce1"), ("uroce1", "uroce0")):
    for mine, theirs in zip(sides[name]["qps"], sides[peer]["qps"]):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
        mine.to_init(attr)
        attr = QPAttr(qp_state=e.IBV_QPS_RTR, cur_qp_state=e.IBV_QPS_INIT)
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = theirs.qp_num
        attr.rq_psn = SQ_PSN[peer]
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=sides[peer]["gid"], sgid_index=0), is_global=1,
                              port_num=1)
        mine.to_rtr(attr)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RTR)
        attr.sq_psn = SQ_PSN[name]
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.max_rd_atomic = 1
        mine.to_rts(attr)

channel = CMEventChannel()
listener = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
listener.bind_addr(AddrInfo(src="127.0.0.2", src_service=str(port), port_space=ce.RDMA_PS_TCP,
                            flags=ce.RAI_PASSIVE))
listener.listen()

print(json.dumps({name: {"qpns": [qp.qp_num for qp in side["qps"]],
                         "lkey": side["mr"].lkey, "rkey": side["mr"].rkey, "cqe": side["cq"].cqe,
                         "sq_psn": SQ_PSN[name]}
                  for name, side in sides.items()}), flush=True)
sys.stdin.readline()
if sys.argv[3:] == ["removal"]:
    event = sides["uroce1"]["ctx"].get_async_event()
    fatal = event.event_type
    event.ack()
    cm_event = CMEvent(channel)
    removal = cm_event.event_type
    cm_event.ack_cm_event()
    try:
        PD(sides["uroce1"]["ctx"])
        pd_errno = 0
    except PyverbsRDMAError as error:
        pd_errno = error.error_code
    state = sides["uroce0"]["qps"][0].query(e.IBV_QP_STATE)[0].qp_state
    print(json.dumps({"async_event": fatal, "cm_event": removal, "pd_errno": pd_errno,
                      "uroce0_qp_state": state}), flush=True)
    os._exit(0)
