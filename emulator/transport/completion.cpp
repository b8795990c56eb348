#include "transport/completion.h"

#include <rdma/ib_user_verbs.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace uroce {

void EventPipe::post(uint64_t element, uint32_t event_type) const {
    ib_uverbs_async_event_desc desc{};
    desc.element = element;
    desc.event_type = event_type;
    [[maybe_unused]] ssize_t ignored = write(fd.get(), &desc, sizeof(desc));
}

namespace transport {

void post_completion(Cq& cq, const ibv_wc& wc, bool solicited) {
    queues::Cqe cqe{};
    cqe.wc = wc;
    cqe.timestamp = queues::clock_ns(CLOCK_MONOTONIC);
    cqe.wallclock_ns = queues::clock_ns(CLOCK_REALTIME);
    if (!cq.ring.push(std::as_bytes(std::span(&cqe, 1)))) {
        if (!cq.overrun) {
            cq.overrun = true;
            cq.events->post(cq.user_handle, IBV_EVENT_CQ_ERR);
        }
        return;
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
    if (!wanted || !cq.channel || arm.exchange(queues::kCqDisarmed) == queues::kCqDisarmed) {
        return;
    }
    ib_uverbs_comp_event_desc desc{};
    desc.cq_handle = cq.user_handle;
    [[maybe_unused]] ssize_t ignored = write(cq.channel->write_end.get(), &desc, sizeof(desc));
}

}  // namespace transport
}  // namespace uroce
