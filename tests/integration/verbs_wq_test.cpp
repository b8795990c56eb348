// Receive work queues and receive WQ indirection tables.
#include <bit>
#include <chrono>
#include <vector>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

// Polls until `count` completions have come (or 10 s have passed); how many came.
int poll_until(ibv_cq* cq, int count, ibv_wc* wc) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int got = 0;
    while (got < count && std::chrono::steady_clock::now() < deadline) {
        const int n = ibv_poll_cq(cq, count - got, wc + got);
        if (n < 0) {
            return n;
        }
        got += n;
    }
    return got;
}

class WqTest : public VerbsTest {
  protected:
    void SetUp() override {
        VerbsTest::SetUp();
        cq_ = create_cq();
        ASSERT_TRUE(cq_);
    }
    ibv_wq_init_attr wq_attr() const {
        ibv_wq_init_attr attr{};
        attr.wq_type = IBV_WQT_RQ;
        attr.max_wr = 100;
        attr.max_sge = 3;
        attr.pd = pd();
        attr.cq = cq_.get();
        return attr;
    }
    WqPtr create_wq() const {
        ibv_wq_init_attr attr = wq_attr();
        WqPtr wq(ibv_create_wq(context(), &attr));
        EXPECT_TRUE(wq) << strerror(errno);
        return wq;
    }
    int modify(ibv_wq* wq, ibv_wq_state state) const {
        ibv_wq_attr attr{};
        attr.attr_mask = IBV_WQ_ATTR_STATE;
        attr.wq_state = state;
        return ibv_modify_wq(wq, &attr);
    }
    CqPtr cq_;
};

// ibv_create_wq(3): max_wr and max_sge are written back, never below the
// request.
TEST_F(WqTest, CreateWritesBackAtLeastTheRequest) {
    ibv_wq_init_attr attr = wq_attr();
    WqPtr wq(ibv_create_wq(context(), &attr));
    ASSERT_TRUE(wq) << strerror(errno);
    EXPECT_GE(attr.max_wr, 100u);
    EXPECT_GE(attr.max_sge, 3u);
    EXPECT_EQ(wq->state, IBV_WQS_RESET);
    EXPECT_EQ(wq->wq_type, IBV_WQT_RQ);
    EXPECT_EQ(wq->cq, cq_.get());
    EXPECT_EQ(wq->pd, pd());
    EXPECT_EQ(ibv_destroy_cq(cq_.get()), EBUSY);
}

// The flags of enum ibv_wq_flags are optional offloads (CVLAN stripping,
// FCS scattering, delayed drop, end padding). A well-formed request for one
// the device does not offer is "not supported", as the kernel drivers answer
// (EOPNOTSUPP), not a malformed one (EINVAL).
class WqFlagsTest : public WqTest, public ::testing::WithParamInterface<ibv_wq_flags> {};

TEST_P(WqFlagsTest, UnsupportedCreateFlagIsRefused) {
    ibv_wq_init_attr attr = wq_attr();
    attr.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
    attr.create_flags = GetParam();
    EXPECT_EQ(error_of(WqPtr(ibv_create_wq(context(), &attr))), EOPNOTSUPP);
}

// Without IBV_WQ_INIT_ATTR_FLAGS in comp_mask, create_flags is not a field.
TEST_P(WqFlagsTest, CreateFlagsWithoutCompMaskAreIgnored) {
    ibv_wq_init_attr attr = wq_attr();
    attr.create_flags = GetParam();
    EXPECT_TRUE(WqPtr(ibv_create_wq(context(), &attr))) << strerror(errno);
}

INSTANTIATE_TEST_SUITE_P(Flags, WqFlagsTest,
                         ::testing::Values(IBV_WQ_FLAGS_CVLAN_STRIPPING, IBV_WQ_FLAGS_SCATTER_FCS,
                                           IBV_WQ_FLAGS_DELAY_DROP,
                                           IBV_WQ_FLAGS_PCI_WRITE_END_PADDING));

TEST_F(WqTest, StateMachine) {
    WqPtr wq = create_wq();
    ASSERT_TRUE(wq);
    for (ibv_wq_state state : {IBV_WQS_RDY, IBV_WQS_RDY, IBV_WQS_ERR, IBV_WQS_RESET, IBV_WQS_ERR}) {
        EXPECT_EQ(modify(wq.get(), state), 0) << "to " << state;
        EXPECT_EQ(wq->state, state);
    }
    // RDY is entered only from RESET (or RDY).
    EXPECT_EQ(modify(wq.get(), IBV_WQS_RDY), EINVAL);
    EXPECT_EQ(wq->state, IBV_WQS_ERR);
}

