"""A random sequence of verbs on uroce0 (argv: seed, steps): PDs, MRs, CQs
and QPs made and destroyed with random arguments, QPs moved to random states
with random attributes, random work requests posted and CQs polled. A verb
may be refused, but only with an errno its man page allows; anything else
exits 1 naming the step. The process leaves its objects for exit to clean
up (the daemon must then hold nothing)."""

import errno
import random
import sys

from checks import e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR, RecvWR

# What the man pages let each kind of verb fail with.
CREATE = {errno.EINVAL, errno.ENOMEM, errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS}
DESTROY = {errno.EBUSY, errno.EINVAL}
MODIFY = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOMEM}
POST = {errno.EINVAL, errno.ENOMEM, errno.EOPNOTSUPP}

rng = random.Random(int(sys.argv[1]))
steps = int(sys.argv[2])
ctx = Context(name="uroce0")
pds, mrs, cqs, qps = [], [], [], []
users = {}  # id(object) -> the objects it was made on
refused = 0


def attempt(step, what, allowed, action):
    """Runs one verb; a refusal must carry an allowed errno."""
    global refused
    try:
        return action()
    except PyverbsRDMAError as ex:
        if ex.error_code not in allowed:
            print("step %d: %s failed with %s (%d), not one of %s: %s" % (
                step, what, errno.errorcode.get(ex.error_code, "?"), ex.error_code,
                sorted(errno.errorcode[a] for a in allowed), ex))
            sys.exit(1)
    except PyverbsError:
        pass  # refused by pyverbs itself before any verb ran
    refused += 1
    return None


def random_bits(limit):
    return rng.getrandbits(limit.bit_length()) & limit


def random_qp_attr():
    attr = QPAttr()
    attr.qp_state = rng.choice((e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS,
                                e.IBV_QPS_SQD, e.IBV_QPS_SQE, e.IBV_QPS_ERR))
    attr.pkey_index = rng.choice((0, 0, 1, 200))
    attr.port_num = rng.choice((1, 1, 0, 2))
    attr.qkey = rng.getrandbits(32)
    attr.qp_access_flags = random_bits(0x7f)
    attr.path_mtu = rng.choice((1, 2, 3, 4, 5, 0, 7))
    attr.dest_qp_num = rng.getrandbits(24)
    attr.rq_psn = rng.getrandbits(24)
    attr.sq_psn = rng.getrandbits(24)
    attr.max_rd_atomic = rng.choice((0, 1, 16, 200))
    attr.max_dest_rd_atomic = rng.choice((0, 1, 16, 200))
    attr.min_rnr_timer = rng.getrandbits(5)
    attr.timeout = rng.getrandbits(5)
    attr.retry_cnt = rng.getrandbits(3)
    attr.rnr_retry = rng.getrandbits(3)
    mask = rng.getrandbits(21) | e.IBV_QP_STATE
    return attr, mask & ~(e.IBV_QP_AV | e.IBV_QP_ALT_PATH)


def step_once(step):
    choice = rng.random()
    if choice < 0.1 or not pds:
        pd = attempt(step, "alloc_pd", CREATE, lambda: PD(ctx))
        if pd:
            pds.append(pd)
    elif choice < 0.2:
        length = rng.choice((1, 64, 4096, 65536, 1 << 20))
        access = (random_bits(0x1fff) & ~e.IBV_ACCESS_ON_DEMAND if rng.random() < 0.5 else
                  e.IBV_ACCESS_LOCAL_WRITE | random_bits(0xe))
        pd = rng.choice(pds)
        mr = attempt(step, "reg_mr", CREATE, lambda: MR(pd, length, access))
        if mr:
            mrs.append(mr)
            users[id(mr)] = (pd,)
    elif choice < 0.3:
        cqe = rng.choice((1, 16, 255, 4096, 65535, 65536, 0))
        cq = attempt(step, "create_cq", CREATE, lambda: CQ(ctx, cqe, None, None, 0))
        if cq:
            cqs.append(cq)
    elif choice < 0.4 and cqs:
        cap = QPCap(max_send_wr=rng.choice((0, 1, 16, 16384, 16385)),
                    max_recv_wr=rng.choice((0, 1, 16, 16384, 16385)),
                    max_send_sge=rng.choice((0, 1, 32, 33)),
                    max_recv_sge=rng.choice((0, 1, 32, 33)),
                    max_inline_data=rng.choice((0, 64, 1024, 100000)))
        qp_type = rng.choice((e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD))
        scq, rcq = rng.choice(cqs), rng.choice(cqs)
        init = QPInitAttr(qp_type=qp_type, scq=scq, rcq=rcq, cap=cap)
        pd = rng.choice(pds)
        qp = attempt(step, "create_qp", CREATE, lambda: QP(pd, init))
        if qp:
            qps.append(qp)
            users[id(qp)] = (pd, scq, rcq)
    elif choice < 0.6 and qps:
        attr, mask = random_qp_attr()
        attempt(step, "modify_qp", MODIFY, lambda: rng.choice(qps).modify(attr, mask))
    elif choice < 0.75 and qps:
        qp = rng.choice(qps)
        sges = [SGE(mr.buf, rng.choice((0, 1, mr.length, mr.length + 1)),
                    rng.choice((mr.lkey, mr.lkey ^ 0x100)))
                for mr in rng.sample(mrs, min(len(mrs), rng.randrange(0, 3)))]
        if rng.random() < 0.5:
            wr = SendWR(wr_id=step, opcode=rng.choice((e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE,
                                                       e.IBV_WR_RDMA_READ, e.IBV_WR_SEND_WITH_IMM,
                                                       e.IBV_WR_ATOMIC_FETCH_AND_ADD)),
                        num_sge=len(sges), sg=sges or None,
                        # Inline data is read by the provider in this process:
                        # with a bad SGE that would be the program's own fault.
                        send_flags=random_bits(0x1f) & ~e.IBV_SEND_INLINE)
            attempt(step, "post_send", POST, lambda: qp.post_send(wr))
        else:
            wr = RecvWR(wr_id=step, num_sge=len(sges), sg=sges or None)
            attempt(step, "post_recv", POST, lambda: qp.post_recv(wr))
    elif choice < 0.85 and cqs:
        attempt(step, "poll_cq", set(), lambda: rng.choice(cqs).poll(rng.choice((1, 16))))
    else:
        # pyverbs destroys what depends on an object with it: only objects
        # nothing uses are destroyed, so that no closed one is used again.
        in_use = {id(o) for deps in users.values() for o in deps}
        pool = rng.choice([p for p in (qps, mrs, cqs, pds) if p] or [pds])
        free = [o for o in pool if id(o) not in in_use]
        if free:
            victim = rng.choice(free)
            pool.remove(victim)
            users.pop(id(victim), None)
            attempt(step, "destroy", DESTROY, victim.close)


for step in range(steps):
    try:
        step_once(step)
    except PyverbsError:
        pass  # pyverbs itself refused (a value it cannot convert)
print("ok: %d steps, %d refused, %d PDs %d MRs %d CQs %d QPs left for exit" % (
    steps, refused, len(pds), len(mrs), len(cqs), len(qps)))
