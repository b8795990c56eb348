/* A verb program that a fuzzer writes: the bytes of the file named by
 * argv[1] are a sequence of 8-byte operations (op, a, b, c, then a 32-bit
 * d), each one verb or a few, on two contexts (uroce0 and uroce1) and the
 * objects made so far, named by index modulo how many there are. Every
 * byte string is a valid program: a verb the device refuses is part of it,
 * and the program never fails itself. The coverage-guided campaign
 * (tests/system/campaign.py, docs/fuzzing.md) mutates these bytes; the
 * suite also uses the program as the small verb program of the harness
 * loop. Exits 0 after the last operation, leaving its objects to the exit. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_OBJECTS 16
#define MAX_OPS 256
#define ARENA (1 << 20)
#define POLL_SPINS 300

struct op {
    uint8_t code, a, b, c;
    uint32_t d;
};

struct qp_slot {
    struct ibv_qp* qp;
    int ctx;  // which context: 0 uroce0, 1 uroce1
    int pd;
};

static struct ibv_context* ctx[2];
static struct ibv_pd* pds[MAX_OBJECTS];
static int pd_ctx[MAX_OBJECTS];
static struct ibv_mr* mrs[MAX_OBJECTS];
static int mr_pd[MAX_OBJECTS];
static struct ibv_cq* cqs[MAX_OBJECTS];
static int cq_ctx[MAX_OBJECTS];
static struct ibv_srq* srqs[MAX_OBJECTS];
static struct qp_slot qps[MAX_OBJECTS];
static struct ibv_ah* ahs[MAX_OBJECTS];
static struct ibv_mw* mws[MAX_OBJECTS];
static int npd, nmr, ncq, nsrq, nqp, nah, nmw;
static char* arena;

static const enum ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RC,
                                          IBV_QPT_UD, IBV_QPT_RAW_PACKET};
static const enum ibv_wr_opcode kOpcodes[] = {
    IBV_WR_SEND,          IBV_WR_SEND_WITH_IMM,      IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV, IBV_WR_LOCAL_INV,
    IBV_WR_BIND_MW};
static const int kAccess[] = {IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE,
                              IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC,
                              IBV_ACCESS_MW_BIND};

#define PICK(array, count, index) ((count) ? (array)[(index) % (count)] : NULL)

static int access_of(uint8_t bits) {
    int access = 0;
    for (unsigned i = 0; i < sizeof(kAccess) / sizeof(kAccess[0]); ++i) {
        if (bits & (1u << i)) {
            access |= kAccess[i];
        }
    }
    // Remote write and atomics need local write (else EINVAL): mostly give it.
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(bits & 0x80)) {
        access |= IBV_ACCESS_LOCAL_WRITE;
    }
    return access;
}

static void make_pd(const struct op* o) {
    if (npd < MAX_OBJECTS && ctx[o->a & 1]) {
        struct ibv_pd* pd = ibv_alloc_pd(ctx[o->a & 1]);
        if (pd) {
            pd_ctx[npd] = o->a & 1;
            pds[npd++] = pd;
        }
    }
}

static void make_mr(const struct op* o) {
    if (nmr < MAX_OBJECTS && npd) {
        const int pd = o->a % npd;
        const size_t offset = (o->d >> 16) % (ARENA / 2);
        const size_t length = (o->d & 0xffff) + 1;
        struct ibv_mr* mr = ibv_reg_mr(pds[pd], arena + offset, length, access_of(o->b));
        if (mr) {
            mr_pd[nmr] = pd;
            mrs[nmr++] = mr;
        }
    }
}

static void make_cq(const struct op* o) {
    if (ncq < MAX_OBJECTS && ctx[o->a & 1]) {
        struct ibv_cq* cq = ibv_create_cq(ctx[o->a & 1], (o->b % 64) + 1, NULL, NULL, 0);
        if (cq) {
            cq_ctx[ncq] = o->a & 1;
            cqs[ncq++] = cq;
        }
    }
}

static void make_srq(const struct op* o) {
    if (nsrq < MAX_OBJECTS && npd) {
        struct ibv_srq_init_attr init = {.attr = {.max_wr = (o->b % 32) + 1,
                                                  .max_sge = (o->c % 2) + 1,
                                                  .srq_limit = 0}};
        struct ibv_srq* srq = ibv_create_srq(pds[o->a % npd], &init);
        if (srq) {
            srqs[nsrq++] = srq;
        }
    }
}

static void make_qp(const struct op* o) {
    if (nqp >= MAX_OBJECTS || !npd || !ncq) {
        return;
    }
    const int pd = o->a % npd;
    struct ibv_cq* cq = cqs[o->b % ncq];
    struct ibv_qp_init_attr init = {
        .send_cq = cq,
        .recv_cq = cq,
        .srq = (o->d & 0x100) ? PICK(srqs, nsrq, o->c) : NULL,
        .cap = {.max_send_wr = (o->d & 0xf) + 1,
                .max_recv_wr = ((o->d >> 4) & 0xf) + 1,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = (o->d & 0x200) ? 64 : 0},
        .qp_type = kTypes[o->c % (sizeof(kTypes) / sizeof(kTypes[0]))],
        .sq_sig_all = (o->d >> 10) & 1,
    };
    struct ibv_qp* qp = ibv_create_qp(pds[pd], &init);
    if (qp) {
        qps[nqp].qp = qp;
        qps[nqp].ctx = pd_ctx[pd];
        qps[nqp++].pd = pd;
    }
}

static void gid_of(int which, union ibv_gid* gid) {
    memset(gid, 0, sizeof(*gid));
    ibv_query_gid(ctx[which], 1, 0, gid);
}

/* Moves `qp` through INIT, RTR and RTS towards `peer` (itself allowed),
 * each step with the attributes it needs; `flags` varies them. */
