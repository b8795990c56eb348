#include "wire/psn.h"

#include <gtest/gtest.h>

#include <random>

namespace uroce::wire {
namespace {

constexpr uint32_t kTwo24 = 1u << 24;
constexpr uint32_t kTwo23 = 1u << 23;

static_assert(psn_add(0xffffff, 1) == 0);
static_assert(psn_diff(0, 0xffffff) == 1);
static_assert(psn_before(0xffffff, 0));

TEST(wirePsn, AddWrapsAt24Bits) {
    EXPECT_EQ(kPsnMask, kTwo24 - 1);
    EXPECT_EQ(psn_add(0, 0), 0u);
    EXPECT_EQ(psn_add(0xfffffe, 1), 0xffffffu);
    EXPECT_EQ(psn_add(0xffffff, 1), 0u);
    EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
    EXPECT_EQ(psn_add(5, kTwo24), 5u);
    EXPECT_EQ(psn_add(0x123456, 0xffffff), 0x123455u);  // adding 2^24 - 1 steps back by one
}

TEST(wirePsn, DiffIsTheShortWayRound) {
    EXPECT_EQ(psn_diff(5, 5), 0);
    EXPECT_EQ(psn_diff(6, 5), 1);
    EXPECT_EQ(psn_diff(5, 6), -1);
    EXPECT_EQ(psn_diff(1, 0xffffff), 2);
    EXPECT_EQ(psn_diff(0xffffff, 1), -2);
    EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);
    EXPECT_EQ(psn_diff(0x800001, 0), -0x7fffff);
    // Exactly half way round counts as ahead, from either side.
    EXPECT_EQ(psn_diff(0x800000, 0), static_cast<int32_t>(kTwo23));
    EXPECT_EQ(psn_diff(0, 0x800000), static_cast<int32_t>(kTwo23));
    // Bits above the PSN are ignored.
    EXPECT_EQ(psn_diff(0x01000003, 0xff000001), 2);
}

TEST(wirePsn, DiffUndoesAddOverTheWholeRange) {
    std::mt19937 rng(7);
    const int64_t distances[] = {
        0, 1, -1, 2, -2, 1000, -1000, kTwo23 - 1, -(int64_t{kTwo23} - 1), kTwo23};
    for (int i = 0; i < 2000; ++i) {
        const uint32_t base = rng() & kPsnMask;
        for (int64_t d : distances) {
            // base + d reduced mod 2^24 without the library.
            const uint32_t moved =
                static_cast<uint32_t>(((int64_t{base} + d) % kTwo24 + kTwo24) % kTwo24);
            ASSERT_EQ(psn_diff(moved, base), d) << base << " " << d;
            if (d >= 0) {
                ASSERT_EQ(psn_add(base, static_cast<uint32_t>(d)), moved);
            }
        }
        const uint32_t other = rng() & kPsnMask;
        const int32_t d = psn_diff(other, base);
        ASSERT_GT(d, -static_cast<int32_t>(kTwo23));
        ASSERT_LE(d, static_cast<int32_t>(kTwo23));
    }
}

TEST(wirePsn, BeforeAndAfterAcrossTheWrap) {
    EXPECT_TRUE(psn_before(0xfffff0, 0x10));
    EXPECT_FALSE(psn_before(0x10, 0xfffff0));
    EXPECT_TRUE(psn_after(0x10, 0xfffff0));
    EXPECT_FALSE(psn_after(0xfffff0, 0x10));
    EXPECT_FALSE(psn_before(7, 7));
    EXPECT_FALSE(psn_after(7, 7));
    EXPECT_TRUE(psn_before(0, 1));
    EXPECT_TRUE(psn_after(1, 0));
}

TEST(wirePsn, InRangeIsInclusiveAndWraps) {
    EXPECT_TRUE(psn_in_range(0xfffffe, 0xfffffe, 2));
    EXPECT_TRUE(psn_in_range(0xffffff, 0xfffffe, 2));
    EXPECT_TRUE(psn_in_range(0, 0xfffffe, 2));
    EXPECT_TRUE(psn_in_range(2, 0xfffffe, 2));
    EXPECT_FALSE(psn_in_range(3, 0xfffffe, 2));
    EXPECT_FALSE(psn_in_range(0xfffffd, 0xfffffe, 2));
    EXPECT_TRUE(psn_in_range(9, 9, 9));
    EXPECT_FALSE(psn_in_range(10, 9, 9));
    EXPECT_FALSE(psn_in_range(5, 10, 1));  // last before first: empty
}

}  // namespace
}  // namespace uroce::wire
