#include "queues/doorbell.h"

#include <sys/eventfd.h>

namespace uroce {

Result Doorbell::create(Doorbell& out) {
    Doorbell doorbell;
    doorbell.eventfd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!doorbell.eventfd_) {
        return fail(errno, "cannot create the doorbell eventfd");
    }
    if (Result r = SharedMemory::create("uroce-doorbell", queues::kDoorbellBytes, doorbell.memory_);
        !r) {
        return r;
    }
    out = std::move(doorbell);
    return ok();
}

std::optional<uint32_t> Doorbell::attach(Qp& qp, Device& device) {
    uint32_t slot;
    if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
    } else if (owners_.size() < queues::kDoorbellSlots) {
        slot = static_cast<uint32_t>(owners_.size());
        owners_.emplace_back();
    } else {
        return std::nullopt;
    }
    owners_[slot] = {&qp, &device};
    return slot;
}

void Doorbell::detach(uint32_t slot) {
    if (slot < owners_.size() && owners_[slot].qp) {
        owners_[slot] = {};
        free_slots_.push_back(slot);
    }
}

bool Doorbell::any_posted() const {
    for (const auto& word : bits().summary) {
        if (word.load()) {
            return true;
        }
    }
    return false;
}

}  // namespace uroce
