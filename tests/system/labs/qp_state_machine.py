"""Lab 2: the QP state machine by hand.

One RC QP on uroce0 is taken through RESET -> INIT -> RTR -> RTS, into ERR
and back to RESET with ibv_modify_qp. On the way the program asks for
transitions the verbs refuse: a state skipped, or a transition without an
attribute it requires. Each refusal is EINVAL; the reason is in the
daemon's log, and on stderr when run with
VERBS_LOG_LEVEL=1 VERBS_LOG_FILE=/dev/stderr.

    build/bin/uroce exec -- python3 tests/system/labs/qp_state_machine.py --wait
"""

import errno

from labkit import QP_STATE, Side, options, pause, poll, say, state, wc_text
from labkit import e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

# The attribute mask bits (enum ibv_qp_attr_mask) by name, in bit order.
MASK_NAMES = ("STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
              "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
              "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
              "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN")


def mask_text(mask):
    return "|".join("IBV_QP_" + n for n in MASK_NAMES if mask & getattr(e, "IBV_QP_" + n))


def modify(qp, attr, mask):
    """ibv_modify_qp(qp, attr, mask); prints the outcome, returns whether it worked."""
    what = "%s -> %s with %s" % (state(qp), QP_STATE[attr.qp_state], mask_text(mask))
    try:
        qp.modify(attr, mask)
    except PyverbsRDMAError as error:
        say("refused:  %s: errno %d (%s)" % (what, error.error_code,
                                             errno.errorcode.get(error.error_code, "?")))
        return False
    say("accepted: %s; the QP is now in %s" % (what, state(qp)))
    return True


def main():
    options("Lab 2: take an RC QP through its states by hand.")
    a, b = Side("uroce0"), Side("uroce1")
    cap = QPCap(max_send_wr=4, max_recv_wr=4)
    qp = QP(a.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=a.cq, rcq=a.cq, cap=cap))
    peer = QP(b.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=b.cq, rcq=b.cq, cap=cap))
    say("created: uroce0 QP %d (RC) in %s; its peer will be uroce1 QP %d" % (
        qp.qp_num, state(qp), peer.qp_num))
    pause("uroce qp uroce0 %d: state RESET, no transition yet" % qp.qp_num)

    # 1. A state cannot be skipped: RESET goes to INIT (or stays RESET) only.
    modify(qp, QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    # 2. RESET -> INIT needs the port, the P_Key index and the access flags.
    modify(qp, QPAttr(qp_state=e.IBV_QPS_INIT), e.IBV_QP_STATE)
    init = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    init.pkey_index = 0
    init.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
    modify(qp, init, e.IBV_QP_STATE | e.IBV_QP_PORT | e.IBV_QP_PKEY_INDEX |
           e.IBV_QP_ACCESS_FLAGS)
    pause("uroce qp uroce0 %d: INIT<RESET, one transition" % qp.qp_num)

    # A receive may be posted from INIT on; it waits in the receive queue...
    mr = MR(a.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    qp.post_recv(RecvWR(wr_id=42, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    say("posted:   one receive (wr_id 42)")
    # ...but a send must wait for RTS.
    try:
        qp.post_send(SendWR(wr_id=43, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
        say("posted:   a SEND in %s" % state(qp))
    except PyverbsRDMAError as error:
        say("refused:  ibv_post_send in %s: errno %d (%s)" % (
            state(qp), error.error_code, errno.errorcode.get(error.error_code, "?")))

    # 3. INIT -> RTR: the responder's side. Without the address vector
    #    (IBV_QP_AV: where the peer is) the QP cannot receive.
    rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
    rtr.path_mtu = e.IBV_MTU_1024
    rtr.dest_qp_num = peer.qp_num
    rtr.rq_psn = 1000
    rtr.max_dest_rd_atomic = 1
    rtr.min_rnr_timer = 12
    rtr_mask = (e.IBV_QP_STATE | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
                e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    modify(qp, rtr, rtr_mask)
    rtr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=b.gid, sgid_index=0))
    modify(qp, rtr, rtr_mask | e.IBV_QP_AV)
    pause("uroce qp uroce0 %d: RTR<INIT, peer 127.0.0.2/%d, RQ_PSN 1000" % (
        qp.qp_num, peer.qp_num))

    # 4. RTR -> RTS: the requester's side needs its timers and first PSN.
    modify(qp, QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.sq_psn = 2000
    rts.timeout = 14
    rts.retry_cnt = 7
    rts.rnr_retry = 7
    rts.max_rd_atomic = 1
    modify(qp, rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT |
           e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
    pause("uroce qp uroce0 %d: RTS<RTR, SQ_PSN 2000, retry 7/infinite" % qp.qp_num)

    # 5. No way back to INIT from RTS...
    modify(qp, QPAttr(qp_state=e.IBV_QPS_INIT), e.IBV_QP_STATE)
    # 6. ...but every state may go to ERR. Posted work requests are flushed.
    modify(qp, QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    say("completion: " + wc_text(poll(a.cq)))
    pause("uroce qp uroce0 %d: ERR<RTS, last error names ibv_modify_qp" % qp.qp_num)

    # 7. ERR leads only to RESET; RESET forgets the connection.
    modify(qp, QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    modify(qp, QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    pause("uroce qp uroce0 %d: RESET<ERR and every transition it took" % qp.qp_num)
    say("done: uroce0 QP %d is in %s" % (qp.qp_num, state(qp)))


if __name__ == "__main__":
    main()
