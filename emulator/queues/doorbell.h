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
    static Result create(Doorbell& out);

    int eventfd() const { return eventfd_.get(); }
    int page_fd() const { return memory_.fd(); }
    queues::DoorbellPage& page() const {
        return *static_cast<queues::DoorbellPage*>(memory_.data());
    }

    // A QP's slot, while it exists; nullopt when all kDoorbellSlots are taken.
    std::optional<uint32_t> attach(Qp& qp, Device& device);
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
    // Whether some slot's bit is set.
    bool any_posted() const;
    // Calls `each(slot)` for every slot whose bit is set, clearing the bits
    // first; what a client published before setting a bit is visible after.
    template <class Each>
    void take_posted(Each each);

  private:
    queues::DoorbellBits& bits() const {
        return *reinterpret_cast<queues::DoorbellBits*>(static_cast<std::byte*>(memory_.data()) +
                                                        queues::kDoorbellPageBytes);
    }

    UniqueFd eventfd_;
    SharedMemory memory_;
    std::vector<Owner> owners_;  // by slot
    std::vector<uint32_t> free_slots_;
    std::vector<uint32_t> taken_;  // take_posted's, kept for reuse
};

template <class Each>
void Doorbell::take_posted(Each each) {
    taken_.clear();
    queues::DoorbellBits& b = bits();
    for (uint32_t s = 0; s < std::size(b.summary); ++s) {
        if (!b.summary[s].load(std::memory_order_relaxed)) {
            continue;
        }
        for (uint64_t words = b.summary[s].exchange(0); words; words &= words - 1) {
            const uint32_t word = s * 64 + __builtin_ctzll(words);
            for (uint64_t slots = b.posted[word].exchange(0); slots; slots &= slots - 1) {
                taken_.push_back(word * 64 + __builtin_ctzll(slots));
            }
        }
    }
    if (taken_.empty()) {
        return;
    }
    // Pairs with the fence a client passes between publishing entries and
    // looking at the bit (queues::mark_posted).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (const uint32_t slot : taken_) {
        each(slot);
    }
}

}  // namespace uroce
