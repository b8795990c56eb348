// The extended send API (ibv_wr_post(3)): ibv_wr_start, one call per work
// request and its setters, then ibv_wr_complete or ibv_wr_abort. Work
// requests go through the checks and the WQE layout of ibv_post_send, so
// both APIs post exactly the same work; nothing reaches the daemon before
// ibv_wr_complete publishes the batch.
#include <string.h>

#include <algorithm>

#include "provider.h"

namespace uroce {
namespace {

ProviderQp& qp_of(ibv_qp_ex* qpx) {
    return *to_qp(&qpx->qp_base);
}

// Writes the work request being built, if any, to the ring.
void finish_wr(ProviderQp& qp) {
    WrBatch& b = qp.batch;
    if (b.building && !b.error) {
        b.wr.sg_list = b.sges.data();
        b.wr.num_sge = static_cast<int>(b.sges.size());
        b.error = post_one_send(qp, b.wr, b.caller);
        if (b.error) {  // ibv_wr_complete returns it
            log_refusal(qp.ibv.qp.context, "ibv_wr_complete", b.error);
        }
    }
    b.building = false;
}

// Starts the next work request: its id and flags come from the QP.
ibv_send_wr& begin_wr(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
    ProviderQp& qp = qp_of(qpx);
    finish_wr(qp);
    WrBatch& b = qp.batch;
    b.wr = {};
    b.wr.wr_id = qpx->wr_id;
    b.wr.send_flags = qpx->wr_flags;
    b.wr.opcode = opcode;
    b.sges.clear();
    b.inline_data.clear();
    b.building = true;
    return b.wr;
}

void wr_start(ibv_qp_ex* qpx) {
    ProviderQp& qp = qp_of(qpx);
    qp.sq.lock.lock();
    qp.batch.start = qp.sq.ring.index();
    qp.batch.error = refuse_send_state(qpx->qp_base);
    if (!qp.batch.error && !qp.sq.ring.mapped()) {
        qp.batch.error = refuse_unmapped();
    }
    if (qp.batch.error) {  // ibv_wr_complete returns it
        log_refusal(qpx->qp_base.context, "ibv_wr_complete", qp.batch.error);
    }
    qp.batch.building = false;
    qp.batch.caller = __builtin_return_address(0);
}

// Forgets the batch's work requests.
void rewind_batch(ProviderQp& qp) {
    if (check::CheckState* check = checking(qp.ibv.qp.context)) {
        check->unposted_sends(&qp.ibv.qp, qp.sq.ring.index() - qp.batch.start);
    }
    qp.sq.ring.rewind(qp.batch.start);
}

int wr_complete(ibv_qp_ex* qpx) {
    ProviderQp& qp = qp_of(qpx);
    finish_wr(qp);
    const int error = qp.batch.error;
    if (error) {
        rewind_batch(qp);
    } else if (qp.sq.ring.index() != qp.batch.start) {
        qp.sq.ring.publish();
        to_context(qpx->qp_base.context)->doorbell.ring(qp.sq.doorbell_slot);
    }
    qp.sq.lock.unlock();
    return error;
}

void wr_abort(ibv_qp_ex* qpx) {
    ProviderQp& qp = qp_of(qpx);
    rewind_batch(qp);
    qp.batch.building = false;
    qp.sq.lock.unlock();
}

void wr_send(ibv_qp_ex* qpx) {
    begin_wr(qpx, IBV_WR_SEND);
}
void wr_send_imm(ibv_qp_ex* qpx, __be32 imm_data) {
    begin_wr(qpx, IBV_WR_SEND_WITH_IMM).imm_data = imm_data;
}
void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    begin_wr(qpx, IBV_WR_SEND_WITH_INV).invalidate_rkey = invalidate_rkey;
}
void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    begin_wr(qpx, IBV_WR_RDMA_WRITE).wr.rdma = {remote_addr, rkey};
}
void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
    ibv_send_wr& wr = begin_wr(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
    wr.wr.rdma = {remote_addr, rkey};
    wr.imm_data = imm_data;
}
void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    begin_wr(qpx, IBV_WR_RDMA_READ).wr.rdma = {remote_addr, rkey};
}
void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
    begin_wr(qpx, IBV_WR_ATOMIC_CMP_AND_SWP).wr.atomic = {remote_addr, compare, swap, rkey};
}
void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
    begin_wr(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD).wr.atomic = {remote_addr, add, 0, rkey};
}
#if UROCE_HAVE_ATOMIC_WRITE
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, const void* atomic_wr) {
    ibv_send_wr& wr = begin_wr(qpx, IBV_WR_ATOMIC_WRITE);
    wr.wr.rdma = {remote_addr, rkey};
    // The 8 bytes are taken now: the caller may reuse its buffer at once.
    WrBatch& b = qp_of(qpx).batch;
    memcpy(&b.atomic_write, atomic_wr, sizeof(b.atomic_write));
    b.sges.assign(1, ibv_sge{reinterpret_cast<uintptr_t>(&b.atomic_write), 8, 0});
}
#endif
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* bind_info) {
    ibv_send_wr& wr = begin_wr(qpx, IBV_WR_BIND_MW);
    wr.bind_mw = {mw, rkey, *bind_info};
}
void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    begin_wr(qpx, IBV_WR_LOCAL_INV).invalidate_rkey = invalidate_rkey;
}

