// Step mode: a paused device's wire. Its outgoing packets wait here in the
// order they were sent, until a person releases them one at a time, drops
// or duplicates one, or lets the wire run again. The programs on top keep
// running and simply wait, as on a congested network; their timers are
// real. The control plane acts on the gate; what it lets go waits in the
// outbox until the engine's next turn sends it on (faults still apply).
// Bounded: a full gate refuses a packet, which the caller drops and counts,
// as a full switch buffer would.
#pragma once

#include <stdint.h>

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

#include "net/outgoing_packet.h"

namespace uroce {

class StepGate {
  public:
    static constexpr size_t kMaxHeld = 1024;

    struct Packet : OutgoingPacket {
        uint64_t id = 0;  // from 1, in sending order, never reused on the device
        std::chrono::steady_clock::time_point held_at;
    };

    bool paused() const { return paused_; }
    void pause() { paused_ = true; }
    // The wire runs again: every held packet goes, oldest first.
    void run();
    // As new: not paused, nothing held or let go (uroce reset).
    void clear() {
        paused_ = false;
        held_.clear();
        outbox_.clear();
    }

    // Holds a copy of a packet of the paused wire; its id, or 0 when the
    // gate is full.
    uint64_t hold(const OutgoingPacket& packet);
    // Lets the held packet `id` go (the oldest when id is 0); its id, or 0
    // when there is none.
    uint64_t release(uint64_t id = 0);
    // Sends a copy of it now and keeps holding it.
    uint64_t duplicate(uint64_t id = 0);
    // Loses it.
    uint64_t drop(uint64_t id = 0);
    // The held packet `id` (the oldest when 0); null when none.
    const Packet* find(uint64_t id = 0) const;
    const std::deque<Packet>& held() const { return held_; }

    // The engine's side: what was let go, in order.
    bool has_outgoing() const { return !outbox_.empty(); }
    std::deque<Packet> take_outgoing();

  private:
    std::deque<Packet>::iterator locate(uint64_t id);

    bool paused_ = false;
    uint64_t next_id_ = 1;
    std::deque<Packet> held_;
    std::deque<Packet> outbox_;
};

}  // namespace uroce
