// Queue pairs: creation rules of ibv_create_qp(3), the modify state machine
// of ibv_modify_qp(3) with ibv_query_qp(3), and multicast attachment.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

constexpr int kAllAttrs = (IBV_QP_DEST_QPN << 1) - 1;
constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
constexpr ibv_qp_cap kCap{10, 20, 3, 5, 64};

class QpTest : public VerbsTest {
  protected:
    void SetUp() override {
        VerbsTest::SetUp();
        cq_ = create_cq();
        ASSERT_TRUE(cq_);
        ibv_xrcd_init_attr xrcd_attr{};
        xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xrcd_attr.fd = -1;
        xrcd_attr.oflags = O_CREAT;
        xrcd_.reset(ibv_open_xrcd(context(), &xrcd_attr));
        ASSERT_TRUE(xrcd_) << strerror(errno);
    }

    // A QP of `type` on the fixture's PD and CQ (or XRC domain); `cap` is
    // what ibv_create_qp wrote back.
    QpPtr create_qp(ibv_qp_type type, ibv_qp_cap& cap, ibv_srq* srq = nullptr) const {
        ibv_qp_init_attr_ex attr{};
        attr.qp_type = type;
        attr.cap = cap;
        attr.srq = srq;
        if (type == IBV_QPT_XRC_RECV) {
            attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
            attr.xrcd = xrcd_.get();
        } else {
            attr.comp_mask = IBV_QP_INIT_ATTR_PD;
            attr.pd = pd();
            attr.send_cq = cq_.get();
            attr.recv_cq = type == IBV_QPT_XRC_SEND ? nullptr : cq_.get();
        }
        QpPtr qp(ibv_create_qp_ex(context(), &attr));
        cap = attr.cap;
        return qp;
    }
    QpPtr create_rc(ibv_srq* srq = nullptr) const {
        ibv_qp_cap cap = kCap;
        return create_qp(IBV_QPT_RC, cap, srq);
    }

    CqPtr cq_;
    XrcdPtr xrcd_;
};

std::string type_name(ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return "RC";
        case IBV_QPT_UC:
            return "UC";
        case IBV_QPT_UD:
            return "UD";
        case IBV_QPT_XRC_SEND:
            return "XRC_SEND";
        case IBV_QPT_XRC_RECV:
            return "XRC_RECV";
        default:
            return std::to_string(type);
    }
}

struct QpCaps {
    ibv_qp_type type;
    ibv_qp_cap cap;
};

class QpCapsTest : public QpTest, public ::testing::WithParamInterface<QpCaps> {};

// ibv_create_qp(3): the written-back caps are never below the request, and
// ibv_query_qp(3) reports them as the QP's init caps.
TEST_P(QpCapsTest, CreateWritesBackAtLeastTheRequest) {
    const ibv_qp_cap request = GetParam().cap;
    ibv_qp_cap cap = request;
    QpPtr qp = create_qp(GetParam().type, cap);
    ASSERT_TRUE(qp) << strerror(errno);
    EXPECT_GE(cap.max_send_wr, request.max_send_wr);
    EXPECT_GE(cap.max_recv_wr, request.max_recv_wr);
    EXPECT_GE(cap.max_send_sge, request.max_send_sge);
    EXPECT_GE(cap.max_recv_sge, request.max_recv_sge);
    EXPECT_GE(cap.max_inline_data, request.max_inline_data);
    EXPECT_EQ(qp->qp_type, GetParam().type);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_NE(qp->qp_num, 0u);
    EXPECT_LT(qp->qp_num, 1u << 24);

    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp.get(), &attr, kAllAttrs, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RESET);
    EXPECT_EQ(init.qp_type, GetParam().type);
    EXPECT_EQ(init.cap.max_send_wr, cap.max_send_wr);
    EXPECT_EQ(init.cap.max_recv_wr, cap.max_recv_wr);
    EXPECT_EQ(init.cap.max_send_sge, cap.max_send_sge);
    EXPECT_EQ(init.cap.max_recv_sge, cap.max_recv_sge);
    EXPECT_EQ(init.cap.max_inline_data, cap.max_inline_data);
}

