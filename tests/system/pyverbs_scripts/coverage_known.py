"""Known device behaviour for the coverage map (test_fuzzing): on uroce0,
one RC QP moved RESET->INIT, then refused INIT->RTR without its attributes
(a missing attribute) and INIT->RTS (a transition RC does not have). Exits
0 when both refusals came as EINVAL."""

import errno
import sys

from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

ctx = Context(name="uroce0")
pd = PD(ctx)
cq = CQ(ctx, 8)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
attr = QPAttr(port_num=1)
attr.qp_state = e.IBV_QPS_INIT
qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
for state in (e.IBV_QPS_RTR, e.IBV_QPS_RTS):
    attr = QPAttr()
    attr.qp_state = state
    try:
        qp.modify(attr, e.IBV_QP_STATE)
    except PyverbsRDMAError as ex:
        if ex.error_code != errno.EINVAL:
            sys.exit("modify to %d failed with %d, not EINVAL" % (state, ex.error_code))
    else:
        sys.exit("modify to %d was accepted" % state)
qp.close()
cq.close()
pd.close()
ctx.close()
