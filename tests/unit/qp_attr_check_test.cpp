#include "qp/qp_attr_check.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

// Suite names start with "qp" so that `ctest -R qp` selects these tests.
namespace uroce {
namespace {

// The two rd_atomic caps differ so that a check against the wrong one fails.
constexpr QpAttrLimits kLimits = {
    .port_count = 2,
    .port_max_mtu = IBV_MTU_1024,
    .pkey_table_len = 64,
    .gid_table_len = 16,
    .max_qp_rd_atom = 16,
    .max_qp_init_rd_atom = 8,
};

constexpr int kAllAttributes = ((1 << 21) - 1) | IBV_QP_RATE_LIMIT;

// Stores any 32-bit value in an enum field, as a client's memory may hold.
template <typename Enum>
void set_raw(Enum& field, uint32_t v) {
    std::memcpy(&field, &v, sizeof(v));
}

ibv_ah_attr valid_ah(uint8_t port) {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.grh.sgid_index = 0;
    ah.port_num = port;
    return ah;
}

ibv_qp_attr valid_attr() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.path_mig_state = IBV_MIG_MIGRATED;
    a.port_num = 1;
    a.ah_attr = valid_ah(1);
    a.alt_port_num = 2;
    a.alt_ah_attr = valid_ah(2);
    return a;
}

std::string check(const ibv_qp_attr& attr, int mask, ibv_qp_type type = IBV_QPT_RC) {
    return check_qp_attr_values(attr, mask, type, kLimits);
}

TEST(qpAttrCheck, ValidAttributesPass) {
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET,
                             IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV}) {
        EXPECT_EQ(check(valid_attr(), kAllAttributes, type), "") << type;
    }
}

TEST(qpAttrCheck, OnlyAttributesInTheMaskAreChecked) {
    ibv_qp_attr a;
    std::memset(&a, 0xff, sizeof(a));
    EXPECT_EQ(check(a, 0), "");
    EXPECT_EQ(check(a, IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_CAP |
                           IBV_QP_RATE_LIMIT),
              "");
    EXPECT_NE(check(a, IBV_QP_TIMEOUT), "");
}

TEST(qpAttrCheck, QkeyAndRateLimitTakeAnyValue) {
    ibv_qp_attr a = valid_attr();
    for (uint32_t v : {0u, 0x7fffffffu, 0x80000000u, 0xffffffffu}) {
        a.qkey = v;
        a.rate_limit = v;
        EXPECT_EQ(check(a, IBV_QP_QKEY | IBV_QP_RATE_LIMIT, IBV_QPT_UD), "") << v;
    }
}

TEST(qpAttrCheck, UnknownQpTypeIsRefused) {
    EXPECT_EQ(check(valid_attr(), 0, static_cast<ibv_qp_type>(5)), "unknown QP type 5");
    EXPECT_EQ(check(valid_attr(), 0, IBV_QPT_DRIVER), "unknown QP type 255");
}

// A value check with a boundary: `last_good` passes, `first_bad` fails with
// `message`; `extra_bad` lists other values that must fail.
struct Boundary {
    const char* name;
    int mask;
    std::function<void(ibv_qp_attr&, uint32_t)> set;
    uint32_t last_good;
    uint32_t first_bad;
    std::string message;
    std::vector<uint32_t> extra_bad = {};
};

// Keeps the parameter shown in test names short and free of pointer bytes.
void PrintTo(const Boundary& b, std::ostream* os) {
    *os << b.name;
}

class qpAttrBoundary : public testing::TestWithParam<Boundary> {};

TEST_P(qpAttrBoundary, LargestValidPassesOneMoreFails) {
    const Boundary& b = GetParam();
    ibv_qp_attr a = valid_attr();
    b.set(a, b.last_good);
    EXPECT_EQ(check(a, b.mask), "");
    b.set(a, b.first_bad);
    EXPECT_EQ(check(a, b.mask), b.message);
    for (uint32_t v : b.extra_bad) {
        b.set(a, v);
        EXPECT_NE(check(a, b.mask), "") << v;
    }
    // The same value outside the mask is not looked at.
    b.set(a, b.first_bad);
    EXPECT_EQ(check(a, kAllAttributes & ~b.mask), "");
}

std::string boundary_name(const testing::TestParamInfo<Boundary>& info) {
    return info.param.name;
}