static void connect_qp(struct qp_slot* s, const struct qp_slot* peer, uint8_t flags, uint32_t d) {
    struct ibv_qp* qp = s->qp;
    const int ud = qp->qp_type == IBV_QPT_UD;
    const int reliable = qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_XRC_SEND ||
                         qp->qp_type == IBV_QPT_XRC_RECV;
    const int raw = qp->qp_type == IBV_QPT_RAW_PACKET;
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
    attr.qp_access_flags = access_of(flags);
    int mask = IBV_QP_STATE | IBV_QP_PORT;
    if (!raw) {
        mask |= IBV_QP_PKEY_INDEX | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
    }
    if (ibv_modify_qp(qp, &attr, mask)) {
        return;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (!ud && !raw) {
        attr.path_mtu = IBV_MTU_256 + (d % 5);
        attr.dest_qp_num = peer->qp->qp_num;
        attr.rq_psn = d & 0xffffff;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = 1;
        gid_of(peer->ctx, &attr.ah_attr.grh.dgid);
        attr.max_dest_rd_atomic = (flags >> 5) & 3;
        attr.min_rnr_timer = 1;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (reliable) {
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
    }
    if (ibv_modify_qp(qp, &attr, mask) || (flags & 0x10)) {
        return;  // some stay in RTR: receive only
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = d & 0xffffff;
    mask = IBV_QP_STATE;
    if (!raw) {
        mask |= IBV_QP_SQ_PSN;
    }
    if (reliable) {
        attr.timeout = 8;  // about 1 ms: a lost packet costs little time
        attr.retry_cnt = flags & 7;
        attr.rnr_retry = (flags >> 3) & 1;
        attr.max_rd_atomic = (flags >> 6) & 3;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    ibv_modify_qp(qp, &attr, mask);
}

static void connect_pair(const struct op* o) {
    if (!nqp) {
        return;
    }
    struct qp_slot* a = &qps[o->a % nqp];
    struct qp_slot* b = &qps[o->b % nqp];
    connect_qp(a, b, o->c, o->d);
    if (b != a) {
        connect_qp(b, a, o->c, o->d);
    }
}

/* Any state, any mask, attributes from the bytes: mostly refusals. */
static void modify_raw(const struct op* o) {
    if (!nqp) {
        return;
    }
    struct ibv_qp_attr attr;
    memset(&attr, o->c & 1 ? 0 : o->c, sizeof(attr));  // zeros: the transition's own refusals
    attr.qp_state = o->b % 7;
    attr.cur_qp_state = (o->c >> 4) % 7;
    attr.port_num = 1;
    attr.path_mtu = IBV_MTU_1024;
    ibv_modify_qp(qps[o->a % nqp].qp, &attr, (int)(o->d & 0x1fffff) | IBV_QP_STATE);
}

static struct ibv_ah* ah_to(int which, int pd) {
    struct ibv_ah_attr attr = {.is_global = 1, .port_num = 1};
    gid_of(which, &attr.grh.dgid);
    return ibv_create_ah(pds[pd], &attr);
}

static void make_ah(const struct op* o) {
    if (nah < MAX_OBJECTS && npd) {
        struct ibv_ah* ah = ah_to(o->b & 1, o->a % npd);
        if (ah) {
            ahs[nah++] = ah;
        }
    }
}

static void post_send(const struct op* o) {
    if (!nqp || !nmr) {
        return;
    }
    struct qp_slot* s = &qps[o->a % nqp];
    struct ibv_mr* local = mrs[o->c % nmr];
    struct ibv_mr* remote = mrs[(o->c >> 4) % nmr];
    const uint32_t length = (o->d & 0x7fff) % (local->length + 64);
    struct ibv_sge sge = {.addr = (uintptr_t)local->addr, .length = length, .lkey = local->lkey};
    struct ibv_send_wr wr = {.wr_id = o->d, .sg_list = &sge, .num_sge = length ? 1 : 0};
    wr.opcode = kOpcodes[o->b % (sizeof(kOpcodes) / sizeof(kOpcodes[0]))];
    wr.send_flags = (o->d & 0x8000 ? IBV_SEND_SIGNALED : 0) |
                    (o->d & 0x10000 ? IBV_SEND_SOLICITED : 0) |
                    (o->d & 0x20000 && length <= 64 ? IBV_SEND_INLINE : 0) |
                    (o->d & 0x40000 ? IBV_SEND_FENCE : 0);
    wr.imm_data = htonl(o->d);
    const uint64_t offset = (o->d >> 20) & 0x7f8;  // 8-byte aligned for atomics
    if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        sge.length = 8;
        wr.wr.atomic.remote_addr = (uintptr_t)remote->addr + (offset % (remote->length | 8));
        wr.wr.atomic.rkey = remote->rkey;
        wr.wr.atomic.compare_add = o->d;
        wr.wr.atomic.swap = o->c;
    } else if (wr.opcode == IBV_WR_SEND_WITH_INV || wr.opcode == IBV_WR_LOCAL_INV) {
        wr.invalidate_rkey = nmw && (o->d & 1) ? mws[o->b % nmw]->rkey : remote->rkey;
    } else if (wr.opcode == IBV_WR_BIND_MW) {
        if (!nmw) {
            return;
        }
        wr.bind_mw.mw = mws[o->b % nmw];
        wr.bind_mw.rkey = ibv_inc_rkey(wr.bind_mw.mw->rkey);
        wr.bind_mw.bind_info.mr = local;
        wr.bind_mw.bind_info.addr = (uintptr_t)local->addr;
        wr.bind_mw.bind_info.length = length;
        wr.bind_mw.bind_info.mw_access_flags = access_of(o->c) & ~IBV_ACCESS_MW_BIND;
    } else {
        wr.wr.rdma.remote_addr = (uintptr_t)remote->addr + offset;
        wr.wr.rdma.rkey = (o->d & 0x80000) ? o->d : remote->rkey;
    }
    if (s->qp->qp_type == IBV_QPT_UD) {
        wr.wr.ud.ah = PICK(ahs, nah, o->b);
        if (!wr.wr.ud.ah) {
            return;
        }
        wr.wr.ud.remote_qpn = qps[(o->c >> 2) % nqp].qp->qp_num;
        wr.wr.ud.remote_qkey = 0x11111111;
    }
    struct ibv_send_wr* bad;
    ibv_post_send(s->qp, &wr, &bad);
}

static void post_recv(const struct op* o) {
    if (!nmr) {
        return;
    }
    struct ibv_mr* mr = mrs[o->c % nmr];
    struct ibv_sge sge = {.addr = (uintptr_t)mr->addr,
                          .length = (o->d & 0xffff) % (mr->length + 64),
                          .lkey = (o->d & 0x10000) ? o->d : mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = o->d, .sg_list = &sge, .num_sge = 1}, *bad;
    if (o->b & 1 && nsrq) {
        ibv_post_srq_recv(srqs[o->a % nsrq], &wr, &bad);
    } else if (nqp) {
        ibv_post_recv(qps[o->a % nqp].qp, &wr, &bad);
    }
}

static void poll_cq(const struct op* o) {
    if (!ncq) {
        return;
    }
    struct ibv_wc wc[8];
    int wanted = (o->b % 8) + 1;
    for (int spin = 0; spin < POLL_SPINS && wanted > 0; ++spin) {
        const int n = ibv_poll_cq(cqs[o->a % ncq], wanted, wc);
        if (n < 0) {
            return;
        }
        wanted -= n;
    }
}

static void destroy(const struct op* o) {
    switch (o->a % 6) {
        case 0:
            if (nqp && !ibv_destroy_qp(qps[nqp - 1].qp)) {
                --nqp;
            }
            break;
        case 1:
            if (nmr && !ibv_dereg_mr(mrs[nmr - 1])) {
                --nmr;
            }
            break;
        case 2:
            if (ncq && !ibv_destroy_cq(cqs[ncq - 1])) {
                --ncq;
            }
            break;
        case 3:
            if (nsrq && !ibv_destroy_srq(srqs[nsrq - 1])) {
                --nsrq;
            }
            break;
        case 4:
            if (nah && !ibv_destroy_ah(ahs[nah - 1])) {
                --nah;
            }
            break;
        default:
            if (npd && !ibv_dealloc_pd(pds[npd - 1])) {  // EBUSY while used
                --npd;
            }
    }
}

static void memory_windows(const struct op* o) {
    if (o->b & 1 && nmw) {
        if (!ibv_dealloc_mw(mws[nmw - 1])) {
            --nmw;
        }
    } else if (nmw < MAX_OBJECTS && npd) {
        struct ibv_mw* mw = ibv_alloc_mw(pds[o->a % npd], o->c & 1 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
        if (mw) {
            mws[nmw++] = mw;
        }
    }
}

static void misc(const struct op* o) {
    switch (o->a % 6) {
        case 0:
            if (ncq) {
                ibv_resize_cq(cqs[o->b % ncq], (o->d % 128) + 1);
            }
            break;
        case 1:
            if (nsrq) {
                struct ibv_srq_attr attr = {.max_wr = o->d % 64, .srq_limit = o->c % 16};
                ibv_modify_srq(srqs[o->b % nsrq], &attr, (o->d >> 8) & 3);
            }
            break;
        case 2:
            if (nqp) {
                struct ibv_qp_attr attr;
                struct ibv_qp_init_attr init;
                ibv_query_qp(qps[o->b % nqp].qp, &attr, (int)o->d, &init);
            }
            break;
        case 3:
            if (nmr) {
                ibv_rereg_mr(mrs[o->b % nmr], (int)(o->d & 7),
                             npd ? pds[o->c % npd] : NULL, arena + (o->d >> 12) % ARENA / 2,
                             (o->d & 0xfff) + 1, access_of(o->c));
            }
            break;
        case 4:
            if (nqp) {
                union ibv_gid group;
                memset(&group, 0, sizeof(group));
                group.raw[0] = 0xff;
                group.raw[15] = o->c;
                if (o->d & 1) {
                    ibv_detach_mcast(qps[o->b % nqp].qp, &group, 0);
                } else {
                    ibv_attach_mcast(qps[o->b % nqp].qp, &group, 0);
                }
            }
            break;
        default: {
            struct ibv_async_event event;
            struct pollfd p = {.fd = ctx[o->b & 1]->async_fd, .events = POLLIN};
            if (poll(&p, 1, 0) == 1 && !ibv_get_async_event(ctx[o->b & 1], &event)) {
                ibv_ack_async_event(&event);
            }
        }
    }
}

/* rdma_cm: a listener and a client in this process, connected, then
 * rejected, refused or disconnected as the bytes say. */
static struct rdma_cm_event* next_event(struct rdma_event_channel* channel, int ms) {
    struct pollfd p = {.fd = channel->fd, .events = POLLIN};
    struct rdma_cm_event* event = NULL;
    if (poll(&p, 1, ms) == 1 && rdma_get_cm_event(channel, &event) == 0) {
        return event;
    }
    return NULL;
}

static enum rdma_cm_event_type take_event(struct rdma_event_channel* channel,
                                          struct rdma_cm_id** id) {
    struct rdma_cm_event* event = next_event(channel, 50);
    if (!event) {
        return (enum rdma_cm_event_type)-1;
    }
    const enum rdma_cm_event_type type = event->event;
    if (id) {
        *id = event->id;
    }
    rdma_ack_cm_event(event);
    return type;
}

static void cm_pair(const struct op* o) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        return;
    }
    const enum rdma_port_space space = o->a & 1 ? RDMA_PS_UDP : RDMA_PS_TCP;
    struct rdma_cm_id *listener = NULL, *client = NULL, *server = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons(20000 + (getpid() + o->d) % 20000)};
    addr.sin_addr.s_addr = htonl(o->b & 1 ? 0x7f000002 : 0x7f000001);
    if (rdma_create_id(channel, &listener, NULL, space) ||
        rdma_bind_addr(listener, (struct sockaddr*)&addr) || rdma_listen(listener, 4) ||
        rdma_create_id(channel, &client, NULL, space)) {
        goto out;
    }
    if (o->c & 0x40) {
        addr.sin_port = htons(ntohs(addr.sin_port) + 1);  // nobody listens there
    }
    if (rdma_resolve_addr(client, NULL, (struct sockaddr*)&addr, 200) ||
        take_event(channel, NULL) != RDMA_CM_EVENT_ADDR_RESOLVED ||
        rdma_resolve_route(client, 200) ||
        take_event(channel, NULL) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
        goto out;
    }
    struct rdma_conn_param param = {.responder_resources = 1, .initiator_depth = 1,
                                    .retry_count = 1, .rnr_retry_count = 1};
    if (rdma_connect(client, &param)) {
        goto out;
    }
    struct rdma_cm_id* requested = NULL;
    if (take_event(channel, &requested) != RDMA_CM_EVENT_CONNECT_REQUEST) {
        goto out;  // the event was the client's (REJECTED, UNREACHABLE)
    }
    server = requested;
    if (o->c & 1) {
        rdma_reject(server, NULL, 0);
    } else {
        rdma_accept(server, &param);
    }
    for (int i = 0; i < 2; ++i) {  // ESTABLISHED or REJECTED, the client's and the server's
        struct rdma_cm_id* id = NULL;
        if (take_event(channel, &id) == RDMA_CM_EVENT_CONNECT_RESPONSE) {
            rdma_establish(id);  // without a QP, the RTU is the program's to send
        }
    }
    if (space == RDMA_PS_TCP && !(o->c & 1)) {
        rdma_disconnect(o->c & 2 ? server : client);
        take_event(channel, NULL);
        take_event(channel, NULL);
    }
out:
    if (server && !(o->c & 4)) {
        rdma_destroy_id(server);
    }
    if (client) {
        rdma_destroy_id(client);
    }
    if (listener) {
        rdma_destroy_id(listener);
    }
    if (!(o->c & 4)) {
        rdma_destroy_event_channel(channel);  // else the exit closes it
    }
}


/* XRC: a domain, an XRC SRQ and an XRC_TGT QP on one context, an XRC_INI
 * QP on the other, connected; a SEND, WRITE, READ or atomic to the SRQ.
 * With a's bit 2, the XRC_TGT QP is given what other QP types take (the
 * last CQ made, the last SRQ, caps), which it ignores: a fuzzer's programs
 * carry attributes over so, and destroying those objects must not matter. */
static void xrc(const struct op* o) {
    if (!nmr || !ncq) {
        return;
    }
    const int target = o->a & 1, initiator = !target;
    struct ibv_xrcd_init_attr domain = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
                                                     IBV_XRCD_INIT_ATTR_OFLAGS,
                                        .fd = -1, .oflags = O_CREAT};
    struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx[target], &domain);
    struct ibv_pd* tgt_pd = ibv_alloc_pd(ctx[target]);
    struct ibv_pd* ini_pd = ibv_alloc_pd(ctx[initiator]);
    struct ibv_cq* tgt_cq = ibv_create_cq(ctx[target], 8, NULL, NULL, 0);
    struct ibv_cq* ini_cq = ibv_create_cq(ctx[initiator], 8, NULL, NULL, 0);
    if (!xrcd || !tgt_pd || !ini_pd || !tgt_cq || !ini_cq) {
        return;
    }
    struct ibv_srq_init_attr_ex srq_attr = {
        .attr = {.max_wr = 4, .max_sge = 1},
        .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_PD,
        .srq_type = IBV_SRQT_XRC, .pd = tgt_pd, .xrcd = xrcd, .cq = tgt_cq};
    struct ibv_srq* srq = ibv_create_srq_ex(ctx[target], &srq_attr);
    struct ibv_qp_init_attr_ex tgt_attr = {.qp_type = IBV_QPT_XRC_RECV,
                                           .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
    if (o->a & 2) {
        tgt_attr.send_cq = tgt_attr.recv_cq = cqs[ncq - 1];
        tgt_attr.srq = nsrq ? srqs[nsrq - 1] : NULL;
        tgt_attr.cap = (struct ibv_qp_cap){.max_send_wr = 4, .max_recv_wr = 4,
                                           .max_send_sge = 1, .max_recv_sge = 1};
    }
    struct ibv_qp* tgt = ibv_create_qp_ex(ctx[target], &tgt_attr);
    struct ibv_qp_init_attr_ex ini_attr = {
        .qp_type = IBV_QPT_XRC_SEND, .send_cq = ini_cq, .recv_cq = ini_cq,
        .cap = {.max_send_wr = 4, .max_send_sge = 1}, .comp_mask = IBV_QP_INIT_ATTR_PD,
        .pd = ini_pd};
    struct ibv_qp* ini = ibv_create_qp_ex(ctx[initiator], &ini_attr);
    if (!srq || !tgt || !ini || nqp + 2 > MAX_OBJECTS) {
        return;
    }
    qps[nqp++] = (struct qp_slot){tgt, target, 0};
    qps[nqp++] = (struct qp_slot){ini, initiator, 0};
    connect_qp(&qps[nqp - 2], &qps[nqp - 1], o->c | 0x0e, o->d);
    connect_qp(&qps[nqp - 1], &qps[nqp - 2], (o->c | 0x07) & ~0x10, o->d);
    struct ibv_mr* mr = ibv_reg_mr(tgt_pd, arena + ARENA / 2, 4096,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    struct ibv_mr* local = ibv_reg_mr(ini_pd, arena + ARENA / 2 + 8192, 4096,
                                      IBV_ACCESS_LOCAL_WRITE);
    if (!mr || !local) {
        return;
    }
    struct ibv_sge recv_sge = {.addr = (uintptr_t)mr->addr, .length = 4096, .lkey = mr->lkey};
    struct ibv_recv_wr recv = {.sg_list = &recv_sge, .num_sge = 1}, *bad_recv;
    ibv_post_srq_recv(srq, &recv, &bad_recv);
    struct ibv_sge sge = {.addr = (uintptr_t)local->addr, .length = (o->d % 3000) + 8,
                          .lkey = local->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.opcode = kOpcodes[o->b % 7];  // SEND, immediate, WRITEs, READ, atomics
    if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        sge.length = 8;
        wr.wr.atomic.remote_addr = (uintptr_t)mr->addr;
        wr.wr.atomic.rkey = mr->rkey;
    } else {
        wr.wr.rdma.remote_addr = (uintptr_t)mr->addr;
        wr.wr.rdma.rkey = o->c & 0x80 ? 0 : mr->rkey;
    }
    uint32_t srqn = 0;
    ibv_get_srq_num(srq, &srqn);
    wr.qp_type.xrc.remote_srqn = o->c & 0x40 ? srqn + 1 : srqn;
    if (!ibv_post_send(ini, &wr, &bad)) {
        struct ibv_wc wc;
        for (int spin = 0; spin < POLL_SPINS * 10 && ibv_poll_cq(ini_cq, 1, &wc) == 0; ++spin) {
        }
    }
}

/* CRC-32 (IEEE), as zlib computes it: the ICRC's. */
static uint32_t crc32_of(const uint8_t* bytes, size_t length) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < length; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) {
            crc = (crc >> 1) ^ (0xedb88320u & -(crc & 1));
        }
    }
    return ~crc;
}

