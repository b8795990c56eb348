// Buffers the requester reads a message into before its packets leave.
// They are reused: a 64 KiB buffer allocated per message and freed at its
// completion made malloc give the memory back to the kernel and fault it
// in again, zeroed, for the next message; that cost more than the copies.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <vector>

namespace uroce::transport {

// How much of a message the requester reads from the application at once.
inline constexpr uint64_t kStageBytes = 64 * 1024;

using StageBuffer = std::unique_ptr<std::byte[]>;  // kStageBytes, not zeroed

class StagePool {
  public:
    // Spare buffers kept; a buffer given back beyond them is freed.
    static constexpr size_t kKept = 64;

    StageBuffer take();
    void give(StageBuffer buffer);
    size_t spare() const { return spare_.size(); }

  private:
    std::vector<StageBuffer> spare_;
};

}  // namespace uroce::transport
