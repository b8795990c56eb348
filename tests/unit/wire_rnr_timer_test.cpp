#include "wire/rnr_timer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace uroce::wire {
namespace {

// IBA vol.1 table 45, "RNR Timer Field Encodings", in milliseconds as the
// spec prints them, codes 0 to 31.
constexpr const char* kSpecMilliseconds =
    "655.36 0.01 0.02 0.03 0.04 0.06 0.08 0.12 0.16 0.24 0.32 0.48 0.64 0.96 1.28 1.92 "
    "2.56 3.84 5.12 7.68 10.24 15.36 20.48 30.72 40.96 61.44 81.92 122.88 163.84 245.76 "
    "327.68 491.52";

// "61.44" -> 61440 us, by digits rather than floating point.
int64_t ms_text_to_us(const std::string& ms) {
    const size_t dot = ms.find('.');
    const int64_t whole = std::stoll(ms.substr(0, dot));
    const int64_t hundredths = std::stoll(ms.substr(dot + 1));
    return whole * 1000 + hundredths * 10;
}

TEST(wireRnrTimer, AllThirtyTwoCodesMatchTheSpec) {
    std::istringstream in(kSpecMilliseconds);
    std::vector<int64_t> spec_us;
    for (std::string ms; in >> ms;) {
        spec_us.push_back(ms_text_to_us(ms));
    }
    ASSERT_EQ(spec_us.size(), 32u);
    for (int code = 0; code < 32; ++code) {
        EXPECT_EQ(rnr_nak_delay(static_cast<uint8_t>(code)).count(), spec_us[code]) << code;
        EXPECT_EQ(kRnrNakTimerUsec[code], spec_us[code]) << code;
    }
}

TEST(wireRnrTimer, OnlyTheLowFiveBitsCount) {
    EXPECT_EQ(rnr_nak_delay(32), rnr_nak_delay(0));
    EXPECT_EQ(rnr_nak_delay(0xff), rnr_nak_delay(31));
    EXPECT_EQ(rnr_nak_delay(0x2e).count(), 1280);
}

TEST(wireLocalAckTimeout, ZeroDisablesTheTimer) {
    EXPECT_FALSE(local_ack_timeout(0).has_value());
    EXPECT_FALSE(local_ack_timeout(32).has_value());
}

TEST(wireLocalAckTimeout, IsFourPointZeroNineSixMicrosecondsTimesTwoToTheValue) {
    EXPECT_EQ(local_ack_timeout(1)->count(), 8192);
    EXPECT_EQ(local_ack_timeout(14)->count(), 67108864);         // ~67 ms, a common default
    EXPECT_EQ(local_ack_timeout(31)->count(), 8796093022208LL);  // ~2.4 hours
    for (int t = 1; t < 32; ++t) {
        const double expected_ns = 4.096e3 * std::pow(2.0, t);
        EXPECT_DOUBLE_EQ(static_cast<double>(local_ack_timeout(static_cast<uint8_t>(t))->count()),
                         expected_ns)
            << t;
    }
}

}  // namespace
}  // namespace uroce::wire
