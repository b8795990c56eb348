// The data path: work requests posted to the shared rings, completions
// polled from them. No system call here except the doorbell, and that only
// while the daemon says it is going to sleep. Each queue has its own lock.
#include <sched.h>
#include <string.h>

#include <algorithm>

#include "protocol/work_requests.h"
#include "provider.h"
#include "qp/qp_transitions.h"

namespace uroce {
namespace {

// As rxe's provider: a post with no list, or nowhere to name a refused WR,
// is EINVAL (logged as `verb`'s), not a crash.
template <class Wr>
int refuse_missing(ibv_context* context, const char* verb, const Wr* wr, Wr* const* bad_wr) {
    if (!bad_wr) {
        check_null(context, verb, "bad_wr");
        return log_refusal(context, verb, refused(EINVAL, "bad_wr is NULL"));
    }
    if (!wr) {
        check_null(context, verb, "wr");
        return log_refusal(context, verb, refused(EINVAL, "wr is NULL: no work request to post"));
    }
    return 0;
}

// memcpy for lists that may be empty, and then null.
void copy(std::byte* to, const void* from, size_t bytes) {
    if (bytes) {
        memcpy(to, from, bytes);
    }
}

// A gather or scatter list `wq` takes: within its cap (named `cap` in the
// verb that made the queue), and there when it has elements (a NULL list
// is EINVAL, not a crash here).
int check_list(const WorkQueue& wq, const char* cap, const ibv_sge* list, int num_sge) {
    if (num_sge < 0 || static_cast<uint32_t>(num_sge) > wq.max_sge) {
        return refused(EINVAL, "num_sge %d is beyond the queue's %s of %u", num_sge, cap,
                       wq.max_sge);
    }
    if (num_sge > 0 && !list) {
        return refused(EINVAL, "sg_list is NULL with num_sge %d", num_sge);
    }
    return 0;
}

// A queue with no room for one more work request.
int refuse_full_send_queue(const WorkQueue& sq) {
    return refused(ENOMEM,
                   "the send queue is full: its %u sends are posted and not retired (a send's "
                   "slot frees when its completion, or a later signaled one, is polled)",
                   sq.ring.limit());
}
int refuse_full_receive_queue(const WorkQueue& rq) {
    return refused(ENOMEM, "the receive queue is full: its %u receives are posted and not taken",
                   rq.ring.limit());
}

// The bytes of a gather list check_list passed.
uint64_t total_length(const ibv_send_wr& wr) {
    uint64_t length = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        length += wr.sg_list[i].length;
    }
    return length;
}

// rxe's validate_send_wr, with the opcode checked against the QP type.
int check_send(const ProviderQp& qp, const ibv_send_wr& wr, uint64_t length) {
    // Read as a number: a C caller may store any value in the enum.
    uint32_t value;
    memcpy(&value, &wr.opcode, sizeof(value));
    const wr::OpcodeInfo* info = wr::opcode_info(value);
    if (!info || !(qp.send_opcodes & (1u << value))) {
        return refused(EINVAL, "opcode %u (%s) is not one that %s QPs post", value,
                       info ? info->name : "unknown", qp_type_name(qp.ibv.qp.qp_type));
    }
    if (info->kind == wr::Kind::kAtomic && ((wr.wr.atomic.remote_addr & 7) || length < 8)) {
        return refused(EINVAL,
                       "an atomic needs 8 bytes to an 8-byte aligned remote_addr: %llu to 0x%llx",
                       static_cast<unsigned long long>(length),
                       static_cast<unsigned long long>(wr.wr.atomic.remote_addr));
    }
    // IBA 1.5's atomic write: exactly 8 bytes to an 8-byte aligned address,
    // read from the gather list when posted (as rxe), and carried inline.
    if (info->kind == wr::Kind::kAtomicWrite &&
        ((wr.wr.rdma.remote_addr & 7) || length != 8 ||
         qp.sq.ring.entry_size() < queues::kSendWqeFixed + 8)) {
        return refused(EINVAL,
                       "an atomic write carries exactly 8 bytes to an 8-byte aligned remote_addr, "
                       "inline: %llu to 0x%llx, with max_inline_data %u",
                       static_cast<unsigned long long>(length),
                       static_cast<unsigned long long>(wr.wr.rdma.remote_addr), qp.sq.max_inline);
    }
    if ((wr.send_flags & IBV_SEND_INLINE) && !info->inline_allowed) {
        return refused(EINVAL, "IBV_SEND_INLINE on %s, which sends no data of its own", info->name);
    }
    if ((wr.send_flags & IBV_SEND_INLINE) && length > qp.sq.max_inline) {
        return refused(EINVAL, "%llu bytes inline are beyond the QP's max_inline_data of %u",
                       static_cast<unsigned long long>(length), qp.sq.max_inline);
    }
    if (qp.ibv.qp.qp_type == IBV_QPT_UD && !wr.wr.ud.ah) {
        return refused(EINVAL, "a UD send needs an address handle: wr.ud.ah is NULL");
    }
    if (wr.opcode == IBV_WR_BIND_MW && !wr.bind_mw.mw) {
        return refused(EINVAL, "IBV_WR_BIND_MW needs a window: bind_mw.mw is NULL");
    }
    return 0;
}

// Copies a small message after its gather list when every element lies in
// memory this process registered; the length copied, or 0.
uint32_t prefetch(const ProviderQp& qp, const ibv_send_wr& wr, uint64_t length, std::byte* to) {
    const size_t room =
        qp.sq.ring.entry_size() - queues::kSendWqeFixed - wr.num_sge * sizeof(ibv_sge);
    if (length == 0 || length > std::min(room, queues::kPrefetchBytes)) {
        return 0;
    }
    const LocalMemory& local = to_context(qp.ibv.qp.context)->local_memory;
    std::byte* at = to;
    for (int i = 0; i < wr.num_sge; ++i) {
        const ibv_sge& sge = wr.sg_list[i];
        const std::byte* from = local.find(sge.lkey, sge.addr, sge.length);
        if (!from) {
            return 0;
        }
        copy(at, from, sge.length);
        at += sge.length;
    }
    return static_cast<uint32_t>(length);
}

// Fills `slot` with a checked send WR: the fixed part, then the gather list
// or, with IBV_SEND_INLINE, the data itself. `check`: check mode's marks for
// it (queues::SendWqe::check_seq), and whether a small message's bytes may be
// copied now (not when check mode found them unmapped).
void write_send(const ProviderQp& qp, const ibv_send_wr& wr, uint64_t length, std::byte* slot,
                const check::CheckState::Posting& check) {
    queues::SendWqe wqe{};
    wqe.wr_id = wr.wr_id;
    wqe.check_seq = check.seq;
    wqe.check_posted_us = check.posted_us;
    wqe.opcode = wr.opcode;
    wqe.send_flags = wr.send_flags;
    wqe.imm_data = wr.imm_data;  // or invalidate_rkey, its union member
    const wr::OpcodeInfo& info = *wr::opcode_info(wr.opcode);
    if (info.kind == wr::Kind::kAtomic) {
        wqe.remote_addr = wr.wr.atomic.remote_addr;
        wqe.rkey = wr.wr.atomic.rkey;
        wqe.compare_add = wr.wr.atomic.compare_add;
        wqe.swap = wr.wr.atomic.swap;
    } else {
        wqe.remote_addr = wr.wr.rdma.remote_addr;
        wqe.rkey = wr.wr.rdma.rkey;
    }
    if (wr.opcode == IBV_WR_BIND_MW) {
        const ibv_mw_bind_info& bind = wr.bind_mw.bind_info;
        wqe.mw_rkey = wr.bind_mw.mw->rkey;
        wqe.rkey = wr.bind_mw.rkey;
        wqe.bind_lkey = bind.mr ? bind.mr->lkey : 0;
        wqe.bind_addr = bind.addr;
        wqe.bind_length = bind.length;
        wqe.bind_access = bind.mw_access_flags;
    }
    switch (qp.ibv.qp.qp_type) {
        case IBV_QPT_UD:
            wqe.ah = wr.wr.ud.ah->handle;
            wqe.remote_qpn = wr.wr.ud.remote_qpn;
            wqe.remote_qkey = wr.wr.ud.remote_qkey;
            break;
        case IBV_QPT_XRC_SEND:
            wqe.remote_srqn = wr.qp_type.xrc.remote_srqn;
            break;
        default:
            break;
    }
    std::byte* data = slot + queues::kSendWqeFixed;
    if (info.kind == wr::Kind::kAtomicWrite) {
        wqe.send_flags |= IBV_SEND_INLINE;
    }
    if (wqe.send_flags & IBV_SEND_INLINE) {
        // The WQE carries either a gather list or inline data, never both.
        wqe.inline_length = static_cast<uint32_t>(length);
        for (int i = 0; i < wr.num_sge; ++i) {
            const ibv_sge& sge = wr.sg_list[i];
            copy(data, reinterpret_cast<const void*>(sge.addr), sge.length);
            data += sge.length;
        }
    } else {
        wqe.num_sge = static_cast<uint32_t>(wr.num_sge);
        copy(data, wr.sg_list, wr.num_sge * sizeof(ibv_sge));
        if (info.inline_allowed && check.readable) {
            wqe.inline_length = prefetch(qp, wr, length, data + wr.num_sge * sizeof(ibv_sge));
        }
    }
    memcpy(slot, &wqe, sizeof(wqe));
}

int post_one_recv(WorkQueue& wq, const char* cap, const ibv_recv_wr& wr) {
    if (int error = check_list(wq, cap, wr.sg_list, wr.num_sge)) {
        return error;
    }
    if (wq.ring.full()) {
        return refuse_full_receive_queue(wq);
    }
    std::byte* slot = wq.ring.slot();
    const queues::RecvWqe wqe{wr.wr_id, static_cast<uint32_t>(wr.num_sge), 0};
    memcpy(slot, &wqe, sizeof(wqe));
    copy(slot + queues::kRecvWqeFixed, wr.sg_list, wr.num_sge * sizeof(ibv_sge));
    wq.ring.advance();
    return 0;
}

// Posts the list from `wr` on with `post_one` until one fails (refused
// whole when `refusal` is set, its sentence written), publishes what was
// written and rings the doorbell. WRs before a failing one stay posted, as
// ibv_post_send(3) says. A refusal is logged as `verb`'s.
template <class Wr, class PostOne>
int post(ibv_context* context, const char* verb, WorkQueue& wq, int refusal, Wr* wr, Wr** bad_wr,
         PostOne post_one) {
    std::unique_lock lock(wq.lock);
    int error = refusal ? refusal : wq.ring.mapped() ? 0 : refuse_unmapped();
    const uint32_t start = wq.ring.index();
    while (wr && !error) {
        error = post_one(*wr);
        if (!error) {
            wr = wr->next;
        }
    }
    const bool posted = wq.ring.index() != start;
    if (posted) {
        wq.ring.publish();
    }
    lock.unlock();
    if (posted) {
        to_context(context)->doorbell.ring(wq.doorbell_slot);
    }
    if (error) {
        *bad_wr = wr;
        log_refusal(context, verb, error);
    }
    return error;
}

// Receive WRs onto `rq`: a QP's receive queue, an SRQ or a WQ, whose
// scatter cap is named `cap`.
int post_receives(ibv_context* context, const char* verb, const char* cap, WorkQueue& rq,
                  int refusal, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    return post(context, verb, rq, refusal, wr, bad_wr,
                [&rq, cap](const ibv_recv_wr& one) { return post_one_recv(rq, cap, one); });
}

// The number of completions ready in `cq`; false when the CQ has lost its
// ring or the daemon broke it.
bool completions(ProviderCq& cq, uint32_t& ready) {
    ready = cq.ring.mapped() ? cq.ring.ready() : 0;
    return cq.ring.mapped() && !cq.ring.broken();
}

// Copies the next completion out and moves past it (published later).
// The completion in the ring's next slot, with the data it carries (if
// any) copied where the daemon says, before the caller can see it.
void take(SharedRing& ring, queues::Cqe& cqe) {
    const std::byte* slot = ring.slot();
    memcpy(&cqe, slot, sizeof(cqe));
    if (cqe.data_length && cqe.data_length <= queues::kCqeDataBytes) {
        memcpy(reinterpret_cast<void*>(cqe.data_addr), slot + sizeof(cqe), cqe.data_length);
    }
    ring.advance();
}

// A poller that finds its CQ empty gives its CPU away (sched_yield) at once
// while the daemon says another CQ holds completions not taken yet (their
// program may be waiting for this CPU), and otherwise after 64 empty polls
// in a row (the daemon may be waiting for it), when programs spin on more
// CQs than there are cores. Polls that find completions never make a
// syscall.
constexpr uint32_t kEmptyPollsBeforeYield = 64;

void count_poll(ProviderCq& cq, bool found) {
    if (found) {
        cq.empty_polls.store(0, std::memory_order_relaxed);
    } else if (cq.empty_polls.fetch_add(1, std::memory_order_relaxed) + 1 >=
                   kEmptyPollsBeforeYield ||
               to_context(cq.ibv.cq.context)->doorbell.completions_waiting()) {
        cq.empty_polls.store(0, std::memory_order_relaxed);
        sched_yield();
    }
}

// ibv_cq_ex: makes the next completion the current one. Called with the lock.
int next_completion(ProviderCq& cq) {
    uint32_t ready;
    if (!completions(cq, ready)) {
        return EIO;
    }
    if (!ready) {
        return ENOENT;
    }
    take(cq.ring, cq.current);
    if (check::CheckState* check = checking(cq.ibv.cq.context)) {
        check->completed(cq.current.wc);
    }
    cq.ibv.cq_ex.status = cq.current.wc.status;
    cq.ibv.cq_ex.wr_id = cq.current.wc.wr_id;
    return 0;
}

// The lock is held from a successful start_poll to end_poll.
int start_poll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
    if (attr->comp_mask) {
        return EINVAL;
    }
    ProviderCq* cq = to_cq(ibcq);
    if (check::CheckState* check = checking(cq->ibv.cq.context)) {
        check->polling(&cq->ibv.cq);
    }
    cq->lock.lock();
    const int error = next_completion(*cq);
    if (error) {
        cq->lock.unlock();
    }
    count_poll(*cq, error != ENOENT);
    return error;
}

