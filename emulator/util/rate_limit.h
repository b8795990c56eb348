// A token bucket for log lines: a burst, then a steady rate; what it holds
// back is counted, so the next line that passes can say how many were not
// written.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <chrono>

namespace uroce {

class RateLimit {
  public:
    using Clock = std::chrono::steady_clock;

    RateLimit(uint32_t burst, uint32_t per_second)
        : burst_(burst), per_second_(per_second), tokens_(burst) {}

    // Whether a line may be written now. When it may, suppressed() says how
    // many were held back since the last one that was.
    bool allow(Clock::time_point now) {
        if (started_) {
            const double seconds = std::chrono::duration<double>(now - last_).count();
            tokens_ = std::min<double>(burst_, tokens_ + std::max(0.0, seconds) * per_second_);
        }
        started_ = true;
        last_ = now;
        if (tokens_ < 1) {
            ++held_back_;
            return false;
        }
        tokens_ -= 1;
        suppressed_ = held_back_;
        held_back_ = 0;
        return true;
    }
    uint64_t suppressed() const { return suppressed_; }

  private:
    uint32_t burst_;
    uint32_t per_second_;
    double tokens_;
    bool started_ = false;
    Clock::time_point last_{};
    uint64_t held_back_ = 0;
    uint64_t suppressed_ = 0;
};

}  // namespace uroce
