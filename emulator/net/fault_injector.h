// Faults injected on a device's outgoing packets, for testing recovery:
// loss, duplication, reordering and delay, each with its own probability.
// With a seed, each packet's fate follows from the seed and the packet's
// identity (PacketIdentity) and how often it was sent before, not from
// time or arrival order: the same program meets the same faults in every
// run (after uroce reset, which restarts QP numbering). A replayed
// schedule (`uroce fault --replay`) gives the packets it names, by identity
// and attempt, the fates recorded for them and lets the others pass.
#pragma once

#include <stdint.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/fault_log.h"

namespace uroce {

struct FaultSettings {
    double drop = 0;                     // probability a packet is lost
    double duplicate = 0;                // probability it is sent twice
    double reorder = 0;                  // probability it is held back behind later packets
    std::chrono::microseconds delay{0};  // added to every packet
    std::optional<uint64_t> seed;        // decisions from packet identities
};

// A packet as seeded faults know it: what stays the same from one run of a
// program to the next.
struct PacketIdentity {
    uint32_t src_qpn = 0;
    uint32_t dest_qpn = 0;
    uint8_t opcode = 0;
    uint32_t psn_offset = 0;  // from the sending QP's first PSN of that direction
    uint64_t mad_tid = 0;     // a MAD's transaction (QP 1's datagrams)
    bool operator==(const PacketIdentity&) const = default;
};

// What happens to one packet.
struct FaultVerdict {
    bool drop = false;
    int copies = 1;
    std::chrono::microseconds delay{0};
    // Whether a decision log records it: anything but passing untouched.
    bool acts() const { return drop || copies > 1 || delay.count() > 0; }
};

// One decision of a replayed schedule.
struct ScheduledFault {
    PacketIdentity packet;
    uint32_t attempt = 0;
    FaultVerdict verdict;
};

class FaultInjector {
  public:
    // How long a reordered packet is held back (later packets overtake it).
    static constexpr std::chrono::microseconds kReorderHold{200};

    // At most this many decisions in a replayed schedule.
    static constexpr size_t kMaxScheduled = 1 << 18;

    // New settings; a schedule being replayed ends.
    void configure(const FaultSettings& settings);
    // Replaces the settings with the schedule (at most kMaxScheduled
    // entries, the rest ignored). When a decision repeats the packet and
    // attempt of an earlier one, nothing changes and its index is returned.
    std::optional<size_t> replay(const std::vector<ScheduledFault>& schedule);
    const FaultSettings& settings() const { return settings_; }
    // "drop 0.1 duplicate 0 reorder 0 delay 0us seed 5", or "replaying N decisions".
    std::string text() const;
    size_t replaying() const { return schedule_.size(); }
    bool active() const {
        return settings_.drop > 0 || settings_.duplicate > 0 || settings_.reorder > 0 ||
               settings_.delay.count() > 0 || !schedule_.empty();
    }
    // Whether decide(packet) needs the packet's identity: seeded, replaying
    // or recording.
    bool wants_identity() const { return settings_.seed || !schedule_.empty() || log_.is_open(); }
    FaultVerdict decide();
    // By the packet and its attempt (the times a packet with this identity
    // was decided before): from the schedule being replayed, else from the
    // seed, else by chance. The log records each decision that acts.
    FaultVerdict decide(const PacketIdentity& packet);
    // The record `uroce trace --faults` keeps; opening it records the settings.
    void record_to(UniqueFd file);
    FaultLog& log() { return log_; }

  private:
    struct Scheduled {
        PacketIdentity packet;
        uint32_t attempt;
        bool operator==(const Scheduled&) const = default;
    };
    struct ScheduledHash {
        size_t operator()(const Scheduled& s) const;
    };

    bool chance(double probability) { return probability > 0 && uniform_(random_) < probability; }
    template <class Draw>
    FaultVerdict verdict(Draw&& chance) const;

    // Attempts by identity; forgotten all at once past kRemembered.
    static constexpr size_t kRemembered = 1 << 16;
    std::unordered_map<uint64_t, uint32_t> attempts_;
    std::unordered_map<Scheduled, FaultVerdict, ScheduledHash> schedule_;
    FaultLog log_;

    FaultSettings settings_;
    std::mt19937_64 random_{std::random_device{}()};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace uroce
