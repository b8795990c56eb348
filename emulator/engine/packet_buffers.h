// The engine's packet buffers, reused rather than allocated per packet.
// A buffer is spare, on its way out (a UDP send holds it until it
// completes), or lent: a local packet that was received may have lent its
// payload to the writes into applications (Incoming::payload_lent), so its
// buffer stays until the turn's writes are made.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace uroce {

class PacketBuffers {
  public:
    // Spare buffers kept; bursts beyond (duplicates, multicast copies) are
    // freed. It covers a window of UDP sends on their way.
    static constexpr size_t kMaxSpare = 1024;
    // Buffers lent at once; a packet beyond lends nothing.
    static constexpr size_t kMaxLent = 1024;

    std::vector<uint8_t> take() {
        std::vector<uint8_t> bytes;
        if (!spare_.empty()) {
            bytes = std::move(spare_.back());
            spare_.pop_back();
        }
        return bytes;
    }
    void recycle(std::vector<uint8_t>&& bytes) {
        if (spare_.size() < kMaxSpare) {
            spare_.push_back(std::move(bytes));
        }
    }
    // Whether the next packet received may lend its payload.
    bool can_lend() const { return lent_.size() < kMaxLent; }
    // A received packet's buffer: kept until release_lent() when it was
    // received `lent` (while can_lend() said so), else spare at once.
    void give_back(std::vector<uint8_t>&& bytes, bool lent) {
        if (lent) {
            lent_.push_back(std::move(bytes));
        } else {
            recycle(std::move(bytes));
        }
    }
    // After the writes into applications are made.
    void release_lent() {
        for (auto& bytes : lent_) {
            recycle(std::move(bytes));
        }
        lent_.clear();
    }

  private:
    std::vector<std::vector<uint8_t>> spare_;
    std::vector<std::vector<uint8_t>> lent_;
};

}  // namespace uroce
