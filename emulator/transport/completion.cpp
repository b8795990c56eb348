#include "transport/completion.h"
#include "util/coverage.h"
#include "util/log.h"

#include <rdma/ib_user_verbs.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>

namespace uroce {

void EventPipe::post(uint64_t element, uint32_t event_type) {
    coverage::async_event(event_type);
    ib_uverbs_async_event_desc desc{};
    desc.element = element;
    desc.event_type = event_type;
    pipe.write_record(&desc, sizeof(desc));
}

namespace transport {

void complete_send(Qp& qp, const SendWork& w, ibv_wc_status status) {
    const bool signaled = qp.sq_sig_all || (w.wqe.send_flags & IBV_SEND_SIGNALED);
    if (!signaled && status == IBV_WC_SUCCESS) {
        return;
    }
    ibv_wc wc{};
    wc.wr_id = w.wqe.wr_id;
    wc.status = status;
    wc.opcode = w.wc_opcode();
    wc.byte_len = static_cast<uint32_t>(w.length);
    wc.qp_num = qp.qpn;
    complete_for(qp, *qp.send_cq.get(), wc, false);
}

bool complete_for(Qp& qp, Cq& cq, const ibv_wc& wc, bool solicited,
                  const std::optional<CarriedData>& data) {
    if (post_completion(cq, wc, solicited, data)) {
        return true;
    }
    if (qp.attr.qp_state != IBV_QPS_ERR) {
        qp.post_event(IBV_EVENT_QP_FATAL);
        qp.move_to(IBV_QPS_ERR, 0,
                   "CQ " + std::to_string(cq.handle) + " had no room for its completion (wr_id " +
                       std::to_string(wc.wr_id) + ")");
    }
    return false;
}

void complete_receive_without_data(Cq& cq, uint64_t wr_id, uint32_t qp_num, ibv_wc_status status) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = status;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp_num;
    post_completion(cq, wc, false);
}

std::optional<CarriedData> carried_data(const Cq& cq, const Extent& target,
                                        std::span<const std::byte> bytes) {
    if (bytes.empty() || bytes.size() > queues::kCqeDataBytes || target.pid != cq.pid ||
        target.segments.empty() || target.segments.front().length < bytes.size()) {
        return std::nullopt;
    }
    return CarriedData{target.segments.front().addr, bytes};
}

bool post_completion(Cq& cq, const ibv_wc& wc, bool solicited,
                     const std::optional<CarriedData>& data) {
    coverage::completion(wc.opcode, wc.status);
    std::array<std::byte, queues::kCqeSize> entry;
    queues::Cqe cqe{};
    cqe.wc = wc;
    // Only a CQ created to report them reads the clocks (two reads per
    // completion were a fifth of the daemon's time at high message rates).
    if (cq.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) {
        cqe.timestamp = queues::clock_ns(CLOCK_MONOTONIC);
    }
    if (cq.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) {
        cqe.wallclock_ns = queues::clock_ns(CLOCK_REALTIME);
    }
    size_t size = sizeof(cqe);
    if (data) {
        cqe.data_addr = data->addr;
        cqe.data_length = static_cast<uint32_t>(data->bytes.size());
        memcpy(entry.data() + sizeof(cqe), data->bytes.data(), data->bytes.size());
        size += data->bytes.size();
    }
    memcpy(entry.data(), &cqe, sizeof(cqe));
    if (!cq.ring.push(std::span(entry).first(size))) {
        if (cq.lost) {
            ++*cq.lost;
        }
        if (!cq.overrun) {
            cq.overrun = true;
            cq.events->post(cq.user_handle, IBV_EVENT_CQ_ERR);
            log_warn(
                "%s: CQ %u overran: its %d entries are all unpolled, and a completion of QP "
                "0x%x (wr_id %llu, %s) is lost; IBV_EVENT_CQ_ERR, and each QP whose "
                "completion finds it full goes to ERR with IBV_EVENT_QP_FATAL",
                cq.device_name.c_str(), cq.handle, cq.cqe, wc.qp_num,
                static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status));
        }
        return false;
    }
    cq.unpolled_cqs->add(cq);
    if (!cq.channel) {
        return true;  // no completion events: whether it is armed does not matter
    }
    auto& arm = static_cast<queues::CqState*>(cq.ring.extra())->arm;
    // Pairs with ibv_req_notify_cq (store the arm, then poll): either the
    // application sees this completion or we see its arm. Without the fence
    // the load may pass the ring's store, both sides miss, and a program
    // waiting for the event waits forever.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t armed = arm.load(std::memory_order_acquire);
    const bool wanted =
        armed == queues::kCqArmedAny ||
        (armed == queues::kCqArmedSolicited && (solicited || wc.status != IBV_WC_SUCCESS));
    if (!wanted) {
        return true;
    }
    const ibv_moderate_cq& m = cq.moderation;
    if (m.cq_count > 1 || m.cq_period) {
        ++cq.held;
        if (!m.cq_count || cq.held < m.cq_count) {
            if (m.cq_period && cq.event_due == kNever) {
                cq.event_due = Clock::now() + std::chrono::microseconds(m.cq_period);
                cq.due_events->insert(&cq);
            }
            return true;
        }
    }
    signal_cq_event(cq);
    return true;
}

void signal_cq_event(Cq& cq) {
    cq.held = 0;
    if (cq.event_due != kNever) {
        cq.event_due = kNever;
        cq.due_events->erase(&cq);
    }
    auto& arm = static_cast<queues::CqState*>(cq.ring.extra())->arm;
    if (arm.exchange(queues::kCqDisarmed) == queues::kCqDisarmed) {
        return;
    }
    ib_uverbs_comp_event_desc desc{};
    desc.cq_handle = cq.user_handle;
    cq.channel->pipe.write_record(&desc, sizeof(desc));
}

}  // namespace transport
}  // namespace uroce
