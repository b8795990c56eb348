#include "net/step_gate.h"

#include <algorithm>

namespace uroce {

std::deque<StepGate::Packet> StepGate::run() {
    paused_ = false;
    std::deque<Packet> released;
    released.swap(held_);
    return released;
}

bool StepGate::hold(Packet packet) {
    if (held_.size() >= kMaxHeld) {
        return false;
    }
    packet.id = next_id_++;
    packet.held_at = std::chrono::steady_clock::now();
    held_.push_back(std::move(packet));
    return true;
}

std::optional<StepGate::Packet> StepGate::take(uint64_t id) {
    auto it = id == 0 ? held_.begin()
                      : std::find_if(held_.begin(), held_.end(),
                                     [id](const Packet& p) { return p.id == id; });
    if (it == held_.end()) {
        return std::nullopt;
    }
    Packet packet = std::move(*it);
    held_.erase(it);
    return packet;
}

const StepGate::Packet* StepGate::find(uint64_t id) const {
    auto it = id == 0 ? held_.begin()
                      : std::find_if(held_.begin(), held_.end(),
                                     [id](const Packet& p) { return p.id == id; });
    return it == held_.end() ? nullptr : &*it;
}

size_t StepGate::clear() {
    const size_t count = held_.size();
    held_.clear();
    return count;
}

}  // namespace uroce
