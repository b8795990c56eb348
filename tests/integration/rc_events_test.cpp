// Events of the RC data path: completion channels with ibv_req_notify_cq(3)
// armed for any or for solicited completions, and IBV_EVENT_COMM_EST
// (ibv_get_async_event(3)).
#include <poll.h>

#include <chrono>

#include "rc_pair.h"

namespace uroce::test {
namespace {

class RcEventsTest : public RcTest {
  protected:
    void SetUp() override {
        RcOptions options;
        options.channel = true;
        ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    }

    // A SEND of 16 bytes from a into a fresh receive of b, both completions
    // polled.
    void send(uint64_t wr_id, unsigned flags) {
        Buffer& source = a_.buffer(16, kRemoteAccess, static_cast<uint32_t>(wr_id) + 100);
        Buffer& target = b_.buffer(16, kRemoteAccess, 0);
        b_.post_recv(wr_id, target.sge(0, 16));
        ibv_sge sge = source.sge(0, 16);
        ibv_send_wr wr = make_wr(wr_id, IBV_WR_SEND, std::span(&sge, 1), flags);
        a_.post_send(wr);
        EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
        const ibv_wc received = b_.poll_one();
        EXPECT_EQ(received.wr_id, wr_id);
        EXPECT_EQ(received.status, IBV_WC_SUCCESS);
        EXPECT_TRUE(same_bytes(target.bytes(), source.bytes()));
    }
    // After the daemon answered a control request, every event it was to
    // write for earlier completions is written: one thread runs both.
    void settle() const { b_.state(); }
};

// Armed for any completion, both CQs signal their channels with the CQ
// and its cq_context; one event per arming.
TEST_F(RcEventsTest, ArmedCqSignalsItsChannel) {
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE(round);
        ASSERT_EQ(ibv_req_notify_cq(a_.cq(), 0), 0);
        ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 0), 0);
        ASSERT_NO_FATAL_FAILURE(send(round, IBV_SEND_SIGNALED));
        ASSERT_NO_FATAL_FAILURE(a_.wait_cq_event());
        ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());
    }
    // Not armed: completions come without events.
    ASSERT_NO_FATAL_FAILURE(send(9, IBV_SEND_SIGNALED));
    settle();
    EXPECT_FALSE(a_.cq_event_ready());
    EXPECT_FALSE(b_.cq_event_ready());
}

// ibv_modify_cq(3) moderation: an armed CQ signals after cq_count
// completions, or cq_period us after the first, whichever comes first.
TEST_F(RcEventsTest, ModeratedCqSignalsAfterCountOrPeriod) {
    ibv_modify_cq_attr attr{IBV_CQ_ATTR_MODERATE, {3, 0}};
    ASSERT_EQ(ibv_modify_cq(b_.cq(), &attr), 0);
    ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 0), 0);
    ASSERT_NO_FATAL_FAILURE(send(1, IBV_SEND_SIGNALED));
    ASSERT_NO_FATAL_FAILURE(send(2, IBV_SEND_SIGNALED));
    settle();
    EXPECT_FALSE(b_.cq_event_ready()) << "signalled before the third completion";
    ASSERT_NO_FATAL_FAILURE(send(3, IBV_SEND_SIGNALED));
    ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());

    // A period ends the wait for a count that does not come.
    attr.moderate = {100, 2000};
    ASSERT_EQ(ibv_modify_cq(b_.cq(), &attr), 0);
    ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 0), 0);
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_NO_FATAL_FAILURE(send(4, IBV_SEND_SIGNALED));
    ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());
    EXPECT_GE(std::chrono::steady_clock::now() - sent, std::chrono::microseconds(2000));

    // Back to an event per completion.
    attr.moderate = {0, 0};
    ASSERT_EQ(ibv_modify_cq(b_.cq(), &attr), 0);
    ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 0), 0);
    ASSERT_NO_FATAL_FAILURE(send(5, IBV_SEND_SIGNALED));
    ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());
}

