// Queue pairs and multicast attachment.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#include "protocol/work_requests.h"
#include "provider.h"

namespace uroce {
namespace {

uint32_t handle_of(ibv_cq* cq) {
    return cq ? cq->handle : rpc::kNoHandle;
}

// Maps the queues that came with a create reply: the send ring, then the
// receive ring, each only when it exists.
int map_queues(const rpc::CreateQpReply& reply, const ReceivedFds& received, ProviderQp& qp) {
    const ibv_qp_cap& cap = reply.cap;
    qp.sq.doorbell_slot = qp.rq.doorbell_slot = reply.doorbell_slot;
    const bool has_sq = reply.send_queue.entries != 0;
    const bool has_rq = reply.recv_queue.entries != 0;
    if (received.fds.size() != size_t{has_sq} + size_t{has_rq}) {
        return EPROTO;
    }
    if (has_sq) {
        if (int error = map_work_queue(received.fds[0], reply.send_queue,
                                       queues::send_wqe_size(cap.max_send_sge, cap.max_inline_data),
                                       cap.max_send_wr, qp.sq.ring)) {
            return error;
        }
        qp.sq.max_sge = cap.max_send_sge;
        qp.sq.max_inline = cap.max_inline_data;
    }
    if (has_rq) {
        if (int error = map_work_queue(received.fds.back(), reply.recv_queue,
                                       queues::recv_wqe_size(cap.max_recv_sge), cap.max_recv_wr,
                                       qp.rq.ring)) {
            return error;
        }
        qp.rq.max_sge = cap.max_recv_sge;
    }
    return 0;
}

// The queues of `attr` the daemon holds for the QP's life, and so the
// ones the QP keeps: an XRC_TGT QP has none (ibv_create_qp_ex(3) says they
// are ignored), an XRC_INI QP no receive CQ, an RSS QP none (its WQs have
// them), as the kernel's create_qp takes them. One kept beyond them would
// be followed after the program destroyed it, which nothing forbids (a
// fuzzer's ibv_destroy_qp crashed in a freed CQ's ring).
struct KeptQueues {
    bool send_cq;
    bool recv_cq;
    bool srq;
};
KeptQueues kept_queues(const ibv_qp_init_attr_ex& attr) {
    const bool rss = (attr.comp_mask & IBV_QP_INIT_ATTR_IND_TABLE) && attr.rwq_ind_tbl;
    if (attr.qp_type == IBV_QPT_XRC_RECV || rss) {
        return {false, false, false};
    }
    return {true, attr.qp_type != IBV_QPT_XRC_SEND, true};
}

// The daemon's request for `attr`, the QP's address as its user handle;
// false when the RSS hash key cannot be carried.
bool create_qp_request(const ibv_qp_init_attr_ex& attr, const ProviderQp& qp,
                       rpc::CreateQpRequest& request) {
    const uint32_t mask = attr.comp_mask;
    const ibv_pd* pd = (mask & IBV_QP_INIT_ATTR_PD) ? attr.pd : nullptr;
    ibv_xrcd* xrcd = (mask & IBV_QP_INIT_ATTR_XRCD) ? attr.xrcd : nullptr;
    request.user_handle = reinterpret_cast<uintptr_t>(&qp.ibv.qp);
    request.qp_type = attr.qp_type;
    request.sq_sig_all = attr.sq_sig_all;
    request.pd = pd ? pd->handle : rpc::kNoHandle;
    const KeptQueues kept = kept_queues(attr);
    request.send_cq = kept.send_cq ? handle_of(attr.send_cq) : rpc::kNoHandle;
    request.recv_cq = kept.recv_cq ? handle_of(attr.recv_cq) : rpc::kNoHandle;
    request.srq = kept.srq && attr.srq ? attr.srq->handle : rpc::kNoHandle;
    request.xrcd = xrcd ? reinterpret_cast<verbs_xrcd*>(xrcd)->handle : rpc::kNoHandle;
    request.rwq_ind_tbl = ((mask & IBV_QP_INIT_ATTR_IND_TABLE) && attr.rwq_ind_tbl)
                              ? attr.rwq_ind_tbl->ind_tbl_handle
                              : rpc::kNoHandle;
    request.cap = attr.cap;
    request.comp_mask = mask;
    request.create_flags = (mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr.create_flags : 0;
    request.max_tso_header = (mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) ? attr.max_tso_header : 0;
    request.source_qpn = attr.source_qpn;
    request.send_ops_flags = (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr.send_ops_flags : 0;
    if (mask & IBV_QP_INIT_ATTR_RX_HASH) {
        const ibv_rx_hash_conf& hash = attr.rx_hash_conf;
        if (hash.rx_hash_key_len > sizeof(request.rx_hash_key) ||
            (hash.rx_hash_key_len && !hash.rx_hash_key)) {
            return false;
        }
        request.rx_hash_function = hash.rx_hash_function;
        request.rx_hash_key_len = hash.rx_hash_key_len;
        if (hash.rx_hash_key_len) {
            memcpy(request.rx_hash_key, hash.rx_hash_key, hash.rx_hash_key_len);
        }
        request.rx_hash_fields_mask = hash.rx_hash_fields_mask;
    }
    return true;
}

// The ibv_qp libibverbs hands out, from what the daemon created.
void fill_qp(ibv_context* context, const ibv_qp_init_attr_ex& attr, const rpc::CreateQpReply& reply,
             ProviderQp& qp) {
    const uint32_t mask = attr.comp_mask;
    qp.send_opcodes = wr::allowed_mask(attr.qp_type);
    ibv_qp& ibqp = qp.ibv.qp;
    ibqp.context = context;
    ibqp.qp_context = attr.qp_context;
    ibqp.pd = (mask & IBV_QP_INIT_ATTR_PD) ? attr.pd : nullptr;
    const KeptQueues kept = kept_queues(attr);
    ibqp.send_cq = kept.send_cq ? attr.send_cq : nullptr;
    ibqp.recv_cq = kept.recv_cq ? attr.recv_cq : nullptr;
    ibqp.srq = kept.srq ? attr.srq : nullptr;
    ibqp.handle = reply.handle;
    ibqp.qp_num = reply.qpn;
    ibqp.state = IBV_QPS_RESET;
    ibqp.qp_type = attr.qp_type;
    pthread_mutex_init(&ibqp.mutex, nullptr);
    pthread_cond_init(&ibqp.cond, nullptr);
    if ((mask & IBV_QP_INIT_ATTR_XRCD) && attr.xrcd) {
        qp.ibv.comp_mask |= VERBS_QP_XRCD;
        qp.ibv.xrcd = reinterpret_cast<verbs_xrcd*>(attr.xrcd);
    }
    if (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        qp.ibv.comp_mask |= VERBS_QP_EX;
        set_qp_ex_ops(&qp.ibv.qp_ex);
        qp.batch.sges.reserve(reply.cap.max_send_sge);
        qp.batch.inline_data.reserve(reply.cap.max_inline_data);
    }
}

}  // namespace

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
    if (!attr) {
        refuse_null(context, "ibv_create_qp_ex", "attr");
        return nullptr;
    }

    auto* qp = new (std::nothrow) ProviderQp{};
    if (!qp) {
        errno = ENOMEM;
        return nullptr;
    }
    rpc::CreateQpRequest request{};
    if (!create_qp_request(*attr, *qp, request)) {
        delete qp;
        errno = EINVAL;
        return nullptr;
    }
    rpc::CreateQpReply reply;
    ReceivedFds received;
    if (int error = client_of(context).call(request, &reply, {}, &received.fds)) {
        delete qp;
        report(context, "create_qp", error);
        return nullptr;
    }
    if (int error = map_queues(reply, received, *qp)) {
        client_of(context).call_op(rpc::Op::kDestroyQp, rpc::HandleRequest{reply.handle});
        delete qp;
        report_ring(context, "create_qp", error);
        return nullptr;
    }
    fill_qp(context, *attr, reply, *qp);
    const ibv_qp_cap asked = attr->cap;
    attr->cap = reply.cap;
    if (check::CheckState* check = checking(context)) {
        check->qp_created(&qp->ibv.qp, asked, reply.cap, attr->sq_sig_all,
                          qp->sq.ring.check_words());
    }
    return &qp->ibv.qp;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    if (!attr) {
        refuse_null(pd->context, "ibv_create_qp", "attr");
        return nullptr;
    }

    ibv_qp_init_attr_ex ex{};
    ex.qp_context = attr->qp_context;
    ex.send_cq = attr->send_cq;
    ex.recv_cq = attr->recv_cq;
    ex.srq = attr->srq;
    ex.cap = attr->cap;
    ex.qp_type = attr->qp_type;
    ex.sq_sig_all = attr->sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_qp* qp = create_qp_ex(pd->context, &ex);
    if (qp) {
        attr->cap = ex.cap;
    }
    return qp;
}

namespace {

// A QP reset or destroyed takes its completions out of its CQs, as mlx4 and
// mlx5 do (rxe leaves them): what the QP did before starts nothing after it.
// rdma-core's tests reset QPs that failed and expect to poll only the new
// traffic; libfabric 1.17's rxm closes a connection's QP and then polls the
// shared CQ, and a receive of that QP found there is reposted to the freed
// endpoint.
// Returns how many it took out of the send CQ and of the receive CQ (0
// when it is the send CQ).
std::pair<uint32_t, uint32_t> forget_completions(ibv_qp* qp) {
    uint32_t removed[2] = {0, 0};
    ibv_cq* const cqs[2] = {qp->send_cq, qp->recv_cq == qp->send_cq ? nullptr : qp->recv_cq};
    for (int i = 0; i < 2; ++i) {
        if (!cqs[i]) {
            continue;
        }
        ProviderCq* cq = to_cq(cqs[i]);
        std::lock_guard lock(cq->lock);
        if (cq->ring.mapped()) {
            removed[i] = cq->ring.discard([qpn = qp->qp_num](const std::byte* entry) {
                queues::Cqe cqe;
                memcpy(&cqe, entry, sizeof(cqe));
                return cqe.wc.qp_num == qpn;
            });
        }
    }
    return {removed[0], removed[1]};
}

}  // namespace

int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    if (!attr) {
        return refuse_null(qp->context, "ibv_modify_qp", "attr");
    }

