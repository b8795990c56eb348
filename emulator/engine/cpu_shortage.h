// Whether the engine waits for a CPU: on a machine with fewer cores than
// busy threads (two cores, a daemon and two programs spinning on their
// CQs), the engine spends much of its time runnable but not running, and
// every cycle a poller spins on an empty CQ is one the engine needed. The
// kernel counts that waiting per thread (schedstat's run_delay); while it
// is a tenth of the time or more, and for a second after, the doorbell
// page says so, and pollers whose CQ stays empty for 20 us sleep until a
// completion (queues::CqState::sleeping) instead of spinning on.
#pragma once

#include <stdint.h>

#include <chrono>

#include "util/unique_fd.h"

namespace uroce {

class CpuShortage {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr auto kWindow = std::chrono::milliseconds(10);
    static constexpr auto kHold = std::chrono::seconds(1);

    // Reads the calling thread's schedstat (none where the kernel keeps
    // no scheduler statistics: never short, as before).
    CpuShortage();

    // Whether the engine is short of a CPU now (schedstat read at most once
    // per window).
    bool update(Clock::time_point now);
    // The rule, over `run_delay` (ns the thread has waited for a CPU since
    // it started; -1 when unknown) as read at `now`.
    bool observe(Clock::time_point now, int64_t run_delay);

  private:
    // Nanoseconds the thread has waited for a CPU since it started; -1
    // when unknown.
    int64_t run_delay() const;

    UniqueFd schedstat_;
    bool sampled_ = false;
    Clock::time_point last_{};
    int64_t last_delay_ = -1;
    Clock::time_point short_until_{};
};

}  // namespace uroce