/* A datagram forged from outside the daemon, as anyone on the network can
 * send one: any opcode byte, to one of this program's QPs (or QP 1, or any
 * number), from a device's own address, with a valid ICRC (IBA A17.4.1,
 * IPv4 with ID 0 and DF) unless the bytes say otherwise. The daemon's UDP
 * port is $UROCE_FORGE_PORT (default 4791). */
static void forge(const struct op* o) {
    const char* port_text = getenv("UROCE_FORGE_PORT");
    const uint16_t port = port_text ? (uint16_t)atoi(port_text) : 4791;
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        return;
    }
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr = htonl(o->c & 1 ? 0x7f000002 : 0x7f000001);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(o->a & 1 ? 0x7f000002 : 0x7f000001);
    socklen_t length = sizeof(from);
    if (bind(fd, (struct sockaddr*)&from, sizeof(from)) ||
        getsockname(fd, (struct sockaddr*)&from, &length)) {
        close(fd);
        return;
    }
    uint8_t packet[8 + 20 + 8 + 12 + 28 + 64 + 4];  // pseudo-header room, then the datagram
    uint8_t* udp_payload = packet + 8 + 20 + 8;
    const uint32_t qpn = (o->a & 6) == 0 ? 1 : nqp && (o->a & 6) != 6 ? qps[o->a % nqp].qp->qp_num
                                                                       : o->d >> 8;
    const size_t extra = (o->c >> 1) % 93;  // extension headers and payload
    const size_t bytes = 12 + extra;
    udp_payload[0] = o->b;  // the opcode
    udp_payload[1] = o->c & 0x70;
    udp_payload[2] = 0xff;
    udp_payload[3] = o->c & 0x8 ? (uint8_t)o->d : 0xff;  // P_Key
    udp_payload[4] = 0;
    udp_payload[5] = (uint8_t)(qpn >> 16);
    udp_payload[6] = (uint8_t)(qpn >> 8);
    udp_payload[7] = (uint8_t)qpn;
    udp_payload[8] = o->d & 0x80 ? 0x80 : 0;  // AckReq
    udp_payload[9] = (uint8_t)(o->d >> 16);
    udp_payload[10] = (uint8_t)(o->d >> 8);
    udp_payload[11] = (uint8_t)o->d;
    uint32_t state = o->d;
    for (size_t i = 12; i < bytes; ++i) {
        state = state * 1103515245u + 12345u;
        udp_payload[i] = (uint8_t)(state >> 16);
    }
    const uint16_t udp_length = (uint16_t)(8 + bytes + 4);
    const uint16_t ip_length = (uint16_t)(20 + udp_length);
    uint8_t* pseudo = packet;
    memset(pseudo, 0xff, 8);
    const uint8_t ip[20] = {0x45, 0xff, (uint8_t)(ip_length >> 8), (uint8_t)ip_length, 0, 0, 0x40,
                            0, 0xff, 17, 0xff, 0xff};
    memcpy(pseudo + 8, ip, sizeof(ip));
    memcpy(pseudo + 8 + 12, &from.sin_addr, 4);
    memcpy(pseudo + 8 + 16, &to.sin_addr, 4);
    uint8_t* udp = pseudo + 28;
    memcpy(udp, &from.sin_port, 2);
    memcpy(udp + 2, &to.sin_port, 2);
    udp[4] = (uint8_t)(udp_length >> 8);
    udp[5] = (uint8_t)udp_length;
    udp[6] = udp[7] = 0xff;
    const uint8_t resv = udp_payload[4];
    udp_payload[4] = 0xff;  // masked in the ICRC
    uint32_t icrc = crc32_of(pseudo, 8 + 20 + 8 + bytes);
    udp_payload[4] = resv;
    if (o->c & 0x80) {
        icrc ^= 1;  // a broken ICRC
    }
    for (int i = 0; i < 4; ++i) {
        udp_payload[bytes + i] = (uint8_t)(icrc >> (8 * i));
    }
    sendto(fd, udp_payload, bytes + 4, 0, (struct sockaddr*)&to, sizeof(to));
    close(fd);
}