// Receives posted to a WQ complete with IBV_WC_WR_FLUSH_ERR, in order and
// naming the WQ, when it enters ERR, and so do those posted while in ERR.
TEST_F(WqTest, ErrFlushesPostedReceives) {
    WqPtr wq = create_wq();
    ASSERT_TRUE(wq);
    ASSERT_EQ(modify(wq.get(), IBV_WQS_RDY), 0);
    std::vector<char> buffer(64);
    MrPtr mr(ibv_reg_mr(pd(), buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(mr);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()), 64, mr->lkey};
    ibv_recv_wr wrs[3]{};
    for (int i = 0; i < 3; ++i) {
        wrs[i] = {static_cast<uint64_t>(10 + i), i < 2 ? &wrs[i + 1] : nullptr, &sge, 1};
    }
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_wq_recv(wq.get(), wrs, &bad), 0);
    ibv_wc wc[4];
    EXPECT_EQ(ibv_poll_cq(cq_.get(), 4, wc), 0) << "a WQ in RDY completes nothing by itself";
    ASSERT_EQ(modify(wq.get(), IBV_WQS_ERR), 0);
    ASSERT_EQ(poll_until(cq_.get(), 3, wc), 3);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(wc[i].wr_id, 10u + i);
        EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc[i].qp_num, wq->wq_num);
    }
    wrs[0].next = nullptr;
    ASSERT_EQ(ibv_post_wq_recv(wq.get(), wrs, &bad), 0);
    ASSERT_EQ(poll_until(cq_.get(), 1, wc), 1);
    EXPECT_EQ(wc[0].wr_id, 10u);
    EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
}

// Too many scatter entries, or more receives than max_wr: ENOMEM/EINVAL as
// for a QP's receive queue, with bad_wr naming the first one refused.
TEST_F(WqTest, PostWqRecvChecksItsRequests) {
    ibv_wq_init_attr attr = wq_attr();
    attr.max_wr = 1;
    attr.max_sge = 1;
    WqPtr wq(ibv_create_wq(context(), &attr));
    ASSERT_TRUE(wq);
    ibv_sge sges[40]{};
    ibv_recv_wr wr{1, nullptr, sges, 40};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_wq_recv(wq.get(), &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    wr.num_sge = 1;
    std::vector<ibv_recv_wr> many(attr.max_wr + 1, wr);
    for (size_t i = 0; i + 1 < many.size(); ++i) {
        many[i].next = &many[i + 1];
    }
    EXPECT_EQ(ibv_post_wq_recv(wq.get(), many.data(), &bad), ENOMEM);
    EXPECT_EQ(bad, &many.back());
}

TEST_F(WqTest, CurrStateMustMatch) {
    WqPtr wq = create_wq();
    ASSERT_TRUE(wq);
    ibv_wq_attr attr{};
    attr.attr_mask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE;
    attr.curr_wq_state = IBV_WQS_RDY;
    attr.wq_state = IBV_WQS_ERR;
    EXPECT_EQ(ibv_modify_wq(wq.get(), &attr), EINVAL);
    attr.curr_wq_state = IBV_WQS_RESET;
    EXPECT_EQ(ibv_modify_wq(wq.get(), &attr), 0);
    EXPECT_EQ(wq->state, IBV_WQS_ERR);
}

TEST_F(WqTest, IndirectionTableHoldsItsWqs) {
    WqPtr first = create_wq();
    WqPtr second = create_wq();
    ASSERT_TRUE(first && second);
    ibv_wq* wqs[] = {first.get(), second.get()};
    ibv_rwq_ind_table_init_attr attr{};
    attr.log_ind_tbl_size = 1;
    attr.ind_tbl = wqs;
    IndTablePtr table(ibv_create_rwq_ind_table(context(), &attr));
    ASSERT_TRUE(table) << strerror(errno);
    EXPECT_EQ(table->context, context());
    EXPECT_EQ(ibv_destroy_wq(first.get()), EBUSY);
    EXPECT_EQ(ibv_destroy_wq(second.get()), EBUSY);
    table.reset();
    EXPECT_EQ(ibv_destroy_wq(first.release()), 0);
}

TEST_F(WqTest, IndirectionTableBeyondMaxSizeIsInvalid) {
    const uint32_t max_size = device_attr_.rss_caps.max_rwq_indirection_table_size;
    ASSERT_GT(max_size, 0u);
    WqPtr wq = create_wq();
    ASSERT_TRUE(wq);
    std::vector<ibv_wq*> wqs(2 * max_size, wq.get());
    ibv_rwq_ind_table_init_attr attr{};
    attr.log_ind_tbl_size = std::bit_width(max_size);
    attr.ind_tbl = wqs.data();
    EXPECT_EQ(error_of(IndTablePtr(ibv_create_rwq_ind_table(context(), &attr))), EINVAL);
}

}  // namespace
}  // namespace uroce::test
