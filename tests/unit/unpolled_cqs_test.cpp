// What the daemon tells spinning pollers (DoorbellPage::completions_waiting):
// set while a CQ holds a completion its program has not taken, cleared once
// the program takes it, when it took nothing for the patience (no program
// spins on that CQ) and when the CQ is destroyed; and when a program counts
// as starving (taking nothing for a while), when the daemon gives its CPU
// away. Runs a real engine on the receive harness (receive_harness.h),
// whose clock stands still: the engine drops a CQ after kPatience (1 ms),
// which a loaded machine can spend between two of the engine's turns.
#include <gtest/gtest.h>

#include "receive_harness.h"

namespace uroce::test {
namespace {

using H = ReceiveHarness;

class UnpolledCqsTest : public ::testing::Test {
  protected:
    UnpolledCqsTest() { h.freeze_clock(start_); }

    bool waiting() { return h.engines().doorbell().page().completions_waiting.load(); }

    // A SEND from the peer that completes a receive on the harness's CQ.
    void receive_one() {
        h.post_recv(h.rtr(), next_psn_, 0, 64);
        const std::vector<uint8_t> data(16, 0x42);
        h.send(rc_request(wire::Operation::kSendOnly, h.rtr().qpn, next_psn_++), data);
    }

    H h;
    const transport::Clock::time_point start_ = transport::Clock::now();
    uint32_t next_psn_ = H::kRqPsn;
};

TEST_F(UnpolledCqsTest, SetWhileACompletionWaitsAndClearedOnceItIsTaken) {
    h.settle();
    EXPECT_FALSE(waiting()) << "no completion yet";
    receive_one();
    EXPECT_TRUE(waiting());
    receive_one();
    EXPECT_TRUE(waiting());
    ASSERT_EQ(h.poll_cq().size(), 2u);
    EXPECT_TRUE(waiting()) << "cleared before the daemon looked again";
    h.settle();
    EXPECT_FALSE(waiting());
}

TEST_F(UnpolledCqsTest, AProgramThatTakesNothingIsStarvingThenForgotten) {
    UnpolledCqs& cqs = h.device().unpolled_cqs();
    receive_one();
    receive_one();
    receive_one();
    // Each take is progress: the program's clock starts again there.
    ASSERT_EQ(h.poll_cq(1).size(), 1u);
    cqs.refresh(start_);
    EXPECT_TRUE(cqs.any());
    EXPECT_FALSE(cqs.starving());
    cqs.refresh(start_ + UnpolledCqs::kStarving / 2);
    EXPECT_FALSE(cqs.starving());
    cqs.refresh(start_ + UnpolledCqs::kStarving * 2);
    EXPECT_TRUE(cqs.starving()) << "nothing taken for longer than kStarving";

    ASSERT_EQ(h.poll_cq(1).size(), 1u);
    const auto progress = start_ + UnpolledCqs::kStarving * 3;
    cqs.refresh(progress);
    EXPECT_TRUE(cqs.any()) << "one completion still waits";
    EXPECT_FALSE(cqs.starving());
    cqs.refresh(progress + UnpolledCqs::kStarving * 2);
    EXPECT_TRUE(cqs.starving());

    const auto forgotten = progress + UnpolledCqs::kPatience * 2;
    cqs.refresh(forgotten);
    EXPECT_FALSE(cqs.any()) << "a CQ nobody polls would make every poller yield for ever";
    EXPECT_FALSE(cqs.starving());
    h.freeze_clock(forgotten);
    receive_one();
    EXPECT_TRUE(waiting()) << "its next completion counts again";
    ASSERT_EQ(h.poll_cq().size(), 2u);
    h.settle();
    EXPECT_FALSE(waiting());
}

TEST_F(UnpolledCqsTest, DestroyingTheCqForgetsItsCompletions) {
    receive_one();
    EXPECT_TRUE(waiting());
    // The client goes away with its completion untaken: its CQ is destroyed
    // with the rest of its objects.
    h.close_context();
    h.settle();
    EXPECT_FALSE(waiting());
}

}  // namespace
}  // namespace uroce::test