const std::vector<Boundary> kBoundaries = {
    {"qp_state",
     IBV_QP_STATE,
     [](ibv_qp_attr& a, uint32_t v) { set_raw(a.qp_state, v); },
     IBV_QPS_ERR,
     IBV_QPS_UNKNOWN,
     "unknown qp_state 7",
     {0xffffffff}},
    {"cur_qp_state",
     IBV_QP_CUR_STATE,
     [](ibv_qp_attr& a, uint32_t v) { set_raw(a.cur_qp_state, v); },
     IBV_QPS_ERR,
     IBV_QPS_UNKNOWN,
     "unknown cur_qp_state 7",
     {100}},
    {"pkey_index",
     IBV_QP_PKEY_INDEX,
     [](ibv_qp_attr& a, uint32_t v) { a.pkey_index = v; },
     63,
     64,
     "pkey_index 64 is beyond the P_Key table of 64 entries",
     {0xffff}},
    {"port_num",
     IBV_QP_PORT,
     [](ibv_qp_attr& a, uint32_t v) { a.port_num = v; },
     2,
     3,
     "port_num 3 is out of range 1..2",
     {0, 255}},
    {"path_mtu",
     IBV_QP_PATH_MTU,
     [](ibv_qp_attr& a, uint32_t v) { set_raw(a.path_mtu, v); },
     IBV_MTU_1024,
     IBV_MTU_2048,
     "path_mtu 2048 is above the port's max MTU 1024",
     {IBV_MTU_4096}},
    {"path_mtu_unknown",
     IBV_QP_PATH_MTU,
     [](ibv_qp_attr& a, uint32_t v) { set_raw(a.path_mtu, v); },
     IBV_MTU_256,
     0,
     "unknown path_mtu 0",
     {6, 0xffffffff}},
    {"timeout",
     IBV_QP_TIMEOUT,
     [](ibv_qp_attr& a, uint32_t v) { a.timeout = v; },
     31,
     32,
     "timeout 32 is above 31",
     {255}},
    {"retry_cnt",
     IBV_QP_RETRY_CNT,
     [](ibv_qp_attr& a, uint32_t v) { a.retry_cnt = v; },
     7,
     8,
     "retry_cnt 8 is above 7",
     {255}},
    {"rnr_retry",
     IBV_QP_RNR_RETRY,
     [](ibv_qp_attr& a, uint32_t v) { a.rnr_retry = v; },
     7,
     8,
     "rnr_retry 8 is above 7",
     {255}},
    {"rq_psn",
     IBV_QP_RQ_PSN,
     [](ibv_qp_attr& a, uint32_t v) { a.rq_psn = v; },
     0xffffff,
     0x1000000,
     "rq_psn 16777216 does not fit in 24 bits",
     {0xffffffff}},
    {"max_rd_atomic",
     IBV_QP_MAX_QP_RD_ATOMIC,
     [](ibv_qp_attr& a, uint32_t v) { a.max_rd_atomic = v; },
     8,
     9,
     "max_rd_atomic 9 is above the device's max_qp_init_rd_atom 8",
     {16, 255}},
    {"min_rnr_timer",
     IBV_QP_MIN_RNR_TIMER,
     [](ibv_qp_attr& a, uint32_t v) { a.min_rnr_timer = v; },
     31,
     32,
     "min_rnr_timer 32 is above 31",
     {255}},
    {"sq_psn",
     IBV_QP_SQ_PSN,
     [](ibv_qp_attr& a, uint32_t v) { a.sq_psn = v; },
     0xffffff,
     0x1000000,
     "sq_psn 16777216 does not fit in 24 bits",
     {0xffffffff}},
    {"max_dest_rd_atomic",
     IBV_QP_MAX_DEST_RD_ATOMIC,
     [](ibv_qp_attr& a, uint32_t v) { a.max_dest_rd_atomic = v; },
     16,
     17,
     "max_dest_rd_atomic 17 is above the device's max_qp_rd_atom 16",
     {255}},
    {"path_mig_state",
     IBV_QP_PATH_MIG_STATE,
     [](ibv_qp_attr& a, uint32_t v) { set_raw(a.path_mig_state, v); },
     IBV_MIG_ARMED,
     IBV_MIG_ARMED + 1,
     "unknown path_mig_state 3",
     {0xffffffff}},
    {"dest_qp_num",
     IBV_QP_DEST_QPN,
     [](ibv_qp_attr& a, uint32_t v) { a.dest_qp_num = v; },
     0xffffff,
     0x1000000,
     "dest_qp_num 16777216 does not fit in 24 bits",
     {0xffffffff}},

    // Primary path (IBV_QP_AV).
    {"ah_sgid_index",
     IBV_QP_AV,
     [](ibv_qp_attr& a, uint32_t v) { a.ah_attr.grh.sgid_index = v; },
     15,
     16,
     "ah_attr.grh.sgid_index 16 is beyond the GID table of 16 entries",
     {255}},
    {"ah_is_global", IBV_QP_AV, [](ibv_qp_attr& a, uint32_t v) { a.ah_attr.is_global = !v; }, 0, 1,
     "ah_attr.is_global must be 1: RoCE addresses need a GRH"},
    {"ah_port_num",
     IBV_QP_AV,
     [](ibv_qp_attr& a, uint32_t v) { a.ah_attr.port_num = v; },
     2,
     3,
     "ah_attr.port_num 3 is out of range 1..2",
     {0}},
    {"ah_port_matches_port", IBV_QP_AV | IBV_QP_PORT,
     [](ibv_qp_attr& a, uint32_t v) {
         a.port_num = 1;
         a.ah_attr.port_num = v;
     },
     1, 2, "ah_attr.port_num 2 differs from port_num 1"},

    // Alternate path (IBV_QP_ALT_PATH).
    {"alt_port_num",
     IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) {
         a.alt_port_num = v;
         a.alt_ah_attr.port_num = v;
     },
     2,
     3,
     "alt_port_num 3 is out of range 1..2",
     {0}},
    {"alt_ah_port_num",
     IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) { a.alt_ah_attr.port_num = v; },
     2,
     3,
     "alt_ah_attr.port_num 3 is out of range 1..2",
     {0}},
    {"alt_ah_port_matches_alt_port", IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) {
         a.alt_port_num = 1;
         a.alt_ah_attr.port_num = v;
     },
     1, 2, "alt_ah_attr.port_num 2 differs from alt_port_num 1"},
    {"alt_ah_sgid_index",
     IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) { a.alt_ah_attr.grh.sgid_index = v; },
     15,
     16,
     "alt_ah_attr.grh.sgid_index 16 is beyond the GID table of 16 entries",
     {255}},
    {"alt_ah_is_global", IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) { a.alt_ah_attr.is_global = !v; }, 0, 1,
     "alt_ah_attr.is_global must be 1: RoCE addresses need a GRH"},
    {"alt_pkey_index",
     IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) { a.alt_pkey_index = v; },
     63,
     64,
     "alt_pkey_index 64 is beyond the P_Key table of 64 entries",
     {0xffff}},
    {"alt_timeout",
     IBV_QP_ALT_PATH,
     [](ibv_qp_attr& a, uint32_t v) { a.alt_timeout = v; },
     31,
     32,
     "alt_timeout 32 is above 31",
     {255}},
};

