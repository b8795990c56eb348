// Receive work queues and the indirection tables that spread over them.
#include <bit>

#include "protocol/queues.h"
#include "transport/receive_queue.h"
#include "verbs/context.h"

namespace uroce {
namespace {

bool is_wq_state(int state) {
    return state >= IBV_WQS_RESET && state <= IBV_WQS_ERR;
}

// RESET -> RDY, RDY -> RDY, and from any state to RESET or ERR.
bool wq_transition_allowed(ibv_wq_state cur, ibv_wq_state next) {
    if (next == IBV_WQS_RESET || next == IBV_WQS_ERR) {
        return true;
    }
    return next == IBV_WQS_RDY && (cur == IBV_WQS_RESET || cur == IBV_WQS_RDY);
}

const char* wq_state_name(int state) {
    static constexpr const char* kNames[] = {"RESET", "RDY", "ERR"};
    return is_wq_state(state) ? kNames[state] : "UNKNOWN";
}

}  // namespace

Result Context::create_wq(const rpc::CreateWqRequest& req, rpc::CreateWqReply& reply,
                          ReplyFds& fds) {
    const ibv_device_attr_ex& caps = device_.attr();
    if (req.wq_type != IBV_WQT_RQ) {
        return fail(EINVAL, "WQ type %d is not supported (only IBV_WQT_RQ)", req.wq_type);
    }
    if (req.comp_mask & ~IBV_WQ_INIT_ATTR_FLAGS) {
        return fail(EINVAL, "unknown WQ comp_mask bits 0x%x",
                    req.comp_mask & ~IBV_WQ_INIT_ATTR_FLAGS);
    }
    if ((req.comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && req.create_flags) {
        return fail(EOPNOTSUPP, "WQ create_flags 0x%x are not supported", req.create_flags);
    }
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    auto cq = cqs_.find(req.cq);
    if (!cq) {
        return fail(EINVAL, "no CQ with handle %u", req.cq);
    }
    const uint32_t max_wr = static_cast<uint32_t>(caps.orig_attr.max_qp_wr);
    const uint32_t max_sge = static_cast<uint32_t>(caps.orig_attr.max_sge);
    if (req.max_wr < 1 || req.max_wr > max_wr) {
        return fail(EINVAL, "WQ max_wr %u is outside 1..%u", req.max_wr, max_wr);
    }
    if (req.max_sge > max_sge) {
        return fail(EINVAL, "WQ max_sge %u is above the device's %u", req.max_sge, max_sge);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kWq); !r) {
        return r;
    }
    auto wq = std::make_shared<Wq>();
    wq->max_wr = std::min<uint32_t>(std::bit_ceil(req.max_wr + 1) - 1, max_wr);
    wq->max_sge = std::max<uint32_t>(req.max_sge, 1);
    if (Result r = Ring::create(device_.name() + "-wq", std::bit_ceil(wq->max_wr),
                                queues::recv_wqe_size(wq->max_sge), 0, wq->ring);
        !r) {
        return r;
    }
    const auto wq_num = device_.wqs().add(wq.get());
    if (!wq_num) {
        return fail(ENOMEM, "no WQ numbers left");
    }
    wq->user_handle = req.user_handle;
    wq->pd = Ref<Pd>(pd);
    wq->cq = Ref<Cq>(cq);
    wq->wq_num = *wq_num;
    wqs_.add(wq);
    device_.count(owner_, ObjectKind::kWq, 1);
    reply = {wq->handle,
             wq->wq_num,
             wq->max_wr,
             wq->max_sge,
             {wq->ring.entries(), wq->ring.entry_size()}};
    fds.push_back(wq->ring.release_fd());
    return ok();
}

Result Context::modify_wq(const rpc::ModifyWqRequest& req, rpc::Empty&) {
    auto wq = wqs_.find(req.handle);
    if (!wq) {
        return fail(EINVAL, "no WQ with handle %u", req.handle);
    }
    constexpr uint32_t kKnown = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
    if (req.attr_mask & ~kKnown) {
        return fail(EINVAL, "unknown WQ attribute mask bits 0x%x", req.attr_mask & ~kKnown);
    }
    if ((req.attr_mask & IBV_WQ_ATTR_FLAGS) && req.flags_mask) {
        return fail(EOPNOTSUPP, "WQ flags 0x%x are not supported", req.flags_mask);
    }
    if ((req.attr_mask & IBV_WQ_ATTR_STATE) && !is_wq_state(req.wq_state)) {
        return fail(EINVAL, "WQ state %d is not a state", req.wq_state);
    }
    if (req.attr_mask & IBV_WQ_ATTR_CURR_STATE) {
        if (!is_wq_state(req.curr_wq_state)) {
            return fail(EINVAL, "WQ current state %d is not a state", req.curr_wq_state);
        }
        if (req.curr_wq_state != wq->state) {
            return fail(EINVAL, "WQ %u is in %s, not %s", wq->wq_num, wq_state_name(wq->state),
                        wq_state_name(req.curr_wq_state));
        }
    }
    if (req.attr_mask & IBV_WQ_ATTR_STATE) {
        const auto next = static_cast<ibv_wq_state>(req.wq_state);
        if (!wq_transition_allowed(wq->state, next)) {
            return fail(EINVAL, "WQ %u cannot move from %s to %s", wq->wq_num,
                        wq_state_name(wq->state), wq_state_name(next));
        }
        // Receives posted before RESET, or while in it, are forgotten
        // without completions (as mlx5 resets the queue's indexes).
        if (next == IBV_WQS_RESET || wq->state == IBV_WQS_RESET) {
            wq->ring.discard_pending();
        }
        wq->state = next;
        if (next == IBV_WQS_ERR) {
            transport::flush_wq(*wq);
        }
    }
    return ok();
}

Result Context::destroy_wq(const rpc::HandleRequest& req, rpc::Empty&) {
    auto wq = wqs_.find(req.handle);
    if (!wq) {
        return fail(EINVAL, "no WQ with handle %u", req.handle);
    }
    if (wq->users) {
        return fail(EBUSY, "WQ %u is still used by %d indirection tables", wq->wq_num, wq->users);
    }
    device_.wqs().remove(wq->wq_num);
    wqs_.erase(req.handle);
    device_.count(owner_, ObjectKind::kWq, -1);
    return ok();
}

Result Context::create_rwq_ind_table(const rpc::CreateRwqIndTableRequest& req,
                                     rpc::CreateRwqIndTableReply& reply) {
    const ibv_rss_caps& rss = device_.attr().rss_caps;
    if (req.comp_mask) {
        return fail(EINVAL, "unknown indirection table comp_mask 0x%x", req.comp_mask);
    }
    if (req.log_size >= 32 || (1u << req.log_size) > rss.max_rwq_indirection_table_size) {
        return fail(EINVAL, "indirection table log size %u above the device's %u entries",
                    req.log_size, rss.max_rwq_indirection_table_size);
    }
    auto table = std::make_shared<RwqIndTable>();
    table->log_size = req.log_size;
    for (uint32_t i = 0; i < (1u << req.log_size); ++i) {
        auto wq = wqs_.find(req.wqs[i]);
        if (!wq) {
            return fail(EINVAL, "entry %u: no WQ with handle %u", i, req.wqs[i]);
        }
        table->wqs.emplace_back(wq);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kRwqIndTable); !r) {
        return r;
    }
    auto num = device_.ind_table_nums().allocate();
    if (!num) {
        return fail(ENOMEM, "no indirection table numbers left");
    }
    table->ind_tbl_num = *num;
    ind_tables_.add(table);
    device_.count(owner_, ObjectKind::kRwqIndTable, 1);
    reply = {table->handle, table->ind_tbl_num};
    return ok();
}

Result Context::destroy_rwq_ind_table(const rpc::HandleRequest& req, rpc::Empty&) {
    auto table = ind_tables_.find(req.handle);
    if (!table) {
        return fail(EINVAL, "no indirection table with handle %u", req.handle);
    }
    if (table->users) {
        return fail(EBUSY, "indirection table %u is still used by %d QPs", table->ind_tbl_num,
                    table->users);
    }
    device_.ind_table_nums().release(table->ind_tbl_num);
    ind_tables_.erase(req.handle);
    device_.count(owner_, ObjectKind::kRwqIndTable, -1);
    return ok();
}

}  // namespace uroce
