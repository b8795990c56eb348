// Faults injected on a device's outgoing packets, for testing recovery:
// loss, duplication, reordering and delay, each with its own probability.
// With a seed, each packet's fate follows from the seed and the packet's
// identity (PacketIdentity) and how often it was sent before, not from
// time or arrival order: the same program meets the same faults in every
// run (after uroce reset, which restarts QP numbering).
#pragma once

#include <stdint.h>

#include <chrono>
#include <optional>
#include <random>
#include <unordered_map>

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
};

// What happens to one packet.
struct FaultVerdict {
    bool drop = false;
    int copies = 1;
    std::chrono::microseconds delay{0};
};

class FaultInjector {
  public:
    // How long a reordered packet is held back (later packets overtake it).
    static constexpr std::chrono::microseconds kReorderHold{200};

    void configure(const FaultSettings& settings) {
        settings_ = settings;
        attempts_.clear();
    }
    const FaultSettings& settings() const { return settings_; }
    bool active() const {
        return settings_.drop > 0 || settings_.duplicate > 0 || settings_.reorder > 0 ||
               settings_.delay.count() > 0;
    }
    FaultVerdict decide();
    // Seeded: from the seed, `packet` and its attempt (the times a packet
    // with this identity was decided before); unseeded: decide().
    FaultVerdict decide(const PacketIdentity& packet);

  private:
    bool chance(double probability) { return probability > 0 && uniform_(random_) < probability; }
    template <class Draw>
    FaultVerdict verdict(Draw&& chance) const;

    // Attempts by identity; forgotten all at once past kRemembered.
    static constexpr size_t kRemembered = 1 << 16;
    std::unordered_map<uint64_t, uint32_t> attempts_;

    FaultSettings settings_;
    std::mt19937_64 random_{std::random_device{}()};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace uroce
