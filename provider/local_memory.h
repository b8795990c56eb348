// The memory regions a context registered over its own memory, by lkey, so
// that ibv_post_send can copy a small message at once (see
// queues::kPrefetchBytes) instead of the daemon reading it with a system
// call. Only the daemon decides whether a key may be used: a range found
// here is only known to be this process's registered memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <shared_mutex>
#include <unordered_map>

namespace uroce {

class LocalMemory {
  public:
    // `iova` is the address the lkey's work requests name; `addr` is where
    // that memory is in this process.
    void add(uint32_t lkey, uint64_t iova, const void* addr, size_t length);
    void remove(uint32_t lkey);
    // Where the lkey's [iova, iova + length) is in this process, or null.
    const std::byte* find(uint32_t lkey, uint64_t iova, uint64_t length) const;

    struct Region {
        uint64_t iova;
        const std::byte* addr;
        size_t length;
    };
    // The region behind an lkey (for ibv_rereg_mr, which keeps what it does
    // not change).
    bool region(uint32_t lkey, Region& out) const;

  private:
    mutable std::shared_mutex lock_;  // writers: reg/rereg/dereg; readers: post_send
    std::unordered_map<uint32_t, Region> regions_;
};

}  // namespace uroce
