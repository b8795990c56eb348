// Shared receive queues, receive work queues and indirection tables.
#include <pthread.h>
#include <stdlib.h>

#include <new>

#include "provider.h"

namespace uroce {
namespace {

// Maps the receive ring (of an SRQ or a WQ) that came with a create or
// modify reply.
int map_receive_ring(const ReceivedFds& received, uint32_t entries, uint32_t entry_size,
                     uint32_t max_sge, uint32_t max_wr, SharedRing& out) {
    if (received.fds.size() != 1) {
        return EPROTO;
    }
    return map_work_queue(received.fds[0], {entries, entry_size}, queues::recv_wqe_size(max_sge),
                          max_wr, out);
}

}  // namespace

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
    if (!attr) {
        refuse_null(context, "ibv_create_srq_ex", "attr");
        return nullptr;
    }

    auto* provider_srq = new (std::nothrow) ProviderSrq{};
    if (!provider_srq) {
        errno = ENOMEM;
        return nullptr;
    }
    verbs_srq* srq = &provider_srq->ibv;
    const uint32_t mask = attr->comp_mask;
    rpc::CreateSrqRequest request{};
    request.user_handle = reinterpret_cast<uintptr_t>(&srq->srq);
    request.comp_mask = mask;
    request.srq_type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
    request.pd = ((mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd) ? attr->pd->handle : rpc::kNoHandle;
    request.xrcd = ((mask & IBV_SRQ_INIT_ATTR_XRCD) && attr->xrcd)
                       ? reinterpret_cast<verbs_xrcd*>(attr->xrcd)->handle
                       : rpc::kNoHandle;
    request.cq = ((mask & IBV_SRQ_INIT_ATTR_CQ) && attr->cq) ? attr->cq->handle : rpc::kNoHandle;
    request.attr = attr->attr;
    request.tm_cap = (mask & IBV_SRQ_INIT_ATTR_TM) ? attr->tm_cap : ibv_tm_cap{};
    rpc::CreateSrqReply reply;
    ReceivedFds received;
    if (int error = client_of(context).call(request, &reply, {}, &received.fds)) {
        delete provider_srq;
        report(context, "create_srq", error);
        return nullptr;
    }
    WorkQueue& rq = provider_srq->rq;
    rq.max_sge = reply.attr.max_sge;
    if (int error = map_receive_ring(received, reply.ring_entries, reply.entry_size, rq.max_sge,
                                     reply.attr.max_wr, rq.ring)) {
        client_of(context).call_op(rpc::Op::kDestroySrq, rpc::HandleRequest{reply.handle});
        delete provider_srq;
        report_ring(context, "create_srq", error);
        return nullptr;
    }
    srq->srq.context = context;
    srq->srq.srq_context = attr->srq_context;
    srq->srq.pd = (mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr;
    srq->srq.handle = reply.handle;
    pthread_mutex_init(&srq->srq.mutex, nullptr);
    pthread_cond_init(&srq->srq.cond, nullptr);
    srq->srq_type = static_cast<ibv_srq_type>(request.srq_type);
    srq->xrcd =
        reinterpret_cast<verbs_xrcd*>((mask & IBV_SRQ_INIT_ATTR_XRCD) ? attr->xrcd : nullptr);
    srq->cq = (mask & IBV_SRQ_INIT_ATTR_CQ) ? attr->cq : nullptr;
    srq->srq_num = reply.srq_num;
    attr->attr = reply.attr;
    if (check::CheckState* check = checking(context)) {
        check->created(&srq->srq, "SRQ of " + std::to_string(reply.attr.max_wr) + " receives");
    }
    return &srq->srq;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (!attr) {
        refuse_null(pd->context, "ibv_create_srq", "attr");
        return nullptr;
    }

    ibv_srq_init_attr_ex ex{};
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_srq* srq = create_srq_ex(pd->context, &ex);
    if (srq) {
        attr->attr = ex.attr;
    }
    return srq;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int attr_mask) {
    if (!attr) {
        return refuse_null(ibsrq->context, "ibv_modify_srq", "attr");
    }

    WorkQueue& rq = to_srq(ibsrq)->rq;
    // Held across the call: the daemon moves the WQEs pending in the old
    // ring to the new one, so none may be posted to the old one until we switch.
    std::lock_guard lock(rq.lock);
    rpc::ModifySrqReply reply;
    ReceivedFds received;
    if (int error = client_of(ibsrq->context)
                        .call(rpc::ModifySrqRequest{ibsrq->handle, attr_mask, *attr}, &reply, {},
                              &received.fds)) {
        return report(ibsrq->context, "modify_srq", error);
    }
    if (reply.ring_entries) {
        // Our producer index continues from the new ring's header.
        if (int error = map_receive_ring(received, reply.ring_entries, reply.entry_size, rq.max_sge,
                                         reply.ring_entries, rq.ring)) {
            rq.ring = SharedRing();  // the daemon has moved on from the old ring
            return report_ring(ibsrq->context, "modify_srq", error);
        }
    }
    if (attr_mask & IBV_SRQ_MAX_WR) {
        // The reply does not say how the daemon rounded max_wr.
        ibv_srq_attr now;
        if (int error = query_srq(ibsrq, &now)) {
            return error;
        }
        rq.ring.set_limit(now.max_wr);
    }
    return 0;
}

int query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    if (!attr) {
        return refuse_null(srq->context, "ibv_query_srq", "attr");
    }

    rpc::QuerySrqReply reply;
    rpc::HandleRequest request{srq->handle};
    if (int error =
            client_of(srq->context)
                .call(rpc::Op::kQuerySrq, &request, sizeof(request), &reply, sizeof(reply))) {
        return report(srq->context, "query_srq", error);
    }
    *attr = reply.attr;
    return 0;
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
    *srq_num = reinterpret_cast<verbs_srq*>(srq)->srq_num;
    return 0;
}

int destroy_srq(ibv_srq* srq) {
    if (check::CheckState* check = checking(srq->context)) {
        check->destroying(srq, "ibv_destroy_srq", &srq->events_completed, &srq->mutex);
    }
    if (int error = client_of(srq->context)
                        .call_op(rpc::Op::kDestroySrq, rpc::HandleRequest{srq->handle})) {
        return report(srq->context, "destroy_srq", error);
    }
    if (check::CheckState* check = checking(srq->context)) {
        check->destroyed(srq);
    }
    pthread_cond_destroy(&srq->cond);
    pthread_mutex_destroy(&srq->mutex);
    delete to_srq(srq);
    return 0;
}

ibv_wq* create_wq(ibv_context* context, ibv_wq_init_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_create_wq", "attr");
        return nullptr;
    }