// Setters of the work request being built; without one they fail the batch.
WrBatch* building(ibv_qp_ex* qpx) {
    WrBatch& b = qp_of(qpx).batch;
    if (!b.building) {
        b.error = b.error ? b.error : EINVAL;
        return nullptr;
    }
    return &b;
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
    if (WrBatch* b = building(qpx)) {
        b->sges.assign(sg_list, sg_list + num_sge);
        b->wr.send_flags &= ~IBV_SEND_INLINE;
    }
}
void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
    const ibv_sge sge{addr, length, lkey};
    wr_set_sge_list(qpx, 1, &sge);
}
void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
    WrBatch* b = building(qpx);
    if (!b) {
        return;
    }
    b->inline_data.clear();
    for (size_t i = 0; i < num_buf; ++i) {
        const auto* bytes = static_cast<const std::byte*>(buf_list[i].addr);
        b->inline_data.insert(b->inline_data.end(), bytes, bytes + buf_list[i].length);
    }
    b->sges.assign(1, {reinterpret_cast<uintptr_t>(b->inline_data.data()),
                       static_cast<uint32_t>(b->inline_data.size()), 0});
    b->wr.send_flags |= IBV_SEND_INLINE;
}
void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qpx, 1, &buf);
}
void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    if (WrBatch* b = building(qpx)) {
        b->wr.wr.ud = {ah, remote_qpn, remote_qkey};
    }
}
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
    if (WrBatch* b = building(qpx)) {
        b->wr.qp_type.xrc.remote_srqn = remote_srqn;
    }
}

}  // namespace

void set_qp_ex_ops(ibv_qp_ex* qpx) {
    qpx->wr_start = wr_start;
    qpx->wr_complete = wr_complete;
    qpx->wr_abort = wr_abort;
    qpx->wr_send = wr_send;
    qpx->wr_send_imm = wr_send_imm;
    qpx->wr_send_inv = wr_send_inv;
    qpx->wr_rdma_write = wr_rdma_write;
    qpx->wr_rdma_write_imm = wr_rdma_write_imm;
    qpx->wr_rdma_read = wr_rdma_read;
    qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
#if UROCE_HAVE_ATOMIC_WRITE  // ibv_qp_ex has the member from rdma-core v44
    qpx->wr_atomic_write = wr_atomic_write;
#endif
    qpx->wr_bind_mw = wr_bind_mw;
    qpx->wr_local_inv = wr_local_inv;
    qpx->wr_set_sge = wr_set_sge;
    qpx->wr_set_sge_list = wr_set_sge_list;
    qpx->wr_set_inline_data = wr_set_inline_data;
    qpx->wr_set_inline_data_list = wr_set_inline_data_list;
    qpx->wr_set_ud_addr = wr_set_ud_addr;
    qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
}

}  // namespace uroce
