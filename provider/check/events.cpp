// Check mode's unacked-events: destroys that a kernel provider makes wait
// for ever for completion and async events not acknowledged (or
// acknowledged on the wrong object), and a wait on a channel none of whose
// CQs is armed.
#include <algorithm>

#include "check.h"
#include "checker.h"

namespace uroce::check {
namespace {

// A count of events acknowledged that libibverbs keeps under the object's
// mutex (ibv_ack_cq_events, ibv_ack_async_event).
uint32_t acknowledged_events(pthread_mutex_t* mutex, const uint32_t& count) {
    pthread_mutex_lock(mutex);
    const uint32_t acknowledged = count;
    pthread_mutex_unlock(mutex);
    return acknowledged;
}

// The events an object's destroy waits for, by their names in verbs.h.
const char* event_name(ibv_event_type type) {
    switch (type) {
        case IBV_EVENT_CQ_ERR:
            return "IBV_EVENT_CQ_ERR";
        case IBV_EVENT_QP_FATAL:
            return "IBV_EVENT_QP_FATAL";
        case IBV_EVENT_QP_REQ_ERR:
            return "IBV_EVENT_QP_REQ_ERR";
        case IBV_EVENT_QP_ACCESS_ERR:
            return "IBV_EVENT_QP_ACCESS_ERR";
        case IBV_EVENT_COMM_EST:
            return "IBV_EVENT_COMM_EST";
        case IBV_EVENT_SQ_DRAINED:
            return "IBV_EVENT_SQ_DRAINED";
        case IBV_EVENT_PATH_MIG:
            return "IBV_EVENT_PATH_MIG";
        case IBV_EVENT_PATH_MIG_ERR:
            return "IBV_EVENT_PATH_MIG_ERR";
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            return "IBV_EVENT_QP_LAST_WQE_REACHED";
        case IBV_EVENT_SRQ_ERR:
            return "IBV_EVENT_SRQ_ERR";
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            return "IBV_EVENT_SRQ_LIMIT_REACHED";
        case IBV_EVENT_WQ_FATAL:
            return "IBV_EVENT_WQ_FATAL";
        default:
            return ibv_event_type_str(type);
    }
}

}  // namespace

void CheckState::destroying_cq(const ibv_cq* cq, uint32_t events_reported) {
    const uint32_t acknowledged =
        acknowledged_events(const_cast<pthread_mutex_t*>(&cq->mutex), cq->comp_events_completed);
    if (events_reported == acknowledged) {
        return;
    }
    const std::string entries = "ibv_destroy_cq on a CQ of " + std::to_string(cq->cqe) + " entries";
    if (acknowledged > events_reported) {
        report(differing(
            {Rule::kUnackedEvents, 0,
             entries + " on which ibv_ack_cq_events acknowledged " + std::to_string(acknowledged) +
                 " completion event(s), " + std::to_string(acknowledged - events_reported) +
                 " more than the " + std::to_string(events_reported) +
                 " ibv_get_cq_event returned for it: they were meant for another CQ.",
             "libibverbs counts acknowledgements per CQ: the CQ the events came from still "
             "has them unacknowledged, and its ibv_destroy_cq waits for ever (rdma-core's "
             "ibv_cmd_destroy_cq, which kernel providers such as rxe and mlx5 use)",
             "acknowledge each event on the CQ that ibv_get_cq_event returned in its cq "
             "argument, not on the CQ the program expected"},
            Difference::kDestroyWithUnackedEvents));
        return;
    }
    report(differing(
        {Rule::kUnackedEvents, 0,
         entries + " whose " + std::to_string(events_reported - acknowledged) + " of " +
             std::to_string(events_reported) +
             " completion event(s) from ibv_get_cq_event were never acknowledged.",
         "ibv_destroy_cq waits until every event taken is acknowledged (rdma-core's "
         "ibv_cmd_destroy_cq, which kernel providers such as rxe and mlx5 use): the program "
         "blocks for ever",
         "call ibv_ack_cq_events(cq, n) for the events ibv_get_cq_event returned (it may "
         "count them and acknowledge them at once) before destroying the CQ"},
        Difference::kDestroyWithUnackedEvents));
}

void CheckState::cq_created(ibv_cq* cq) {
    Held locked(lock_);
    cqs_.insert(cq);
}

std::vector<ibv_cq*> CheckState::cqs_on_channel(int fd) {
    Held locked(lock_);
    std::vector<ibv_cq*> on;
    for (ibv_cq* cq : cqs_) {
        if (cq->channel && cq->channel->fd == fd) {
            on.push_back(cq);
        }
    }
    return on;
}

void CheckState::blocked_unarmed(uint32_t cqs, uint32_t held) {
    Held locked(lock_);
    report({Rule::kUnackedEvents, 0,
            "ibv_get_cq_event has waited a second on a completion channel none of whose " +
                std::to_string(cqs) + " CQ(s) is armed" +
                (held ? "; they hold " + std::to_string(held) + " completion(s) not polled"
                      : std::string()) +
                ".",
            "a CQ reports one event per ibv_req_notify_cq: a CQ not re-armed after its event "
            "never reports again, and a program that waits for it hangs (the completions stay in "
            "the CQ)",
            "call ibv_req_notify_cq on the CQ after each event (then poll it, so that completions "
            "that came before the arm are not left behind) before waiting again"});
}

void CheckState::blocked_armed(const ChannelWait& wait) {
    Held locked(lock_);
    each_checker([&](Checker& c) { c.waiting(*this, wait); });
}

void CheckState::destroying(const void* object, const char* verb, const uint32_t* completed,
                            pthread_mutex_t* mutex) {
    const uint32_t acknowledged = acknowledged_events(mutex, *completed);
    Held locked(lock_);
    const auto it = async_events_.find(object);
    if (it == async_events_.end() || it->second.count == acknowledged) {
        return;
    }
    const uint32_t got = it->second.count;
    if (acknowledged > got) {
        report(differing(
            {Rule::kUnackedEvents, 0,
             std::string(verb) + " after ibv_ack_async_event acknowledged " +
                 std::to_string(acknowledged) + " async event(s) for it, " +
                 std::to_string(acknowledged - got) + " more than the " + std::to_string(got) +
                 " ibv_get_async_event returned: an event was acknowledged twice.",
             "the destroy of a kernel provider (rxe, mlx5) waits until the acknowledgements "
             "count up to the events got: a second acknowledgement of one event stands in "
             "for another event of the object that the program still holds, and the object "
             "is destroyed under it",
             "call ibv_ack_async_event exactly once for each event ibv_get_async_event "
             "returns"},
            Difference::kDestroyWithUnackedEvents));
        return;
    }
    report(differing(
        {Rule::kUnackedEvents, 0,
         std::string(verb) + " while " + std::to_string(got - acknowledged) + " of the " +
             std::to_string(got) +
             " async event(s) ibv_get_async_event returned for it (the "
             "last " +
             event_name(it->second.last) + ") are not acknowledged with ibv_ack_async_event.",
         std::string(verb) +
             " waits until every async event got for the object is acknowledged (rdma-core's "
             "ibv_cmd_destroy_* of kernel providers such as rxe and mlx5): the program blocks "
             "for ever",
         "call ibv_ack_async_event for each event ibv_get_async_event returns, before "
         "destroying the object it names"},
        Difference::kDestroyWithUnackedEvents));
}

}  // namespace uroce::check
