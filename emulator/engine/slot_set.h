// A set of doorbell slots in the order they joined: the engine's lists of
// QPs that get turns. Adding is O(1) and may happen while the set is walked
// by index; a removed slot leaves at the next compact().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uroce {

class SlotSet {
  public:
    explicit SlotSet(size_t slots) : member_(slots) {}

    // A slot out of range is ignored.
    void add(uint32_t slot) {
        if (slot < member_.size() && !member_[slot]) {
            member_[slot] = true;
            order_.push_back(slot);
        }
    }
    // `slot` leaves at the next compact(), unless it is added again before.
    void remove(uint32_t slot) { member_[slot] = false; }

    // Drops the removed slots, and the second entry of a slot that was
    // removed and added back.
    void compact() {
        size_t kept = 0;
        for (const uint32_t slot : order_) {
            if (member_[slot]) {
                member_[slot] = false;
                order_[kept++] = slot;
            }
        }
        order_.resize(kept);
        for (const uint32_t slot : order_) {
            member_[slot] = true;
        }
    }

    size_t size() const { return order_.size(); }
    uint32_t operator[](size_t index) const { return order_[index]; }

  private:
    std::vector<uint32_t> order_;
    std::vector<bool> member_;  // by slot
};

}  // namespace uroce