INSTANTIATE_TEST_SUITE_P(EveryValueCheck, qpAttrBoundary, testing::ValuesIn(kBoundaries),
                         boundary_name);

TEST(qpAttrCheck, PortMtuLimitFollowsTheLimits) {
    ibv_qp_attr a = valid_attr();
    a.path_mtu = IBV_MTU_4096;
    QpAttrLimits limits = kLimits;
    limits.port_max_mtu = IBV_MTU_4096;
    EXPECT_EQ(check_qp_attr_values(a, IBV_QP_PATH_MTU, IBV_QPT_RC, limits), "");
    limits.port_max_mtu = IBV_MTU_256;
    EXPECT_EQ(check_qp_attr_values(a, IBV_QP_PATH_MTU, IBV_QPT_RC, limits),
              "path_mtu 4096 is above the port's max MTU 256");
}

TEST(qpAttrCheck, NoPortsMeansNoValidPort) {
    QpAttrLimits limits = kLimits;
    limits.port_count = 0;
    EXPECT_EQ(check_qp_attr_values(valid_attr(), IBV_QP_PORT, IBV_QPT_UD, limits),
              "port_num 1 is out of range 1..0");
}

TEST(qpAttrCheck, FirstBadAttributeInMaskBitOrderIsReported) {
    ibv_qp_attr a = valid_attr();
    a.timeout = 40;
    a.port_num = 9;
    EXPECT_EQ(check(a, IBV_QP_TIMEOUT | IBV_QP_PORT), "port_num 9 is out of range 1..2");
}

}  // namespace
}  // namespace uroce
