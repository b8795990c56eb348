// Step mode: a paused device's wire. Its outgoing packets wait here in the
// order they were sent, until a person releases them one at a time, drops
// or duplicates one, or lets the wire run again. The programs on top keep
// running and simply wait, as on a congested network; their timers are
// real. Bounded: a full gate refuses the packet, which the caller drops and
// counts, as a full switch buffer would.
#pragma once

#include <stdint.h>

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

namespace uroce {

class StepGate {
  public:
    static constexpr size_t kMaxHeld = 1024;

    struct Packet {
        uint64_t id = 0;  // from 1, in sending order, never reused on the device
        uint32_t dest_ipv4 = 0;
        uint16_t src_port = 0;
        std::vector<uint8_t> bytes;  // the UDP payload (or a raw frame)
        bool frame = false;          // a RAW_PACKET QP's Ethernet frame
        std::chrono::steady_clock::time_point held_at;
    };

    bool paused() const { return paused_; }
    void pause() { paused_ = true; }
    // The wire runs again: every held packet, oldest first, for sending.
    std::deque<Packet> run();

    // Holds a packet of the paused wire; false when the gate is full.
    bool hold(Packet packet);
    // Takes out the held packet `id`, or the oldest when id is 0; nullopt
    // when there is none.
    std::optional<Packet> take(uint64_t id = 0);
    // The held packet `id`, or the oldest when id is 0; null when none.
    const Packet* find(uint64_t id = 0) const;
    const std::deque<Packet>& held() const { return held_; }
    // Drops every held packet (the device goes); returns how many.
    size_t clear();

  private:
    bool paused_ = false;
    uint64_t next_id_ = 1;
    std::deque<Packet> held_;
};

}  // namespace uroce