int next_poll(ibv_cq_ex* ibcq) {
    return next_completion(*to_cq(ibcq));
}

void end_poll(ibv_cq_ex* ibcq) {
    ProviderCq* cq = to_cq(ibcq);
    cq->ring.publish();
    cq->lock.unlock();
}

const ibv_wc& current(ibv_cq_ex* cq) {
    return to_cq(cq)->current.wc;
}
ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
    return current(cq).opcode;
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
    return current(cq).vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
    return current(cq).byte_len;
}
// ibv_wc_read_invalidated_rkey() reads it too: the union's other member.
__be32 read_imm_data(ibv_cq_ex* cq) {
    return current(cq).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
    return current(cq).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
    return current(cq).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
    return current(cq).wc_flags;
}
uint32_t read_slid(ibv_cq_ex* cq) {
    return current(cq).slid;
}
uint8_t read_sl(ibv_cq_ex* cq) {
    return current(cq).sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) {
    return current(cq).dlid_path_bits;
}
uint64_t read_completion_ts(ibv_cq_ex* cq) {
    return to_cq(cq)->current.timestamp;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
    return to_cq(cq)->current.wallclock_ns;
}

}  // namespace

int post_one_send(ProviderQp& qp, const ibv_send_wr& wr, const void* caller) {
    if (int error = check_list(qp.sq, "max_send_sge", wr.sg_list, wr.num_sge)) {
        return error;
    }
    const uint64_t length = total_length(wr);
    if (int error = check_send(qp, wr, length)) {
        return error;
    }
    SharedRing& ring = qp.sq.ring;
    if (ring.full()) {
        return refuse_full_send_queue(qp.sq);
    }
    check::CheckState::Posting posting{true, 0, 0};
    if (check::CheckState* check = checking(qp.ibv.qp.context)) {
        posting = check->posted_send(&qp.ibv.qp, wr, caller);
    }
    write_send(qp, wr, length, ring.slot(), posting);
    ring.advance();
    return 0;
}

