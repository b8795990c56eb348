#include "queues/doorbell.h"

#include <sys/eventfd.h>

namespace uroce {

Result Doorbell::create(Doorbell& out, uint32_t engines) {
    if (engines == 0 || engines > queues::kMaxEngines) {
        return fail(EINVAL, "%u engines: from 1 to %u", engines, queues::kMaxEngines);
    }
    Doorbell doorbell;
    // Whole summary words per engine, so that engines never clear each
    // other's bits.
    doorbell.slots_per_engine_ =
        queues::kDoorbellSlots / engines / kSlotsPerSummaryWord * kSlotsPerSummaryWord;
    doorbell.ranges_.resize(engines);
    doorbell.eventfd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!doorbell.eventfd_) {
        return fail(errno, "cannot create the doorbell eventfd");
    }
    if (Result r = SharedMemory::create("uroce-doorbell", queues::kDoorbellBytes, doorbell.memory_);
        !r) {
        return r;
    }
    doorbell.page().slots_per_engine.store(engines > 1 ? doorbell.slots_per_engine_ : 0);
    out = std::move(doorbell);
    return ok();
}

std::optional<uint32_t> Doorbell::attach(Qp& qp, Device& device, uint32_t engine) {
    Range& range = ranges_.at(engine);
    uint32_t slot;
    if (!range.free.empty()) {
        slot = range.free.back();
        range.free.pop_back();
    } else if (range.next_unused < slots_per_engine_) {
        slot = engine * slots_per_engine_ + range.next_unused++;
        if (owners_.size() <= slot) {
            owners_.resize(slot + 1);
        }
    } else {
        return std::nullopt;
    }
    owners_[slot] = {&qp, &device};
    return slot;
}

void Doorbell::detach(uint32_t slot) {
    if (slot < owners_.size() && owners_[slot].qp) {
        owners_[slot] = {};
        ranges_[engine_of(slot)].free.push_back(slot);
    }
}

bool Doorbell::any_posted(uint32_t engine) const {
    const uint32_t first = engine * slots_per_engine_ / kSlotsPerSummaryWord;
    const uint32_t end = first + slots_per_engine_ / kSlotsPerSummaryWord;
    for (uint32_t s = first; s < end; ++s) {
        if (bits().summary[s].load()) {
            return true;
        }
    }
    return false;
}

}  // namespace uroce
