// The packets the devices send, for the console's ladder: a bounded ring the
// engine fills only while a console is open (otherwise a packet costs one
// test of a flag). Each record keeps the packet's first kMaxBytes; a reader
// that falls more than kCapacity packets behind is told how many it missed.
#pragma once

#include <stdint.h>

#include <array>
#include <chrono>
#include <mutex>
#include <span>
#include <vector>

#include "wire/ip_address.h"
#include "wire/packet.h"

namespace uroce {

class PacketLog {
  public:
    static constexpr size_t kCapacity = 8192;
    static constexpr size_t kMaxBytes = 256;

    enum class Fate : uint8_t {
        kSent,      // onto the wire (each copy of a duplicate, too)
        kLost,      // to a fault, or dropped in step mode
        kHeld,      // by a paused wire
        kReleased,  // let go by step mode (a kSent or kLost follows)
    };

    struct Record {
        uint64_t seq = 0;  // from 1
        std::chrono::steady_clock::time_point at;
        uint32_t device_index = 0;  // the sender
        wire::IpAddress src_ip;
        wire::IpAddress dest_ip;
        uint16_t src_port = 0;
        uint32_t src_qpn = 0;
        Fate fate = Fate::kSent;
        uint64_t step_id = 0;   // kHeld, kReleased: the id in the device's step gate
        uint32_t total = 0;     // bytes of the packet
        uint16_t captured = 0;  // of them in `bytes`
        std::array<uint8_t, kMaxBytes> bytes;
        // Decoded from the whole packet when recorded (`bytes` may be cut short).
        wire::ParseError error = wire::ParseError::kOk;
        const wire::OpcodeInfo* info = nullptr;
        wire::PacketHeaders headers;
        uint32_t payload_bytes = 0;
    };

    bool enabled() const { return !ring_.empty(); }
    // Starts recording into an empty ring / stops and frees it.
    void enable();
    void disable();

    void record(uint32_t device_index, const wire::IpAddress& src_ip,
                const wire::IpAddress& dest_ip, uint16_t src_port, uint32_t src_qpn, Fate fate,
                uint64_t step_id, std::span<const uint8_t> bytes);

    // The records after `seq`, oldest first; `missed` counts those after
    // `seq` that the ring no longer holds.
    std::vector<const Record*> since(uint64_t seq, uint64_t& missed) const;
    uint64_t last_seq() const { return next_seq_ - 1; }

  private:
    std::mutex record_mutex_;
    std::vector<Record> ring_;
    uint64_t next_seq_ = 1;
    // The first seq of this recording: a log enabled again holds nothing
    // of the one before.
    uint64_t first_seq_ = 1;
};

}  // namespace uroce