// XRC initiators have no receive queue and XRC targets no queue at all.
INSTANTIATE_TEST_SUITE_P(Types, QpCapsTest,
                         ::testing::Values(QpCaps{IBV_QPT_RC, kCap}, QpCaps{IBV_QPT_UC, kCap},
                                           QpCaps{IBV_QPT_UD, kCap},
                                           QpCaps{IBV_QPT_XRC_SEND, {10, 0, 3, 0, 64}},
                                           QpCaps{IBV_QPT_XRC_RECV, {}}),
                         [](const auto& p) { return type_name(p.param.type); });

// ibv_create_qp_ex(3): an XRC_TGT QP ignores the CQs and SRQ it is given,
// an XRC_INI QP its receive CQ, as the kernel does; the QP neither keeps
// nor follows them. A fuzzer's sequence: such CQs destroyed (nothing holds
// them), then the QP moved to RESET and destroyed, which crashed the
// provider in the freed CQs' rings.
TEST_F(QpTest, XrcQpsNeitherKeepNorFollowTheQueuesTheyIgnore) {
    struct Case {
        ibv_qp_type type;
        bool keeps_send_cq;
    };
    for (const Case& c : {Case{IBV_QPT_XRC_RECV, false}, Case{IBV_QPT_XRC_SEND, true}}) {
        SCOPED_TRACE(type_name(c.type));
        CqPtr send_cq = create_cq();
        CqPtr recv_cq = create_cq();
        ASSERT_TRUE(send_cq && recv_cq);
        ibv_qp_init_attr_ex attr{};
        attr.qp_type = c.type;
        attr.send_cq = send_cq.get();
        attr.recv_cq = recv_cq.get();
        if (c.type == IBV_QPT_XRC_RECV) {
            attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
            attr.xrcd = xrcd_.get();
        } else {
            attr.comp_mask = IBV_QP_INIT_ATTR_PD;
            attr.pd = pd();
            attr.cap = {4, 0, 1, 0, 0};
        }
        QpPtr qp(ibv_create_qp_ex(context(), &attr));
        ASSERT_TRUE(qp) << strerror(errno);
        EXPECT_EQ(qp->send_cq, c.keeps_send_cq ? send_cq.get() : nullptr);
        EXPECT_EQ(qp->recv_cq, nullptr);
        ibv_qp_attr got{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(qp.get(), &got, IBV_QP_STATE, &init), 0);
        EXPECT_EQ(init.recv_cq, nullptr);
        EXPECT_EQ(ibv_destroy_cq(recv_cq.release()), 0) << "a CQ the QP ignores is not held";
        if (!c.keeps_send_cq) {
            EXPECT_EQ(ibv_destroy_cq(send_cq.release()), 0) << "a CQ the QP ignores is not held";
        }
        ibv_qp_attr reset{};
        reset.qp_state = IBV_QPS_RESET;
        EXPECT_EQ(ibv_modify_qp(qp.get(), &reset, IBV_QP_STATE), 0);
        EXPECT_EQ(ibv_destroy_qp(qp.release()), 0);
    }
}

// The kernel lets only CAP_NET_RAW create raw packet QPs.
TEST_F(QpTest, RawPacketNeedsNetRaw) {
    ibv_qp_cap cap = kCap;
    {
        WithoutCapNetRaw unprivileged;
        ASSERT_TRUE(unprivileged.ok());
        EXPECT_EQ(error_of(create_qp(IBV_QPT_RAW_PACKET, cap)), EPERM);
    }
    QpPtr qp = create_qp(IBV_QPT_RAW_PACKET, cap);
    EXPECT_TRUE(qp) << strerror(errno);
    EXPECT_GE(cap.max_send_wr, kCap.max_send_wr);
    EXPECT_GE(cap.max_recv_wr, kCap.max_recv_wr);
}

TEST_F(QpTest, CapsBeyondDeviceLimitsAreInvalid) {
    const auto max_wr = static_cast<uint32_t>(device_attr_.orig_attr.max_qp_wr) + 1;
    const auto max_sge = static_cast<uint32_t>(device_attr_.orig_attr.max_sge) + 1;
    for (ibv_qp_cap cap : {ibv_qp_cap{max_wr, 1, 1, 1, 0}, ibv_qp_cap{1, max_wr, 1, 1, 0},
                           ibv_qp_cap{1, 1, max_sge, 1, 0}, ibv_qp_cap{1, 1, 1, max_sge, 0}}) {
        SCOPED_TRACE(testing::Message() << "wr " << cap.max_send_wr << "/" << cap.max_recv_wr
                                        << " sge " << cap.max_send_sge << "/" << cap.max_recv_sge);
        EXPECT_EQ(error_of(create_qp(IBV_QPT_RC, cap)), EINVAL);
    }
}