    rpc::Empty none;
    if (int error = client_of(qp->context)
                        .call(rpc::ModifyQpRequest{qp->handle, attr_mask, *attr}, &none)) {
        return report(qp->context, "modify_qp", error);
    }
    if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
        forget_completions(qp);
    }
    if (check::CheckState* check = checking(qp->context)) {
        check->qp_modified(qp, qp->state, *attr, attr_mask);  // libibverbs sets qp->state after
    }
    return 0;
}

int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
    if (!attr) {
        return refuse_null(qp->context, "ibv_query_qp", "attr");
    }
    if (!init_attr) {
        return refuse_null(qp->context, "ibv_query_qp", "init_attr");
    }

    rpc::QueryQpReply reply;
    if (int error =
            client_of(qp->context).call(rpc::QueryQpRequest{qp->handle, attr_mask}, &reply)) {
        return report(qp->context, "query_qp", error);
    }
    *attr = reply.attr;
    *init_attr = {};
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = reply.init_cap;
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = reply.sq_sig_all;
    return 0;
}

int destroy_qp(ibv_qp* qp) {
    if (check::CheckState* check = checking(qp->context)) {
        check->destroying(qp, "ibv_destroy_qp", &qp->events_completed, &qp->mutex);
    }
    if (int error =
            client_of(qp->context).call_op(rpc::Op::kDestroyQp, rpc::HandleRequest{qp->handle})) {
        return report(qp->context, "destroy_qp", error);
    }
    const auto [removed_send, removed_recv] = forget_completions(qp);
    if (check::CheckState* check = checking(qp->context)) {
        check->qp_destroyed(qp, removed_send, removed_recv);
    }
    pthread_cond_destroy(&qp->cond);
    pthread_mutex_destroy(&qp->mutex);
    delete to_qp(qp);
    return 0;
}

