#include "engine/cpu_shortage.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

namespace uroce {

CpuShortage::CpuShortage()
    : schedstat_(open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}

int64_t CpuShortage::run_delay() const {
    // "<ns on a CPU> <ns waiting for one> <timeslices>"
    char text[96];
    const ssize_t n = schedstat_ ? pread(schedstat_.get(), text, sizeof(text) - 1, 0) : -1;
    if (n <= 0) {
        return -1;
    }
    text[n] = '\0';
    char* end = nullptr;
    strtoll(text, &end, 10);
    const long long delay = strtoll(end, &end, 10);
    return end && *end == ' ' ? delay : -1;
}

bool CpuShortage::update(Clock::time_point now) {
    if (!schedstat_ || (sampled_ && now - last_ < kWindow)) {
        return now < short_until_;
    }
    return observe(now, run_delay());
}

bool CpuShortage::observe(Clock::time_point now, int64_t run_delay) {
    if (sampled_ && now - last_ < kWindow) {
        return now < short_until_;
    }
    // Waiting a tenth of the time or more.
    if (sampled_ && run_delay >= 0 && last_delay_ >= 0 &&
        std::chrono::nanoseconds(run_delay - last_delay_) * 10 >= now - last_) {
        short_until_ = now + kHold;
    }
    sampled_ = true;
    last_delay_ = run_delay;
    last_ = now;
    return now < short_until_;
}

}  // namespace uroce