class QpSrqTest : public QpTest {
  protected:
    void SetUp() override {
        QpTest::SetUp();
        ibv_srq_init_attr init{};
        init.attr = {64, 1, 0};
        srq_.reset(ibv_create_srq(pd(), &init));
        ASSERT_TRUE(srq_) << strerror(errno);
    }
    SrqPtr srq_;
};

TEST_F(QpSrqTest, RcAndUdMayUseAnSrqButUcMayNot) {
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UD}) {
        ibv_qp_cap cap = kCap;
        QpPtr qp = create_qp(type, cap, srq_.get());
        EXPECT_TRUE(qp) << type << ": " << strerror(errno);
        EXPECT_EQ(ibv_destroy_srq(srq_.get()), EBUSY);
    }
    ibv_qp_cap cap = kCap;
    EXPECT_EQ(error_of(create_qp(IBV_QPT_UC, cap, srq_.get())), EINVAL);
}

// ibv_create_qp(3): with an SRQ, max_recv_wr and max_recv_sge are ignored,
// even where they would be beyond the device's limits.
TEST_F(QpSrqTest, ReceiveCapsAreIgnoredWithAnSrq) {
    ibv_qp_cap cap = kCap;
    cap.max_recv_wr = static_cast<uint32_t>(device_attr_.orig_attr.max_qp_wr) + 1;
    cap.max_recv_sge = static_cast<uint32_t>(device_attr_.orig_attr.max_sge) + 1;
    const ibv_qp_cap request = cap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap, srq_.get());
    ASSERT_TRUE(qp) << strerror(errno);
    EXPECT_EQ(qp->srq, srq_.get());
    EXPECT_GE(cap.max_send_wr, request.max_send_wr);
    EXPECT_GE(cap.max_send_sge, request.max_send_sge);
}

TEST_F(QpTest, ObjectsUsedByAQpAreBusy) {
    QpPtr qp = create_rc();
    ASSERT_TRUE(qp);
    EXPECT_EQ(ibv_destroy_cq(cq_.get()), EBUSY);
    EXPECT_EQ(ibv_dealloc_pd(pd()), EBUSY);
}

// ibv_attach_mcast(3): only UD QPs join groups; ibv_destroy_qp(3) fails while
// the QP is attached.
TEST_F(QpTest, MulticastAttachment) {
    ibv_gid group;
    ASSERT_EQ(inet_pton(AF_INET6, "::ffff:239.1.2.3", group.raw), 1);
    ibv_qp_cap cap = kCap;
    QpPtr ud = create_qp(IBV_QPT_UD, cap);
    ASSERT_TRUE(ud);
    ASSERT_EQ(ibv_attach_mcast(ud.get(), &group, 0), 0);
    EXPECT_EQ(ibv_attach_mcast(ud.get(), &group, 0), 0) << "attaching twice is allowed";
    EXPECT_EQ(ibv_destroy_qp(ud.get()), EBUSY);
    EXPECT_EQ(ibv_detach_mcast(ud.get(), &group, 0), 0);

    QpPtr rc = create_rc();
    ASSERT_TRUE(rc);
    EXPECT_EQ(ibv_attach_mcast(rc.get(), &group, 0), EINVAL);
}