int refuse_unmapped() {
    return refused(EINVAL, "the QP has no such queue (its type has none, or a resize lost it)");
}

int refuse_send_state(const ibv_qp& qp) {
    // A QP sends from RTS on; SQD and SQE queue, ERR flushes.
    if (qp.state != IBV_QPS_RESET && qp.state != IBV_QPS_INIT && qp.state != IBV_QPS_RTR) {
        return 0;
    }
    return refused(EINVAL, "the QP is in %s: it takes sends from RTS on", qp_state_name(qp.state));
}

// EINVAL with its sentence when `qp` takes no receives of its own, else 0.
int refuse_receive_state(const ibv_qp& qp) {
    if (qp.srq) {
        return refused(EINVAL, "the QP receives through its SRQ: post to the SRQ");
    }
    if (qp.state == IBV_QPS_RESET) {
        return refused(EINVAL, "the QP is in RESET: it takes receives from INIT on");
    }
    return 0;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    if (int error = refuse_missing(ibqp->context, "ibv_post_send", wr, bad_wr)) {
        return error;
    }
    ProviderQp* qp = to_qp(ibqp);
    const void* caller = nullptr;
    if (check::CheckState* check = checking(ibqp->context)) {
        check->posting_send(ibqp);
        caller = __builtin_return_address(0);
    }
    const int error =
        post(ibqp->context, "ibv_post_send", qp->sq, refuse_send_state(*ibqp), wr, bad_wr,
             [qp, caller](const ibv_send_wr& one) { return post_one_send(*qp, one, caller); });
    if (check::CheckState* check = checking(ibqp->context); check && error && *bad_wr) {
        check->refused_send(ibqp, **bad_wr, error);
    }
    return error;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    if (int error = refuse_missing(ibqp->context, "ibv_post_recv", wr, bad_wr)) {
        return error;
    }
    check::CheckState* check = checking(ibqp->context);
    if (check) {
        check->posting_recv(ibqp);
    }
    const int error = post_receives(ibqp->context, "ibv_post_recv", "max_recv_sge", to_qp(ibqp)->rq,
                                    refuse_receive_state(*ibqp), wr, bad_wr);
    for (ibv_recv_wr* one = wr; check && one && !(error && one == *bad_wr); one = one->next) {
        check->posted_recv(ibqp, *one);
    }
    if (check && error && *bad_wr) {
        check->refused_recv(ibqp, **bad_wr, error);
    }
    return error;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    if (int error = refuse_missing(ibsrq->context, "ibv_post_srq_recv", wr, bad_wr)) {
        return error;
    }
    const int error = post_receives(ibsrq->context, "ibv_post_srq_recv", "max_sge",
                                    to_srq(ibsrq)->rq, 0, wr, bad_wr);
    check::CheckState* check = checking(ibsrq->context);
    for (ibv_recv_wr* one = wr; check && one && !(error && one == *bad_wr); one = one->next) {
        check->posted_srq_recv(ibsrq, *one);
    }
    return error;
}

