// The device's objects that packets and peers name by number (QPs by QPN,
// SRQs and WQs by number, MRs and MWs by key index): the numbers and the
// table from number to object in one, so that no number is handed out
// without its entry, nor freed with its entry left behind. How many objects
// a client may hold is the device's ledger (Device::admit).
#pragma once

#include <stdint.h>

#include <optional>
#include <unordered_map>
#include <utility>

#include "device/id_allocator.h"

namespace uroce {

// Entry: what a number leads to (a raw pointer the object's owner removes
// before it goes, or a weak_ptr); a default Entry means none.
template <typename Entry>
class Registry {
  public:
    Registry(uint32_t first, uint32_t last) : numbers_(first, last) {}

    // A number for `entry` (round-robin: see IdAllocator); nullopt when
    // every number is taken.
    std::optional<uint32_t> add(Entry entry) {
        const std::optional<uint32_t> number = numbers_.allocate();
        if (number) {
            table_.emplace(*number, std::move(entry));
        }
        return number;
    }
    void remove(uint32_t number) {
        table_.erase(number);
        numbers_.release(number);
    }
    Entry find(uint32_t number) const {
        const auto it = table_.find(number);
        return it == table_.end() ? Entry{} : it->second;
    }
    // Every (number, entry), in no order.
    auto begin() const { return table_.begin(); }
    auto end() const { return table_.end(); }
    size_t size() const { return table_.size(); }
    void restart() { numbers_.restart(); }

  private:
    IdAllocator numbers_;
    std::unordered_map<uint32_t, Entry> table_;
};

}  // namespace uroce