// An XRC_TGT QP created elsewhere in the same XRC domain: a handle with no
// queues of its own, checked as ibv_cmd_open_qp() checks it.
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_open_qp", "attr");
        return nullptr;
    }

    constexpr uint32_t kNeeded =
        IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    if ((attr->comp_mask & kNeeded) != kNeeded || !attr->xrcd) {
        errno = EINVAL;
        return nullptr;
    }
    auto* qp = new (std::nothrow) ProviderQp{};
    if (!qp) {
        errno = ENOMEM;
        return nullptr;
    }
    auto* xrcd = reinterpret_cast<verbs_xrcd*>(attr->xrcd);
    rpc::OpenQpReply reply;
    if (int error =
            client_of(context).call(rpc::OpenQpRequest{reinterpret_cast<uintptr_t>(&qp->ibv.qp),
                                                       xrcd->handle, attr->qp_num, attr->qp_type},
                                    &reply)) {
        delete qp;
        report(context, "open_qp", error);
        return nullptr;
    }
    ibv_qp& ibqp = qp->ibv.qp;
    ibqp.context = context;
    ibqp.qp_context = attr->qp_context;
    ibqp.handle = reply.handle;
    ibqp.qp_num = attr->qp_num;
    ibqp.qp_type = attr->qp_type;
    ibqp.state = IBV_QPS_UNKNOWN;
    pthread_mutex_init(&ibqp.mutex, nullptr);
    pthread_cond_init(&ibqp.cond, nullptr);
    qp->ibv.comp_mask = VERBS_QP_XRCD;
    qp->ibv.xrcd = xrcd;
    return &ibqp;
}

