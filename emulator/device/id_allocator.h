// Hands out the lowest free number in [first, last]; used for QP numbers,
// key indexes, SRQ and WQ numbers, which are device-wide and reused.
#pragma once

#include <stdint.h>

#include <optional>
#include <set>

namespace uroce {

class IdAllocator {
  public:
    IdAllocator(uint32_t first, uint32_t last) : first_(first), last_(last), next_(first) {}

    // Numbers are handed out round-robin so that a freed number is not
    // reused at once (a late packet must not reach a new QP).
    std::optional<uint32_t> allocate() {
        const uint64_t span = uint64_t{last_} - first_ + 1;
        if (used_.size() >= span) {
            return std::nullopt;
        }
        while (used_.contains(next_)) {
            next_ = next_ == last_ ? first_ : next_ + 1;
        }
        uint32_t id = next_;
        used_.insert(id);
        next_ = next_ == last_ ? first_ : next_ + 1;
        return id;
    }
    void release(uint32_t id) { used_.erase(id); }
    // Hands out numbers from the first again, as at start, when none is in
    // use (uroce reset: the same program then gets the same numbers).
    void restart() {
        if (used_.empty()) {
            next_ = first_;
        }
    }
    size_t in_use() const { return used_.size(); }

  private:
    uint32_t first_;
    uint32_t last_;
    uint32_t next_;
    std::set<uint32_t> used_;
};

}  // namespace uroce
