#include "net/step_gate.h"

#include <algorithm>

namespace uroce {

void StepGate::run() {
    paused_ = false;
    while (!held_.empty()) {
        outbox_.push_back(std::move(held_.front()));
        held_.pop_front();
    }
}

uint64_t StepGate::hold(const OutgoingPacket& packet) {
    if (held_.size() >= kMaxHeld) {
        return 0;
    }
    held_.push_back({packet, next_id_, std::chrono::steady_clock::now()});
    return next_id_++;
}

std::deque<StepGate::Packet>::iterator StepGate::locate(uint64_t id) {
    if (id == 0) {
        return held_.begin();
    }
    return std::find_if(held_.begin(), held_.end(), [id](const Packet& p) { return p.id == id; });
}

uint64_t StepGate::release(uint64_t id) {
    auto it = locate(id);
    if (it == held_.end()) {
        return 0;
    }
    const uint64_t released = it->id;
    outbox_.push_back(std::move(*it));
    held_.erase(it);
    return released;
}

uint64_t StepGate::duplicate(uint64_t id) {
    auto it = locate(id);
    if (it == held_.end()) {
        return 0;
    }
    outbox_.push_back(*it);
    return it->id;
}

uint64_t StepGate::drop(uint64_t id) {
    auto it = locate(id);
    if (it == held_.end()) {
        return 0;
    }
    const uint64_t dropped = it->id;
    held_.erase(it);
    return dropped;
}

const StepGate::Packet* StepGate::find(uint64_t id) const {
    if (id == 0) {
        return held_.empty() ? nullptr : &held_.front();
    }
    auto it =
        std::find_if(held_.begin(), held_.end(), [id](const Packet& p) { return p.id == id; });
    return it == held_.end() ? nullptr : &*it;
}

std::deque<StepGate::Packet> StepGate::take_outgoing() {
    std::deque<Packet> out;
    out.swap(outbox_);
    return out;
}

}  // namespace uroce