int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    if (int error = client_of(qp->context)
                        .call_op(rpc::Op::kAttachMcast, rpc::McastRequest{qp->handle, lid, *gid})) {
        return report(qp->context, "attach_mcast", error);
    }
    return 0;
}

int detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    if (int error = client_of(qp->context)
                        .call_op(rpc::Op::kDetachMcast, rpc::McastRequest{qp->handle, lid, *gid})) {
        return report(qp->context, "detach_mcast", error);
    }
    return 0;
}

// ibv_create_flow(3): the attribute and the specs after it go to the daemon
// as they are; it parses and checks them. As libibverbs' own command does,
// the specs are found by their size fields, not by attr->size.
ibv_flow* create_flow(ibv_qp* qp, ibv_flow_attr* attr) {
    if (!attr) {
        refuse_null(qp->context, "ibv_create_flow", "attr");
        return nullptr;
    }

    rpc::CreateFlowRequest request{qp->handle, sizeof(*attr), {}};
    const auto* bytes = reinterpret_cast<const std::byte*>(attr);
    for (unsigned i = 0; i < attr->num_of_specs; ++i) {
        ibv_flow_spec_action_drop head;  // every spec starts with {type, size}
        memcpy(&head, bytes + request.size, sizeof(head));
        if (head.size < sizeof(head) || request.size + head.size > sizeof(request.attr)) {
            errno = EINVAL;
            return nullptr;
        }
        request.size += head.size;
    }
    memcpy(request.attr, attr, request.size);
    rpc::CreateFlowReply reply;
    if (int error = client_of(qp->context).call(request, &reply)) {
        report(qp->context, "create_flow", error);
        return nullptr;
    }
    auto* flow = static_cast<ibv_flow*>(calloc(1, sizeof(ibv_flow)));
    if (!flow) {
        client_of(qp->context).call_op(rpc::Op::kDestroyFlow, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    *flow = {0, qp->context, reply.handle};
    return flow;
}

int destroy_flow(ibv_flow* flow) {
    if (int error = client_of(flow->context)
                        .call_op(rpc::Op::kDestroyFlow, rpc::HandleRequest{flow->handle})) {
        return report(flow->context, "destroy_flow", error);
    }
    free(flow);
    return 0;
}

}  // namespace uroce