// A Q_Key with the high bit set is a controlled one: ibv_modify_qp(3) sets
// it only for a process with CAP_NET_RAW (EPERM otherwise, as the kernel's
// modify_qp), and an EPERM changes nothing.
TEST_F(QpTest, ControlledQkeyNeedsCapNetRaw) {
    ibv_qp_cap cap = kCap;
    QpPtr ud = create_qp(IBV_QPT_UD, cap);
    ASSERT_TRUE(ud);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey = 0x80010000;
    const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;

    {
        WithoutCapNetRaw unprivileged;
        ASSERT_TRUE(unprivileged.ok());
        EXPECT_EQ(ibv_modify_qp(ud.get(), &attr, mask), EPERM);
    }
    ibv_qp_attr now{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(ud.get(), &now, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(now.qp_state, IBV_QPS_RESET);

    EXPECT_EQ(ibv_modify_qp(ud.get(), &attr, mask), 0) << strerror(errno);
    ASSERT_EQ(ibv_query_qp(ud.get(), &now, IBV_QP_QKEY, &init), 0);
    EXPECT_EQ(now.qkey, 0x80010000u);
}

// The attributes of a full RC walk, connected to a QP on uroce1.
class RcWalkTest : public QpTest {
  protected:
    void SetUp() override {
        QpTest::SetUp();
        peer_context_ = open_device("uroce1");
        ASSERT_TRUE(peer_context_);
        peer_pd_.reset(ibv_alloc_pd(peer_context_.get()));
        peer_cq_.reset(ibv_create_cq(peer_context_.get(), 16, nullptr, nullptr, 0));
        ASSERT_TRUE(peer_pd_ && peer_cq_);
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = peer_cq_.get();
        init.cap = kCap;
        init.qp_type = IBV_QPT_RC;
        peer_.reset(ibv_create_qp(peer_pd_.get(), &init));
        ASSERT_TRUE(peer_) << strerror(errno);

        attr_.pkey_index = 0;
        attr_.port_num = 1;
        attr_.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        attr_.ah_attr.is_global = 1;
        attr_.ah_attr.port_num = 1;
        attr_.ah_attr.grh.sgid_index = 0;
        attr_.ah_attr.grh.hop_limit = 64;
        ASSERT_EQ(ibv_query_gid(peer_context_.get(), 1, 0, &attr_.ah_attr.grh.dgid), 0);
        attr_.path_mtu = IBV_MTU_1024;
        attr_.dest_qp_num = peer_->qp_num;
        attr_.rq_psn = 0x123456;
        attr_.max_dest_rd_atomic = 8;
        attr_.min_rnr_timer = 12;
        attr_.timeout = 14;
        attr_.retry_cnt = 6;
        attr_.rnr_retry = 5;
        attr_.sq_psn = 0x654321;
        attr_.max_rd_atomic = 4;

        qp_ = create_qp(IBV_QPT_RC, qp_cap_);
        ASSERT_TRUE(qp_) << strerror(errno);
    }

    // The attributes and mask that move the QP into `state` from the state
    // before it on the walk.
    std::pair<ibv_qp_attr, int> step_to(ibv_qp_state state) const {
        ibv_qp_attr attr = attr_;
        attr.qp_state = state;
        switch (state) {
            case IBV_QPS_INIT:
                return {attr, kInitMask};
            case IBV_QPS_RTR:
                return {attr, kRtrMask};
            default:
                return {attr, kRtsMask};
        }
    }
    void walk_to(ibv_qp_state state) {
        for (ibv_qp_state next : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
            if (next > state) {
                return;
            }
            auto [attr, mask] = step_to(next);
            ASSERT_EQ(ibv_modify_qp(qp_.get(), &attr, mask), 0)
                << "to state " << next << ": " << strerror(errno);
            EXPECT_EQ(qp_->state, next);
        }
    }
    std::pair<ibv_qp_attr, ibv_qp_init_attr> query() const {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        EXPECT_EQ(ibv_query_qp(qp_.get(), &attr, kAllAttrs, &init), 0);
        return {attr, init};
    }

    ContextPtr peer_context_;
    PdPtr peer_pd_;
    CqPtr peer_cq_;
    QpPtr peer_;
    ibv_qp_attr attr_{};
    ibv_qp_cap qp_cap_ = kCap;
    QpPtr qp_;
};

void expect_same_ah(const ibv_ah_attr& a, const ibv_ah_attr& b) {
    EXPECT_EQ(memcmp(a.grh.dgid.raw, b.grh.dgid.raw, sizeof(a.grh.dgid.raw)), 0);
    EXPECT_EQ(a.grh.flow_label, b.grh.flow_label);
    EXPECT_EQ(a.grh.sgid_index, b.grh.sgid_index);
    EXPECT_EQ(a.grh.hop_limit, b.grh.hop_limit);
    EXPECT_EQ(a.grh.traffic_class, b.grh.traffic_class);
    EXPECT_EQ(a.dlid, b.dlid);
    EXPECT_EQ(a.sl, b.sl);
    EXPECT_EQ(a.static_rate, b.static_rate);
    EXPECT_EQ(a.is_global, b.is_global);
    EXPECT_EQ(a.port_num, b.port_num);
}

void expect_same_caps(const ibv_qp_cap& a, const ibv_qp_cap& b) {
    EXPECT_EQ(a.max_send_wr, b.max_send_wr);
    EXPECT_EQ(a.max_recv_wr, b.max_recv_wr);
    EXPECT_EQ(a.max_send_sge, b.max_send_sge);
    EXPECT_EQ(a.max_recv_sge, b.max_recv_sge);
    EXPECT_EQ(a.max_inline_data, b.max_inline_data);
}

// Every attribute an RC QP can be given on its way to RTS.
void expect_same_rc_attr(const ibv_qp_attr& a, const ibv_qp_attr& b) {
    EXPECT_EQ(a.qp_state, b.qp_state);
    EXPECT_EQ(a.cur_qp_state, b.cur_qp_state);
    EXPECT_EQ(a.path_mtu, b.path_mtu);
    EXPECT_EQ(a.qp_access_flags, b.qp_access_flags);
    EXPECT_EQ(a.rq_psn, b.rq_psn);
    EXPECT_EQ(a.sq_psn, b.sq_psn);
    EXPECT_EQ(a.dest_qp_num, b.dest_qp_num);
    EXPECT_EQ(a.pkey_index, b.pkey_index);
    EXPECT_EQ(a.port_num, b.port_num);
    EXPECT_EQ(a.max_rd_atomic, b.max_rd_atomic);
    EXPECT_EQ(a.max_dest_rd_atomic, b.max_dest_rd_atomic);
    EXPECT_EQ(a.min_rnr_timer, b.min_rnr_timer);
    EXPECT_EQ(a.timeout, b.timeout);
    EXPECT_EQ(a.retry_cnt, b.retry_cnt);
    EXPECT_EQ(a.rnr_retry, b.rnr_retry);
    expect_same_ah(a.ah_attr, b.ah_attr);
    expect_same_caps(a.cap, b.cap);
}

TEST_F(RcWalkTest, ReachesRtsAndQueryReturnsEveryAttribute) {
    walk_to(IBV_QPS_RTS);
    auto [attr, init] = query();
    ibv_qp_attr expected = attr_;
    expected.qp_state = expected.cur_qp_state = IBV_QPS_RTS;
    expected.cap = qp_cap_;
    expect_same_rc_attr(attr, expected);
    expect_same_caps(init.cap, qp_cap_);
    EXPECT_EQ(init.qp_type, IBV_QPT_RC);
    EXPECT_EQ(init.send_cq, cq_.get());
    EXPECT_EQ(init.recv_cq, cq_.get());
    EXPECT_EQ(init.srq, nullptr);
}

// One modify that ibv_modify_qp(3) refuses with EINVAL: the QP is walked to
// `from`, then given the attributes of the step into `to`, spoiled.
struct BadModify {
    const char* name;
    ibv_qp_state from;
    ibv_qp_state to;
    void (*spoil)(ibv_qp_attr& attr, int& mask, const ibv_device_attr& caps);
    int error = EINVAL;
};

class BadModifyTest : public RcWalkTest, public ::testing::WithParamInterface<BadModify> {};

TEST_P(BadModifyTest, IsInvalidAndChangesNothing) {
    const BadModify& bad = GetParam();
    walk_to(bad.from);
    ASSERT_EQ(qp_->state, bad.from);
    const auto [before, init_before] = query();

    auto [attr, mask] = step_to(bad.to);
    bad.spoil(attr, mask, device_attr_.orig_attr);
    EXPECT_EQ(ibv_modify_qp(qp_.get(), &attr, mask), bad.error);

    EXPECT_EQ(qp_->state, bad.from);
    const auto [after, init_after] = query();
    EXPECT_EQ(after.qp_state, bad.from);
    expect_same_rc_attr(after, before);
    expect_same_caps(init_after.cap, init_before.cap);
}

void keep(ibv_qp_attr&, int&, const ibv_device_attr&) {}

INSTANTIATE_TEST_SUITE_P(
    Rc, BadModifyTest,
    ::testing::Values(
        BadModify{"ResetToRtr", IBV_QPS_RESET, IBV_QPS_RTR, keep},
        BadModify{"ResetToRts", IBV_QPS_RESET, IBV_QPS_RTS, keep},
        BadModify{"InitToRts", IBV_QPS_INIT, IBV_QPS_RTS, keep},
        BadModify{
            "MissingDestQpn", IBV_QPS_INIT, IBV_QPS_RTR,
            [](ibv_qp_attr&, int& mask, const ibv_device_attr&) { mask &= ~IBV_QP_DEST_QPN; }},
        BadModify{"MissingPort", IBV_QPS_RESET, IBV_QPS_INIT,
                  [](ibv_qp_attr&, int& mask, const ibv_device_attr&) { mask &= ~IBV_QP_PORT; }},
        BadModify{"MissingSqPsn", IBV_QPS_RTR, IBV_QPS_RTS,
                  [](ibv_qp_attr&, int& mask, const ibv_device_attr&) { mask &= ~IBV_QP_SQ_PSN; }},
        BadModify{"SqPsnNotAllowedIntoRtr", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr&, int& mask, const ibv_device_attr&) { mask |= IBV_QP_SQ_PSN; }},
        BadModify{"QkeyNotAllowedForRc", IBV_QPS_RESET, IBV_QPS_INIT,
                  [](ibv_qp_attr&, int& mask, const ibv_device_attr&) { mask |= IBV_QP_QKEY; }},
        BadModify{"MtuAboveMaxMtu", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) {
                      attr.path_mtu = static_cast<ibv_mtu>(IBV_MTU_4096 + 1);
                  }},
        BadModify{"Port2", IBV_QPS_RESET, IBV_QPS_INIT,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.port_num = 2; }},
        BadModify{"PkeyIndex1", IBV_QPS_RESET, IBV_QPS_INIT,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.pkey_index = 1; }},
        BadModify{
            "AvWithoutGrh", IBV_QPS_INIT, IBV_QPS_RTR,
            [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.ah_attr.is_global = 0; }},
        BadModify{"AvSgidIndexBeyondGidTable", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) {
                      attr.ah_attr.grh.sgid_index = 16;  // gid_tbl_len
                  }},
        // An empty entry (a device on lo has GIDs 0 and 1 only): ENODATA,
        // as the kernel's rdma_get_gid_attr.
        BadModify{"AvSgidIndexOfAnEmptyEntry", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) {
                      attr.ah_attr.grh.sgid_index = 2;
                  },
                  ENODATA},
        BadModify{
            "DestQpn24Bits", IBV_QPS_INIT, IBV_QPS_RTR,
            [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.dest_qp_num = 1u << 24; }},
        BadModify{"RqPsn24Bits", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.rq_psn = 1u << 24; }},
        BadModify{"MinRnrTimer32", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.min_rnr_timer = 32; }},
        BadModify{"MaxDestRdAtomicAboveMaxQpRdAtom", IBV_QPS_INIT, IBV_QPS_RTR,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr& caps) {
                      attr.max_dest_rd_atomic = static_cast<uint8_t>(caps.max_qp_rd_atom + 1);
                  }},
        BadModify{"SqPsn24Bits", IBV_QPS_RTR, IBV_QPS_RTS,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.sq_psn = 1u << 24; }},
        BadModify{"Timeout32", IBV_QPS_RTR, IBV_QPS_RTS,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.timeout = 32; }},
        BadModify{"RetryCnt8", IBV_QPS_RTR, IBV_QPS_RTS,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr&) { attr.retry_cnt = 8; }},
        BadModify{"MaxRdAtomicAboveMaxQpInitRdAtom", IBV_QPS_RTR, IBV_QPS_RTS,
                  [](ibv_qp_attr& attr, int&, const ibv_device_attr& caps) {
                      attr.max_rd_atomic = static_cast<uint8_t>(caps.max_qp_init_rd_atom + 1);
                  }}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace uroce::test
