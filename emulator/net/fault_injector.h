// Faults injected on a device's outgoing packets, for testing recovery:
// loss, duplication, reordering and delay, each with its own probability.
#pragma once

#include <chrono>
#include <random>

namespace uroce {

struct FaultSettings {
    double drop = 0;                     // probability a packet is lost
    double duplicate = 0;                // probability it is sent twice
    double reorder = 0;                  // probability it is held back behind later packets
    std::chrono::microseconds delay{0};  // added to every packet
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

    void configure(const FaultSettings& settings) { settings_ = settings; }
    const FaultSettings& settings() const { return settings_; }
    bool active() const {
        return settings_.drop > 0 || settings_.duplicate > 0 || settings_.reorder > 0 ||
               settings_.delay.count() > 0;
    }
    FaultVerdict decide();

  private:
    bool chance(double probability) { return probability > 0 && uniform_(random_) < probability; }

    FaultSettings settings_;
    std::mt19937_64 random_{std::random_device{}()};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace uroce