TEST_F(RcEventsTest, ModifyCqRefusesWhatItCannotDo) {
    ibv_device_attr_ex caps{};
    ASSERT_EQ(ibv_query_device_ex(b_.context(), nullptr, &caps), 0);
    ASSERT_GT(caps.cq_mod_caps.max_cq_count, 0);
    ASSERT_GT(caps.cq_mod_caps.max_cq_period, 0);
    ibv_modify_cq_attr attr{0, {1, 1}};
    EXPECT_EQ(ibv_modify_cq(b_.cq(), &attr), EINVAL);
    attr.attr_mask = IBV_CQ_ATTR_MODERATE << 1;
    EXPECT_EQ(ibv_modify_cq(b_.cq(), &attr), EOPNOTSUPP);
    attr = {IBV_CQ_ATTR_MODERATE, {1, static_cast<uint16_t>(caps.cq_mod_caps.max_cq_period + 1)}};
    EXPECT_EQ(ibv_modify_cq(b_.cq(), &attr), EINVAL);
    attr.moderate.cq_period = caps.cq_mod_caps.max_cq_period;
    EXPECT_EQ(ibv_modify_cq(b_.cq(), &attr), 0);
}

// Armed for solicited completions only, an unsolicited receive does not
// signal; a solicited one does.
TEST_F(RcEventsTest, SolicitedArmingWaitsForASolicitedCompletion) {
    ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 1), 0);
    ASSERT_NO_FATAL_FAILURE(send(1, IBV_SEND_SIGNALED));
    settle();
    EXPECT_FALSE(b_.cq_event_ready()) << "an unsolicited completion signalled";
    ASSERT_NO_FATAL_FAILURE(send(2, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());
}

// Errors signal a CQ armed for solicited completions only: here a receive
// too small for the SEND.
TEST_F(RcEventsTest, ErrorSignalsSolicitedArming) {
    Buffer& source = a_.buffer(64, kRemoteAccess, 1);
    Buffer& target = b_.buffer(64, kRemoteAccess, 2);
    ASSERT_EQ(ibv_req_notify_cq(b_.cq(), 1), 0);
    b_.post_recv(1, target.sge(0, 8));
    ibv_sge sge = source.sge(0, 64);
    ibv_send_wr wr = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(wr);
    ASSERT_NO_FATAL_FAILURE(b_.wait_cq_event());
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.wr_id, 1u);
    EXPECT_EQ(received.status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(received.status);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_REM_INV_REQ_ERR);
}

// The first packet that reaches a responder in RTR establishes the
// connection: IBV_EVENT_COMM_EST on that QP. It already answers there.
TEST(RcEventsCommEst, FirstPacketInRtrReportsCommunicationEstablished) {
    RcOptions options;
    options.b_state = IBV_QPS_RTR;
    RcSide a;
    RcSide b;
    ASSERT_NO_FATAL_FAILURE(connect_sides(a, b, options));
    Buffer& source = a.buffer(3000, kRemoteAccess, 1);
    Buffer& target = b.buffer(3000, kRemoteAccess, 2);
    b.post_recv(1, target.sge(0, 3000));
    ibv_sge sge = source.sge(0, 3000);
    ibv_send_wr wr = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    a.post_send(wr);
    const ibv_async_event event = b.async_event();
    EXPECT_EQ(event.event_type, IBV_EVENT_COMM_EST) << ibv_event_type_str(event.event_type);
    EXPECT_EQ(event.element.qp, b.qp());
    EXPECT_EQ(a.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(target.bytes(), source.bytes()));
    EXPECT_EQ(b.state(), IBV_QPS_RTR);
}

// A QP on an SRQ that leaves service (ERR) reports that it takes no more of
// the SRQ's WQEs: IBV_EVENT_QP_LAST_WQE_REACHED, once. The SRQ keeps its
// WQEs for the other QPs.
class RcSrqEventsTest : public RcTest {};

TEST_F(RcSrqEventsTest, QpOnAnSrqReportsItsLastWqeWhenItFails) {
    RcOptions options;
    options.srq_wr = 8;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Buffer& target = b_.buffer(64, kRemoteAccess, 2);
    ASSERT_NO_FATAL_FAILURE(b_.post_srq_recv(1, target.sge(0, 64)));
    ASSERT_NO_FATAL_FAILURE(b_.modify_state(IBV_QPS_ERR));
    const ibv_async_event event = b_.async_event();
    EXPECT_EQ(event.event_type, IBV_EVENT_QP_LAST_WQE_REACHED)
        << ibv_event_type_str(event.event_type);
    EXPECT_EQ(event.element.qp, b_.qp());
    b_.expect_empty();  // the SRQ's receive is not flushed with the QP
    pollfd more{b_.context()->async_fd, POLLIN, 0};
    EXPECT_EQ(::poll(&more, 1, 100), 0) << "a second event";
}

}  // namespace
}  // namespace uroce::test
