// The daemon's status report counts each device's objects, and a closed
// context leaves nothing behind.
#include <arpa/inet.h>
#include <fcntl.h>

#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

constexpr const char* kDevice = "uroce1";
constexpr size_t kDmBytes = 4096;

// Structures of objects left to ibv_close_device are never freed. They stay
// reachable from here, past static destructors, for leak checkers at exit.
auto* const abandoned = new std::vector<void*>;

// One object of every kind the status report counts, two PDs.
struct Objects {
    void create(ibv_context* context) {
        pd.reset(ibv_alloc_pd(context));
        spare_pd.reset(ibv_alloc_pd(context));
        ASSERT_TRUE(pd && spare_pd);
        mr.reset(ibv_reg_mr(pd.get(), buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE));
        mw.reset(ibv_alloc_mw(pd.get(), IBV_MW_TYPE_2));
        channel.reset(ibv_create_comp_channel(context));
        ASSERT_TRUE(mr && mw && channel);
        cq.reset(ibv_create_cq(context, 16, nullptr, channel.get(), 0));
        ASSERT_TRUE(cq);
        ibv_srq_init_attr srq_attr{};
        srq_attr.attr = {16, 1, 0};
        srq.reset(ibv_create_srq(pd.get(), &srq_attr));
        ibv_qp_init_attr qp_attr{};
        qp_attr.send_cq = qp_attr.recv_cq = cq.get();
        qp_attr.cap = {4, 4, 1, 1, 0};
        qp_attr.qp_type = IBV_QPT_RC;
        qp.reset(ibv_create_qp(pd.get(), &qp_attr));
        ibv_wq_init_attr wq_attr{};
        wq_attr.wq_type = IBV_WQT_RQ;
        wq_attr.max_wr = wq_attr.max_sge = 1;
        wq_attr.pd = pd.get();
        wq_attr.cq = cq.get();
        wq.reset(ibv_create_wq(context, &wq_attr));
        ASSERT_TRUE(srq && qp && wq);
        ibv_wq* wqs[] = {wq.get()};
        ibv_rwq_ind_table_init_attr table_attr{};
        table_attr.ind_tbl = wqs;
        table.reset(ibv_create_rwq_ind_table(context, &table_attr));
        ibv_ah_attr ah_attr{};
        ah_attr.is_global = 1;
        ah_attr.port_num = 1;
        inet_pton(AF_INET6, "::ffff:127.0.0.1", ah_attr.grh.dgid.raw);
        ah.reset(ibv_create_ah(pd.get(), &ah_attr));
        ibv_xrcd_init_attr xrcd_attr{};
        xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xrcd_attr.fd = -1;
        xrcd_attr.oflags = O_CREAT;
        xrcd.reset(ibv_open_xrcd(context, &xrcd_attr));
        ibv_alloc_dm_attr dm_attr{kDmBytes, 0, 0};
        dm.reset(ibv_alloc_dm(context, &dm_attr));
        ASSERT_TRUE(table && ah && xrcd && dm);
        // An MR on the device memory: the context's teardown must free it first.
        dm_mr.reset(ibv_reg_dm_mr(pd.get(), dm.get(), 0, kDmBytes,
                                  IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE));
        ASSERT_TRUE(dm_mr);
    }

    void abandon() {
        std::apply(
            [](auto&... object) { (abandoned->push_back(object.release()), ...); },
            std::tie(pd, spare_pd, mr, mw, channel, cq, srq, qp, wq, table, ah, xrcd, dm, dm_mr));
    }

    std::vector<char> buffer = std::vector<char>(4096);
    PdPtr pd, spare_pd;
    MrPtr mr;
    MwPtr mw;
    ChannelPtr channel;
    CqPtr cq;
    SrqPtr srq;
    QpPtr qp;
    WqPtr wq;
    IndTablePtr table;
    AhPtr ah;
    XrcdPtr xrcd;
    DmPtr dm;
    MrPtr dm_mr;
};

const std::map<std::string, int> kCreated = {{"pd", 2},
                                             {"mr", 2},
                                             {"mw", 1},
                                             {"cq", 1},
                                             {"qp", 1},
                                             {"srq", 1},
                                             {"wq", 1},
                                             {"ah", 1},
                                             {"xrcd", 1},
                                             {"rwq_ind_table", 1},
                                             {"comp_channel", 1},
                                             {"dm", 1},
                                             {"dm_bytes", static_cast<int>(kDmBytes)}};

std::map<std::string, int> counts() {
    return device_objects(test_daemon().status(), kDevice);
}

std::map<std::string, int> plus_created(std::map<std::string, int> counts) {
    for (const auto& [kind, created] : kCreated) {
        counts[kind] += created;
    }
    return counts;
}

// The daemon learns of a closed context when it reads the end of the
// connection, after ibv_close_device has returned.
std::map<std::string, int> counts_when_settled(const std::map<std::string, int>& expected) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::map<std::string, int> now = counts();
    while (now != expected && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        now = counts();
    }
    return now;
}

class StatusTest : public ::testing::Test {
  protected:
    void SetUp() override {
        context_ = open_device(kDevice);
        ASSERT_TRUE(context_);
        before_ = counts();
        ASSERT_EQ(before_.size(), kCreated.size()) << test_daemon().status();
    }
    ContextPtr context_;
    std::map<std::string, int> before_;
};

TEST_F(StatusTest, CountsObjectsUntilTheyAreDestroyed) {
    {
        Objects objects;
        ASSERT_NO_FATAL_FAILURE(objects.create(context_.get()));
        EXPECT_EQ(counts(), plus_created(before_));
    }
    EXPECT_EQ(counts(), before_);
}

TEST_F(StatusTest, ClosingTheContextDestroysWhatItLeft) {
    Objects objects;
    ASSERT_NO_FATAL_FAILURE(objects.create(context_.get()));
    EXPECT_EQ(counts(), plus_created(before_));
    objects.abandon();
    EXPECT_EQ(ibv_close_device(context_.release()), 0);
    EXPECT_EQ(counts_when_settled(before_), before_);
}

}  // namespace
}  // namespace uroce::test
