// Completion queues and shared receive queues, basic and XRC.
#include <fcntl.h>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

using CqTest = VerbsTest;

TEST_F(CqTest, HasAtLeastTheRequestedEntries) {
    for (int cqe : {1, 16, 1000, device_attr_.orig_attr.max_cqe}) {
        SCOPED_TRACE(cqe);
        CqPtr cq = create_cq(cqe);
        ASSERT_TRUE(cq);
        EXPECT_GE(cq->cqe, cqe);
        EXPECT_EQ(cq->context, context());
        EXPECT_EQ(cq->channel, nullptr);
    }
}

TEST_F(CqTest, CqeOutsideOneToMaxCqeIsInvalid) {
    for (int cqe : {0, device_attr_.orig_attr.max_cqe + 1}) {
        SCOPED_TRACE(cqe);
        EXPECT_EQ(error_of(CqPtr(ibv_create_cq(context(), cqe, nullptr, nullptr, 0))), EINVAL);
    }
}

// ibv_create_cq(3): comp_vector must be below context->num_comp_vectors.
TEST_F(CqTest, CompVectorBeyondNumCompVectorsIsInvalid) {
    ASSERT_EQ(context()->num_comp_vectors, 1);
    EXPECT_EQ(error_of(CqPtr(ibv_create_cq(context(), 16, nullptr, nullptr, 1))), EINVAL);
}

TEST_F(CqTest, ResizeGrowsAndRefusesBeyondMaxCqe) {
    CqPtr cq = create_cq(16);
    ASSERT_TRUE(cq);
    ASSERT_EQ(ibv_resize_cq(cq.get(), 1000), 0) << strerror(errno);
    EXPECT_GE(cq->cqe, 1000);
    const int cqe = cq->cqe;
    EXPECT_EQ(ibv_resize_cq(cq.get(), device_attr_.orig_attr.max_cqe + 1), EINVAL);
    EXPECT_EQ(cq->cqe, cqe);
}

TEST_F(CqTest, CreateCqEx) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 64;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cq_ex = ibv_create_cq_ex(context(), &attr);
    ASSERT_NE(cq_ex, nullptr) << strerror(errno);
    CqPtr cq(ibv_cq_ex_to_cq(cq_ex));
    EXPECT_GE(cq->cqe, 64);
    EXPECT_EQ(cq->context, context());
}

class SrqTest : public VerbsTest {
  protected:
    SrqPtr create_srq(ibv_srq_attr& attr) const {
        ibv_srq_init_attr init{};
        init.attr = attr;
        SrqPtr srq(ibv_create_srq(pd(), &init));
        attr = init.attr;
        return srq;
    }
    ibv_srq_attr query(ibv_srq* srq) const {
        ibv_srq_attr attr{};
        EXPECT_EQ(ibv_query_srq(srq, &attr), 0);
        return attr;
    }
    static void expect_same(const ibv_srq_attr& a, const ibv_srq_attr& b) {
        EXPECT_EQ(a.max_wr, b.max_wr);
        EXPECT_EQ(a.max_sge, b.max_sge);
        EXPECT_EQ(a.srq_limit, b.srq_limit);
    }
};

TEST_F(SrqTest, WritesBackAtLeastTheRequestAndQueriesIt) {
    ibv_srq_attr attr{100, 4, 0};
    SrqPtr srq = create_srq(attr);
    ASSERT_TRUE(srq) << strerror(errno);
    EXPECT_GE(attr.max_wr, 100u);
    EXPECT_GE(attr.max_sge, 4u);
    EXPECT_EQ(srq->pd, pd());
    expect_same(query(srq.get()), attr);
}

TEST_F(SrqTest, BeyondDeviceLimitsIsInvalid) {
    const ibv_device_attr& caps = device_attr_.orig_attr;
    for (ibv_srq_attr attr : {ibv_srq_attr{static_cast<uint32_t>(caps.max_srq_wr) + 1, 1, 0},
                              ibv_srq_attr{16, static_cast<uint32_t>(caps.max_srq_sge) + 1, 0}}) {
        SCOPED_TRACE(testing::Message() << "max_wr " << attr.max_wr << " max_sge " << attr.max_sge);
        EXPECT_EQ(error_of(create_srq(attr)), EINVAL);
    }
}

