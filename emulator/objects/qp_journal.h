// What a QP went through, kept for people watching it (`uroce qp`, the
// console): its state transitions with their causes, and the last NAK it
// sent or received. Bounded: a QP keeps its newest kMaxTransitions.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>

namespace uroce::transport {

struct QpTransition {
    std::chrono::steady_clock::time_point at;
    ibv_qp_state from = IBV_QPS_RESET;
    ibv_qp_state to = IBV_QPS_RESET;
    int attr_mask = 0;  // ibv_modify_qp's; 0 when the device moved the QP itself
    std::string cause;  // "ibv_modify_qp", or what failed
};

struct NakRecord {
    std::chrono::steady_clock::time_point at;
    bool sent = false;  // by this QP's responder; else received by its requester
    bool rnr = false;   // an RNR NAK (value: its timer code); else a NAK (value: its code)
    uint8_t value = 0;
    uint32_t psn = 0;
};

struct QpJournal {
    static constexpr size_t kMaxTransitions = 16;

    std::deque<QpTransition> transitions;  // oldest first
    uint64_t transition_count = 0;         // including those no longer kept
    std::optional<NakRecord> last_nak;

    void add(QpTransition transition) {
        if (transitions.size() == kMaxTransitions) {
            transitions.pop_front();
        }
        transitions.push_back(std::move(transition));
        ++transition_count;
    }
    // The state before the current one; RESET for a QP never moved.
    ibv_qp_state previous_state() const {
        return transitions.empty() ? IBV_QPS_RESET : transitions.back().from;
    }
};

}  // namespace uroce::transport
