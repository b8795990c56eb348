#include "util/rate_limit.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

using std::chrono::milliseconds;

TEST(RateLimit, ABurstThenTheSteadyRate) {
    RateLimit limit(5, 10);
    const auto t0 = RateLimit::Clock::time_point{} + std::chrono::hours(1);
    for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(limit.allow(t0)) << i;
        EXPECT_EQ(limit.suppressed(), 0u);
    }
    for (int i = 0; i < 7; ++i) {
        EXPECT_FALSE(limit.allow(t0)) << i;
    }
    // 10 a second: one more after 100 ms, and it says what was held back.
    EXPECT_FALSE(limit.allow(t0 + milliseconds(50)));
    EXPECT_TRUE(limit.allow(t0 + milliseconds(101)));
    EXPECT_EQ(limit.suppressed(), 8u);
    EXPECT_FALSE(limit.allow(t0 + milliseconds(120)));
    // A long quiet spell refills the burst, and no more.
    const auto later = t0 + std::chrono::seconds(60);
    for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(limit.allow(later)) << i;
    }
    EXPECT_EQ(limit.suppressed(), 0u);
    EXPECT_FALSE(limit.allow(later));
}

TEST(RateLimit, TimeGoingBackwardsGivesNothing) {
    RateLimit limit(1, 1000);
    const auto t0 = RateLimit::Clock::time_point{} + std::chrono::hours(1);
    EXPECT_TRUE(limit.allow(t0));
    EXPECT_FALSE(limit.allow(t0 - std::chrono::seconds(10)));
}

}  // namespace
}  // namespace uroce