TEST_F(SrqTest, ModifyLimitAndResize) {
    ibv_srq_attr attr{64, 1, 0};
    SrqPtr srq = create_srq(attr);
    ASSERT_TRUE(srq);
    ibv_srq_attr change{};
    change.srq_limit = 10;
    ASSERT_EQ(ibv_modify_srq(srq.get(), &change, IBV_SRQ_LIMIT), 0);
    attr.srq_limit = 10;
    expect_same(query(srq.get()), attr);

    ASSERT_TRUE(device_attr_.orig_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
    change.max_wr = 1000;
    ASSERT_EQ(ibv_modify_srq(srq.get(), &change, IBV_SRQ_MAX_WR), 0);
    const ibv_srq_attr resized = query(srq.get());
    EXPECT_GE(resized.max_wr, 1000u);
    EXPECT_EQ(resized.srq_limit, 10u);
}

// ibv_modify_srq(3): if any attribute is invalid, none is modified.
TEST_F(SrqTest, InvalidModifyChangesNothing) {
    ibv_srq_attr attr{64, 1, 0};
    SrqPtr srq = create_srq(attr);
    ASSERT_TRUE(srq);
    const auto max_srq_wr = static_cast<uint32_t>(device_attr_.orig_attr.max_srq_wr);
    // A limit above the queue, alone or with a valid resize; a resize beyond
    // the device with a valid limit.
    const struct {
        uint32_t max_wr, srq_limit;
        int mask;
    } changes[] = {{0, attr.max_wr + 1, IBV_SRQ_LIMIT},
                   {1000, max_srq_wr + 1, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT},
                   {max_srq_wr + 1, 1, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT}};
    for (const auto& [max_wr, srq_limit, mask] : changes) {
        SCOPED_TRACE(testing::Message() << "max_wr " << max_wr << " srq_limit " << srq_limit);
        ibv_srq_attr change{max_wr, 0, srq_limit};
        EXPECT_EQ(ibv_modify_srq(srq.get(), &change, mask), EINVAL);
        expect_same(query(srq.get()), attr);
    }
}

class XrcSrqTest : public SrqTest {
  protected:
    void SetUp() override {
        SrqTest::SetUp();
        ibv_xrcd_init_attr xrcd_attr{};
        xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xrcd_attr.fd = -1;
        xrcd_attr.oflags = O_CREAT;
        xrcd_.reset(ibv_open_xrcd(context(), &xrcd_attr));
        ASSERT_TRUE(xrcd_) << strerror(errno);
        cq_ = create_cq();
        ASSERT_TRUE(cq_);
    }
    ibv_srq_init_attr_ex xrc_attr() const {
        ibv_srq_init_attr_ex attr{};
        attr.attr = {32, 1, 0};
        attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                         IBV_SRQ_INIT_ATTR_CQ;
        attr.srq_type = IBV_SRQT_XRC;
        attr.pd = pd();
        attr.xrcd = xrcd_.get();
        attr.cq = cq_.get();
        return attr;
    }
    XrcdPtr xrcd_;
    CqPtr cq_;
};

TEST_F(XrcSrqTest, HasAnSrqNumberAndHoldsItsDomainAndCq) {
    ibv_srq_init_attr_ex attr = xrc_attr();
    SrqPtr srq(ibv_create_srq_ex(context(), &attr));
    ASSERT_TRUE(srq) << strerror(errno);
    EXPECT_GE(attr.attr.max_wr, 32u);
    uint32_t srq_num = 0;
    EXPECT_EQ(ibv_get_srq_num(srq.get(), &srq_num), 0);
    EXPECT_NE(srq_num, 0u);
    EXPECT_LT(srq_num, 1u << 24);
    EXPECT_EQ(ibv_close_xrcd(xrcd_.get()), EBUSY);
    EXPECT_EQ(ibv_destroy_cq(cq_.get()), EBUSY);
}

TEST_F(XrcSrqTest, NeedsADomainAndACq) {
    for (uint32_t missing : {IBV_SRQ_INIT_ATTR_XRCD, IBV_SRQ_INIT_ATTR_CQ}) {
        SCOPED_TRACE(missing);
        ibv_srq_init_attr_ex attr = xrc_attr();
        attr.comp_mask &= ~missing;
        EXPECT_EQ(error_of(SrqPtr(ibv_create_srq_ex(context(), &attr))), EINVAL);
    }
}

}  // namespace
}  // namespace uroce::test
