// The daemon's doorbell: an eventfd clients write after producing entries,
// but only while the shared DoorbellPage says the daemon is about to sleep;
// and the doorbell bits, one slot per QP, that say which QPs' queues have
// new entries (see protocol/queues.h).
#pragma once

#include <atomic>
#include <iterator>
#include <optional>
#include <vector>

#include "protocol/queues.h"
#include "queues/shared_memory.h"
#include "util/unique_fd.h"

namespace uroce {

class Device;
struct Qp;

class Doorbell {
  public:
    // `engines`: engine threads, each with a range of slots of its own
    // (at most queues::kMaxEngines).
    static Result create(Doorbell& out, uint32_t engines = 1);

    int eventfd() const { return eventfd_.get(); }
    int page_fd() const { return memory_.fd(); }
    queues::DoorbellPage& page() const {
        return *static_cast<queues::DoorbellPage*>(memory_.data());
    }

    // A QP's slot, in the range of its device's engine, while it exists;
    // nullopt when all that range's slots are taken.
    std::optional<uint32_t> attach(Qp& qp, Device& device, uint32_t engine);
    uint32_t slots_per_engine() const { return slots_per_engine_; }
    uint32_t engine_of(uint32_t slot) const { return slot / slots_per_engine_; }
    void detach(uint32_t slot);
    struct Owner {
        Qp* qp = nullptr;  // null: the slot is free
        Device* device = nullptr;
    };
    Owner owner(uint32_t slot) const { return slot < owners_.size() ? owners_[slot] : Owner{}; }

    // Sets a slot's bit from the daemon's side: its QP is looked at on the
    // engine's next turn (after a control request changed it). No slot
    // (kNoDoorbellSlot): nothing.
    void post(uint32_t slot) {
        if (slot < queues::kDoorbellSlots) {
            queues::mark_posted(bits(), slot);
        }
    }
    // Whether some slot of the engine's range has its bit set.
    bool any_posted(uint32_t engine) const;
    // Calls `each(slot)` for every slot of the engine's range whose bit is
    // set, clearing the bits first; what a client published before setting
    // a bit is visible after. Engines take only their own range's bits.
    template <class Each>
    void take_posted(uint32_t engine, Each each);

  private:
    queues::DoorbellBits& bits() const {
        return *reinterpret_cast<queues::DoorbellBits*>(static_cast<std::byte*>(memory_.data()) +
                                                        queues::kDoorbellPageBytes);
    }

    UniqueFd eventfd_;
    SharedMemory memory_;
    // Bits of `summary` per engine: each summary word covers 64 × 64 slots.
    static constexpr uint32_t kSlotsPerSummaryWord = 64 * 64;
    uint32_t slots_per_engine_ = queues::kDoorbellSlots;
    std::vector<Owner> owners_;  // by slot, as far as slots were given
    struct Range {
        uint32_t next_unused = 0;  // slots below it were given once
        std::vector<uint32_t> free;
        std::vector<uint32_t> taken;  // take_posted's, kept for reuse
    };
    // By engine: each engine's thread touches only its own (take_posted).
    std::vector<Range> ranges_;
};

template <class Each>
void Doorbell::take_posted(uint32_t engine, Each each) {
    std::vector<uint32_t>& taken = ranges_[engine].taken;
    taken.clear();
    queues::DoorbellBits& b = bits();
    const uint32_t first = engine * slots_per_engine_ / kSlotsPerSummaryWord;
    const uint32_t end = first + slots_per_engine_ / kSlotsPerSummaryWord;
    for (uint32_t s = first; s < end; ++s) {
        if (!b.summary[s].load(std::memory_order_relaxed)) {
            continue;
        }
        for (uint64_t words = b.summary[s].exchange(0); words; words &= words - 1) {
            const uint32_t word = s * 64 + __builtin_ctzll(words);
            for (uint64_t slots = b.posted[word].exchange(0); slots; slots &= slots - 1) {
                taken.push_back(word * 64 + __builtin_ctzll(slots));
            }
        }
    }
    if (taken.empty()) {
        return;
    }
    // Pairs with the fence a client passes between publishing entries and
    // looking at the bit (queues::mark_posted).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (const uint32_t slot : taken) {
        each(slot);
    }
}

}  // namespace uroce