    auto* provider_wq = new (std::nothrow) ProviderWq{};
    if (!provider_wq) {
        errno = ENOMEM;
        return nullptr;
    }
    ibv_wq* wq = &provider_wq->ibv;
    rpc::CreateWqRequest request{reinterpret_cast<uintptr_t>(wq),
                                 attr->wq_type,
                                 attr->max_wr,
                                 attr->max_sge,
                                 attr->pd ? attr->pd->handle : rpc::kNoHandle,
                                 attr->cq ? attr->cq->handle : rpc::kNoHandle,
                                 attr->comp_mask,
                                 attr->create_flags};
    rpc::CreateWqReply reply;
    ReceivedFds received;
    if (int error = client_of(context).call(request, &reply, {}, &received.fds)) {
        delete provider_wq;
        report(context, "create_wq", error);
        return nullptr;
    }
    WorkQueue& rq = provider_wq->rq;
    rq.max_sge = reply.max_sge;
    if (int error = map_receive_ring(received, reply.ring.entries, reply.ring.entry_size,
                                     rq.max_sge, reply.max_wr, rq.ring)) {
        client_of(context).call_op(rpc::Op::kDestroyWq, rpc::HandleRequest{reply.handle});
        delete provider_wq;
        report_ring(context, "create_wq", error);
        return nullptr;
    }
    wq->post_recv = post_wq_recv;
    wq->context = context;
    wq->wq_context = attr->wq_context;
    wq->pd = attr->pd;
    wq->cq = attr->cq;
    wq->wq_num = reply.wq_num;
    wq->handle = reply.handle;
    wq->state = IBV_WQS_RESET;
    wq->wq_type = attr->wq_type;
    pthread_mutex_init(&wq->mutex, nullptr);
    pthread_cond_init(&wq->cond, nullptr);
    attr->max_wr = reply.max_wr;
    attr->max_sge = reply.max_sge;
    return wq;
}

int modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
    if (!attr) {
        return refuse_null(wq->context, "ibv_modify_wq", "attr");
    }

    rpc::ModifyWqRequest request{wq->handle,          attr->attr_mask, attr->wq_state,
                                 attr->curr_wq_state, attr->flags,     attr->flags_mask};
    rpc::Empty none;
    if (int error = client_of(wq->context).call(request, &none)) {
        return report(wq->context, "modify_wq", error);
    }
    if (attr->attr_mask & IBV_WQ_ATTR_STATE) {
        wq->state = attr->wq_state;
    }
    return 0;
}

int destroy_wq(ibv_wq* wq) {
    if (check::CheckState* check = checking(wq->context)) {
        check->destroying(wq, "ibv_destroy_wq", &wq->events_completed, &wq->mutex);
    }
    if (int error =
            client_of(wq->context).call_op(rpc::Op::kDestroyWq, rpc::HandleRequest{wq->handle})) {
        return report(wq->context, "destroy_wq", error);
    }
    pthread_cond_destroy(&wq->cond);
    pthread_mutex_destroy(&wq->mutex);
    delete to_wq(wq);
    return 0;
}

ibv_rwq_ind_table* create_rwq_ind_table(ibv_context* context, ibv_rwq_ind_table_init_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_create_rwq_ind_table", "attr");
        return nullptr;
    }

    rpc::CreateRwqIndTableRequest request{};
    request.log_size = attr->log_ind_tbl_size;
    request.comp_mask = attr->comp_mask;
    if (request.log_size >= 32 || (1u << request.log_size) > rpc::kMaxRwqIndTableSize ||
        !attr->ind_tbl) {
        errno = EINVAL;
        return nullptr;
    }
    for (uint32_t i = 0; i < (1u << request.log_size); ++i) {
        request.wqs[i] = attr->ind_tbl[i] ? attr->ind_tbl[i]->handle : rpc::kNoHandle;
    }
    rpc::CreateRwqIndTableReply reply;
    if (int error = client_of(context).call(request, &reply)) {
        report(context, "create_rwq_ind_table", error);
        return nullptr;
    }
    auto* table = static_cast<ibv_rwq_ind_table*>(calloc(1, sizeof(ibv_rwq_ind_table)));
    if (!table) {
        client_of(context).call_op(rpc::Op::kDestroyRwqIndTable, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    *table = {context, static_cast<int>(reply.handle), static_cast<int>(reply.ind_tbl_num), 0};
    return table;
}

int destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
    ibv_context* context = table->context;
    rpc::HandleRequest request{static_cast<uint32_t>(table->ind_tbl_handle)};
    if (int error = client_of(context).call_op(rpc::Op::kDestroyRwqIndTable, request)) {
        return report(context, "destroy_rwq_ind_table", error);
    }
    free(table);
    return 0;
}

}  // namespace uroce