static void (*const kOps[])(const struct op*) = {
    make_pd,   make_mr,   make_cq,   make_qp,  make_srq,       connect_pair, modify_raw,
    make_ah,   post_send, post_send, post_recv, post_recv,     poll_cq,      poll_cq,
    destroy,   memory_windows, misc, cm_pair, forge,     xrc,
};

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: verb_program FILE\n");
        return 2;
    }
    FILE* file = fopen(argv[1], "rb");
    if (!file) {
        perror(argv[1]);
        return 2;
    }
    static struct op program[MAX_OPS];
    const size_t count = fread(program, sizeof(program[0]), MAX_OPS, file);
    fclose(file);
    arena = aligned_alloc(4096, ARENA);
    if (!arena) {
        return 2;
    }
    memset(arena, 0, ARENA);
    int devices = 0;
    struct ibv_device** list = ibv_get_device_list(&devices);
    for (int i = 0; list && i < devices; ++i) {
        const char* name = ibv_get_device_name(list[i]);
        if (!strcmp(name, "uroce0") || !strcmp(name, "uroce1")) {
            ctx[name[5] - '0'] = ibv_open_device(list[i]);
        }
    }
    if (list) {
        ibv_free_device_list(list);
    }
    if (!ctx[0] || !ctx[1]) {
        fprintf(stderr, "verb_program: uroce0 and uroce1 do not both open\n");
        return 2;
    }
    for (size_t i = 0; i < count; ++i) {
        kOps[program[i].code % (sizeof(kOps) / sizeof(kOps[0]))](&program[i]);
    }
    return 0;
}
