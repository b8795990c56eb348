// The engine's rule for being short of a CPU (engine/cpu_shortage.h): a
// tenth of a window spent waiting for one says so, for a second after.
#include "engine/cpu_shortage.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

using std::chrono::milliseconds;
constexpr int64_t kMs = 1000000;  // ns

TEST(CpuShortageTest, ATenthOfAWindowWaitingIsShortForASecondAfter) {
    CpuShortage shortage;
    const auto t0 = CpuShortage::Clock::time_point{} + std::chrono::hours(1);
    EXPECT_FALSE(shortage.observe(t0, 0)) << "one sample says nothing";
    EXPECT_FALSE(shortage.observe(t0 + milliseconds(10), 0 + 999999)) << "under a tenth";
    EXPECT_TRUE(shortage.observe(t0 + milliseconds(20), 999999 + kMs)) << "a tenth";
    // Samples within a window are not taken: the answer stands.
    EXPECT_TRUE(shortage.observe(t0 + milliseconds(25), 999999 + kMs));
    EXPECT_TRUE(shortage.observe(t0 + milliseconds(30), 999999 + kMs)) << "held";
    EXPECT_TRUE(shortage.observe(t0 + milliseconds(1019), 999999 + kMs)) << "held";
    EXPECT_FALSE(shortage.observe(t0 + milliseconds(1020), 999999 + kMs)) << "a second after";
}

TEST(CpuShortageTest, AnUnknownDelayIsNeverShort) {
    CpuShortage shortage;
    const auto t0 = CpuShortage::Clock::time_point{} + std::chrono::hours(1);
    EXPECT_FALSE(shortage.observe(t0, -1));
    EXPECT_FALSE(shortage.observe(t0 + milliseconds(10), 100 * kMs));
    EXPECT_FALSE(shortage.observe(t0 + milliseconds(20), -1));
}

}  // namespace
}  // namespace uroce