// Any state takes receives; those posted in RESET are forgotten when the WQ
// leaves it, as on mlx5.
int post_wq_recv(ibv_wq* ibwq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    if (int error = refuse_missing(ibwq->context, "ibv_post_wq_recv", wr, bad_wr)) {
        return error;
    }
    return post_receives(ibwq->context, "ibv_post_wq_recv", "max_sge", to_wq(ibwq)->rq, 0, wr,
                         bad_wr);
}

int poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc) {
    ProviderCq* cq = to_cq(ibcq);
    uint32_t ready;
    uint32_t count;
    {
        std::lock_guard lock(cq->lock);
        if (!completions(*cq, ready)) {
            return -EIO;
        }
        count = std::min(ready, n > 0 ? static_cast<uint32_t>(n) : 0);
        queues::Cqe cqe;
        check::CheckState* check = checking(ibcq->context);
        if (check) {
            check->polling(ibcq);
        }
        for (uint32_t i = 0; i < count; ++i) {
            take(cq->ring, cqe);
            wc[i] = cqe.wc;
            if (check) {
                check->completed(cqe.wc);
            }
        }
        if (count) {
            cq->ring.publish();
        }
    }
    count_poll(*cq, ready > 0);
    return static_cast<int>(count);
}

int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
    ProviderCq* cq = to_cq(ibcq);
    // The state lives in the ring, which resize_cq may replace.
    std::lock_guard lock(cq->lock);
    if (!cq->ring.mapped()) {
        return EIO;
    }
    std::atomic<uint32_t>& arm = static_cast<queues::CqState*>(cq->ring.extra())->arm;
    if (!solicited_only) {
        arm.store(queues::kCqArmedAny, std::memory_order_seq_cst);
    } else {
        // Asking for solicited completions only does not narrow an arm for
        // any completion (as in the kernel's rxe).
        uint32_t disarmed = queues::kCqDisarmed;
        arm.compare_exchange_strong(disarmed, queues::kCqArmedSolicited, std::memory_order_seq_cst);
    }
    // Pairs with the daemon's fence between adding a completion and reading
    // the arm: the next poll sees the completion, or the daemon the arm.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return 0;
}

void set_cq_ex_ops(ibv_cq_ex* cq) {
    cq->start_poll = start_poll;
    cq->next_poll = next_poll;
    cq->end_poll = end_poll;
    cq->read_opcode = read_opcode;
    cq->read_vendor_err = read_vendor_err;
    cq->read_byte_len = read_byte_len;
    cq->read_imm_data = read_imm_data;
    cq->read_qp_num = read_qp_num;
    cq->read_src_qp = read_src_qp;
    cq->read_wc_flags = read_wc_flags;
    cq->read_slid = read_slid;
    cq->read_sl = read_sl;
    cq->read_dlid_path_bits = read_dlid_path_bits;
    cq->read_completion_ts = read_completion_ts;
    cq->read_completion_wallclock_ns = read_completion_wallclock_ns;
}

}  // namespace uroce
