#include "qp/qp_transitions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

// Suite names start with "qp" so that `ctest -R qp` selects these tests.
namespace uroce {
namespace {

// The numbering this code shares with the kernel's IB_QPT_* / IB_QPS_* /
// IB_QP_* values.
static_assert(IBV_QPT_RC == 2 && IBV_QPT_UC == 3 && IBV_QPT_UD == 4);
static_assert(IBV_QPT_RAW_PACKET == 8 && IBV_QPT_XRC_SEND == 9 && IBV_QPT_XRC_RECV == 10);
static_assert(IBV_QPS_RESET == 0 && IBV_QPS_SQE == 5 && IBV_QPS_ERR == 6);
static_assert(IBV_QP_STATE == 1 << 0 && IBV_QP_DEST_QPN == 1 << 20);
static_assert(IBV_QP_RATE_LIMIT == 1 << 25);

// qp_state_table of drivers/infiniband/core/verbs.c, copied by hand one
// line per state pair and QP type. A pair that appears is valid for every
// type; "ALL" stands for all six types with nothing required or optional.
// Pairs that do not appear are invalid.
constexpr const char* kKernelTable = R"(
RESET->RESET ALL
RESET->INIT  RC         req: PKEY_INDEX PORT ACCESS_FLAGS
RESET->INIT  UC         req: PKEY_INDEX PORT ACCESS_FLAGS
RESET->INIT  UD         req: PKEY_INDEX PORT QKEY
RESET->INIT  RAW_PACKET req: PORT
RESET->INIT  XRC_INI    req: PKEY_INDEX PORT ACCESS_FLAGS
RESET->INIT  XRC_TGT    req: PKEY_INDEX PORT ACCESS_FLAGS

INIT->RESET ALL
INIT->ERR   ALL
INIT->INIT  RC         opt: PKEY_INDEX PORT ACCESS_FLAGS
INIT->INIT  UC         opt: PKEY_INDEX PORT ACCESS_FLAGS
INIT->INIT  UD         opt: PKEY_INDEX PORT QKEY
INIT->INIT  RAW_PACKET
INIT->INIT  XRC_INI    opt: PKEY_INDEX PORT ACCESS_FLAGS
INIT->INIT  XRC_TGT    opt: PKEY_INDEX PORT ACCESS_FLAGS
INIT->RTR   RC         req: AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
                       opt: ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT->RTR   UC         req: AV PATH_MTU DEST_QPN RQ_PSN
                       opt: ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT->RTR   UD         opt: PKEY_INDEX QKEY
INIT->RTR   RAW_PACKET
INIT->RTR   XRC_INI    req: AV PATH_MTU DEST_QPN RQ_PSN
                       opt: ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT->RTR   XRC_TGT    req: AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
                       opt: ALT_PATH ACCESS_FLAGS PKEY_INDEX

RTR->RESET ALL
RTR->ERR   ALL
RTR->RTS   RC         req: TIMEOUT RETRY_CNT RNR_RETRY SQ_PSN MAX_QP_RD_ATOMIC
                      opt: CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
RTR->RTS   UC         req: SQ_PSN
                      opt: CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
RTR->RTS   UD         req: SQ_PSN
                      opt: CUR_STATE QKEY
RTR->RTS   RAW_PACKET opt: RATE_LIMIT
RTR->RTS   XRC_INI    req: TIMEOUT RETRY_CNT RNR_RETRY SQ_PSN MAX_QP_RD_ATOMIC
                      opt: CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
RTR->RTS   XRC_TGT    req: TIMEOUT SQ_PSN
                      opt: CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE

RTS->RESET ALL
RTS->ERR   ALL
RTS->RTS   RC         opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER
RTS->RTS   UC         opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
RTS->RTS   UD         opt: CUR_STATE QKEY
RTS->RTS   RAW_PACKET opt: RATE_LIMIT
RTS->RTS   XRC_INI    opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
RTS->RTS   XRC_TGT    opt: CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER
RTS->SQD   RC         opt: EN_SQD_ASYNC_NOTIFY
RTS->SQD   UC         opt: EN_SQD_ASYNC_NOTIFY
RTS->SQD   UD         opt: EN_SQD_ASYNC_NOTIFY
RTS->SQD   RAW_PACKET
RTS->SQD   XRC_INI    opt: EN_SQD_ASYNC_NOTIFY
RTS->SQD   XRC_TGT    opt: EN_SQD_ASYNC_NOTIFY

SQD->RESET ALL
SQD->ERR   ALL
SQD->RTS   RC         opt: CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
SQD->RTS   UC         opt: CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
SQD->RTS   UD         opt: CUR_STATE QKEY
SQD->RTS   RAW_PACKET
SQD->RTS   XRC_INI    opt: CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
SQD->RTS   XRC_TGT    opt: CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
SQD->SQD   RC         opt: PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC
                           MAX_DEST_RD_ATOMIC ALT_PATH ACCESS_FLAGS PKEY_INDEX
                           MIN_RNR_TIMER PATH_MIG_STATE
SQD->SQD   UC         opt: AV ALT_PATH ACCESS_FLAGS PKEY_INDEX PATH_MIG_STATE
SQD->SQD   UD         opt: PKEY_INDEX QKEY
SQD->SQD   RAW_PACKET
SQD->SQD   XRC_INI    opt: PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC ALT_PATH
                           ACCESS_FLAGS PKEY_INDEX PATH_MIG_STATE
SQD->SQD   XRC_TGT    opt: PORT AV TIMEOUT MAX_DEST_RD_ATOMIC ALT_PATH ACCESS_FLAGS
                           PKEY_INDEX MIN_RNR_TIMER PATH_MIG_STATE

SQE->RESET ALL
SQE->ERR   ALL
SQE->RTS   RC
SQE->RTS   UC         opt: CUR_STATE ACCESS_FLAGS
SQE->RTS   UD         opt: CUR_STATE QKEY
SQE->RTS   RAW_PACKET
SQE->RTS   XRC_INI
SQE->RTS   XRC_TGT

ERR->RESET ALL
ERR->ERR   ALL
)";

const std::map<std::string, ibv_qp_state> kStateByName = {
    {"RESET", IBV_QPS_RESET}, {"INIT", IBV_QPS_INIT}, {"RTR", IBV_QPS_RTR}, {"RTS", IBV_QPS_RTS},
    {"SQD", IBV_QPS_SQD},     {"SQE", IBV_QPS_SQE},   {"ERR", IBV_QPS_ERR},
};

const std::vector<std::pair<std::string, ibv_qp_type>> kTypeByName = {
    {"RC", IBV_QPT_RC},
    {"UC", IBV_QPT_UC},
    {"UD", IBV_QPT_UD},
    {"RAW_PACKET", IBV_QPT_RAW_PACKET},
    {"XRC_INI", IBV_QPT_XRC_SEND},
    {"XRC_TGT", IBV_QPT_XRC_RECV},
};

const std::map<std::string, uint32_t> kBitByName = {
    {"CUR_STATE", IBV_QP_CUR_STATE},
    {"EN_SQD_ASYNC_NOTIFY", IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {"ACCESS_FLAGS", IBV_QP_ACCESS_FLAGS},
    {"PKEY_INDEX", IBV_QP_PKEY_INDEX},
    {"PORT", IBV_QP_PORT},
    {"QKEY", IBV_QP_QKEY},
    {"AV", IBV_QP_AV},
    {"PATH_MTU", IBV_QP_PATH_MTU},
    {"TIMEOUT", IBV_QP_TIMEOUT},
    {"RETRY_CNT", IBV_QP_RETRY_CNT},
    {"RNR_RETRY", IBV_QP_RNR_RETRY},
    {"RQ_PSN", IBV_QP_RQ_PSN},
    {"MAX_QP_RD_ATOMIC", IBV_QP_MAX_QP_RD_ATOMIC},
    {"ALT_PATH", IBV_QP_ALT_PATH},
    {"MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER},
    {"SQ_PSN", IBV_QP_SQ_PSN},
    {"MAX_DEST_RD_ATOMIC", IBV_QP_MAX_DEST_RD_ATOMIC},
    {"PATH_MIG_STATE", IBV_QP_PATH_MIG_STATE},
    {"CAP", IBV_QP_CAP},
    {"DEST_QPN", IBV_QP_DEST_QPN},
    {"RATE_LIMIT", IBV_QP_RATE_LIMIT},
};

struct Expected {
    uint32_t required = 0;
    uint32_t optional = 0;
};

using Key = std::tuple<ibv_qp_state, ibv_qp_state, ibv_qp_type>;

ibv_qp_type type_by_name(const std::string& name) {
    const auto it = std::find_if(kTypeByName.begin(), kTypeByName.end(),
                                 [&](const auto& p) { return p.first == name; });
    if (it == kTypeByName.end()) {
        throw std::invalid_argument("unknown QP type in kKernelTable: " + name);
    }
    return it->second;
}

// Parses kKernelTable. A typo in it throws, which fails the test.
std::map<Key, Expected> parse_kernel_table() {
    std::map<Key, Expected> table;
    std::istringstream lines(kKernelTable);
    std::string line;
    Expected* entry = nullptr;
    uint32_t* into = nullptr;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string word;
        if (!(words >> word)) {
            continue;
        }
        if (const auto arrow = word.find("->"); arrow != std::string::npos) {
            const ibv_qp_state from = kStateByName.at(word.substr(0, arrow));
            const ibv_qp_state to = kStateByName.at(word.substr(arrow + 2));
            std::string type;
            words >> type;
            std::vector<ibv_qp_type> types;
            if (type == "ALL") {
                for (const auto& [name, t] : kTypeByName) {
                    types.push_back(t);
                }
            } else {
                types.push_back(type_by_name(type));
            }
            for (ibv_qp_type t : types) {
                const auto [it, inserted] = table.emplace(Key{from, to, t}, Expected{});
                if (!inserted) {
                    throw std::invalid_argument("duplicate line in kKernelTable: " + line);
                }
                entry = &it->second;
            }
            if (types.size() > 1) {
                entry = nullptr;  // "ALL" takes no attributes
            }
            into = nullptr;
            if (!(words >> word)) {
                continue;
            }
        }
        // "req:" / "opt:" sections, possibly continued on the next lines.
        do {
            if (entry == nullptr) {
                throw std::invalid_argument("attributes without a QP type in: " + line);
            }
            if (word == "req:" || word == "opt:") {
                into = word == "req:" ? &entry->required : &entry->optional;
            } else if (into == nullptr) {
                throw std::invalid_argument("attribute outside req:/opt: in: " + line);
            } else {
                *into |= kBitByName.at(word);
            }
        } while (words >> word);
    }
    return table;
}

const std::map<Key, Expected>& kernel_table() {
    static const std::map<Key, Expected> table = parse_kernel_table();
    return table;
}

// Every attr_mask bit that names an attribute, IBV_QP_STATE included.
std::vector<uint32_t> all_attribute_bits() {
    std::vector<uint32_t> bits;
    for (int i = 0; i <= 20; ++i) {
        bits.push_back(1u << i);
    }
    bits.push_back(IBV_QP_RATE_LIMIT);
    return bits;
}

TEST(qpKernelTable, EveryValidPairListsAllSixTypes) {
    std::map<std::pair<ibv_qp_state, ibv_qp_state>, int> types_per_pair;
    for (const auto& [key, expected] : kernel_table()) {
        ++types_per_pair[{std::get<0>(key), std::get<1>(key)}];
    }
    EXPECT_EQ(types_per_pair.size(), 22u);
    for (const auto& [pair, count] : types_per_pair) {
        EXPECT_EQ(count, 6) << qp_state_name(pair.first) << "->" << qp_state_name(pair.second);
    }
}

struct Case {
    ibv_qp_state cur;
    ibv_qp_state next;
    ibv_qp_type type;
};

// Keeps the parameter shown in test names short and free of pointer bytes.
void PrintTo(const Case& c, std::ostream* os) {
    *os << qp_type_name(c.type) << ' ' << qp_state_name(c.cur) << "->" << qp_state_name(c.next);
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    for (const auto& [cur_name, cur] : kStateByName) {
        for (const auto& [next_name, next] : kStateByName) {
            for (const auto& [type_name, type] : kTypeByName) {
                cases.push_back({cur, next, type});
            }
        }
    }
    return cases;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
    return std::string(qp_type_name(info.param.type)) + "_" + qp_state_name(info.param.cur) +
           "_to_" + qp_state_name(info.param.next);
}

class qpTransition : public testing::TestWithParam<Case> {
  protected:
    const Case c = GetParam();
    const std::string where = std::string(qp_type_name(c.type)) + " " + qp_state_name(c.cur) +
                              "->" + qp_state_name(c.next);

    std::string check(uint32_t mask) const {
        return check_qp_transition(c.cur, c.next, c.type, static_cast<int>(mask));
    }
};

TEST_P(qpTransition, RuleMatchesKernelTable) {
    const auto& table = kernel_table();
    const auto it = table.find(Key{c.cur, c.next, c.type});
    const QpTransitionRule rule = qp_transition_rule(c.cur, c.next, c.type);
    if (it == table.end()) {
        EXPECT_FALSE(rule.valid);
        EXPECT_EQ(check(IBV_QP_STATE), where + " is not a valid transition");
        return;
    }
    EXPECT_TRUE(rule.valid);
    EXPECT_EQ(qp_attr_mask_names(rule.required), qp_attr_mask_names(it->second.required));
    EXPECT_EQ(qp_attr_mask_names(rule.optional), qp_attr_mask_names(it->second.optional));
}

TEST_P(qpTransition, EveryAttributeBit) {
    const auto it = kernel_table().find(Key{c.cur, c.next, c.type});
    if (it == kernel_table().end()) {
        for (uint32_t bit : all_attribute_bits()) {
            EXPECT_NE(check(IBV_QP_STATE | bit), "") << qp_attr_mask_names(bit);
        }
        return;
    }
    const uint32_t req = it->second.required;
    const uint32_t opt = it->second.optional;
    const uint32_t base = IBV_QP_STATE | req;
    EXPECT_EQ(check(base), "");
    EXPECT_EQ(check(base | opt), "");

    for (uint32_t bit : all_attribute_bits()) {
        SCOPED_TRACE(qp_attr_mask_names(bit));
        if (bit == IBV_QP_STATE) {
            // Without IBV_QP_STATE the kernel takes next = cur.
            EXPECT_EQ(check(req) == "", c.cur == c.next);
        } else if (req & bit) {
            EXPECT_EQ(check(base & ~bit), where + " requires " + qp_attr_mask_names(bit));
        } else if (opt & bit) {
            EXPECT_EQ(check(base | bit), "");
        } else if (bit == IBV_QP_CUR_STATE && c.cur != IBV_QPS_RTR && c.cur != IBV_QPS_RTS &&
                   c.cur != IBV_QPS_SQD && c.cur != IBV_QPS_SQE) {
            EXPECT_EQ(check(base | bit),
                      std::string("IBV_QP_CUR_STATE is only allowed from RTR, RTS, SQD or SQE, "
                                  "not ") +
                          qp_state_name(c.cur));
        } else {
            EXPECT_EQ(check(base | bit), qp_attr_mask_names(bit) + " is not allowed in " + where);
        }
    }
}

TEST_P(qpTransition, UnnamedMaskBitsAreRejected) {
    for (int i = 21; i < 32; ++i) {
        const uint32_t bit = 1u << i;
        if (bit != IBV_QP_RATE_LIMIT) {
            EXPECT_NE(check(IBV_QP_STATE | bit), "") << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllStatePairsAndTypes, qpTransition, testing::ValuesIn(all_cases()),
                         case_name);

TEST(qpTransitionMessages, NameWhatIsMissingOrExtra) {
    EXPECT_EQ(check_qp_transition(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC,
                                  IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              "RC INIT->RTR requires IBV_QP_AV");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC,
                                  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU),
              "IBV_QP_PATH_MTU is not allowed in RC RESET->INIT");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_UD, IBV_QP_STATE),
              "UD RESET->INIT requires IBV_QP_PKEY_INDEX|IBV_QP_PORT|IBV_QP_QKEY");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RAW_PACKET,
                                  IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
              "IBV_QP_PKEY_INDEX|IBV_QP_QKEY are not allowed in RAW_PACKET RESET->INIT");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RTS, IBV_QPS_INIT, IBV_QPT_UC, IBV_QP_STATE),
              "UC RTS->INIT is not a valid transition");
    EXPECT_EQ(check_qp_transition(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_UD, 0),
              "next state RTR differs from current state INIT but IBV_QP_STATE is not set");
}

TEST(qpTransitionCurState, OnlyFromStatesTheHardwareCanLeaveOnItsOwn) {
    const int mask = IBV_QP_STATE | IBV_QP_CUR_STATE;
    EXPECT_EQ(check_qp_transition(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_RC, mask), "");
    EXPECT_EQ(check_qp_transition(IBV_QPS_SQD, IBV_QPS_RTS, IBV_QPT_UD, mask), "");
    EXPECT_EQ(check_qp_transition(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_UC, mask), "");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_UD, mask | IBV_QP_SQ_PSN), "");
    // The rule comes before the table: even a transition that takes no
    // attributes is refused from the other states.
    EXPECT_EQ(check_qp_transition(IBV_QPS_ERR, IBV_QPS_RESET, IBV_QPT_RC, mask),
              "IBV_QP_CUR_STATE is only allowed from RTR, RTS, SQD or SQE, not ERR");
    EXPECT_EQ(check_qp_transition(IBV_QPS_INIT, IBV_QPS_INIT, IBV_QPT_RC, IBV_QP_CUR_STATE),
              "IBV_QP_CUR_STATE is only allowed from RTR, RTS, SQD or SQE, not INIT");
    // Allowed state, but not an optional attribute of that transition.
    EXPECT_EQ(check_qp_transition(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_RC, mask),
              "IBV_QP_CUR_STATE is not allowed in RC RTS->SQD");
    EXPECT_EQ(check_qp_transition(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_RC, mask),
              "IBV_QP_CUR_STATE is not allowed in RC SQE->RTS");
    EXPECT_EQ(check_qp_transition(IBV_QPS_RTS, IBV_QPS_ERR, IBV_QPT_RC, mask),
              "IBV_QP_CUR_STATE is not allowed in RC RTS->ERR");
}

TEST(qpTransitionEnums, UnknownTypesAreRefused) {
    for (int t : {0, 1, 5, 6, 7, 11, 0xff}) {
        const auto type = static_cast<ibv_qp_type>(t);
        EXPECT_FALSE(qp_transition_rule(IBV_QPS_RESET, IBV_QPS_RESET, type).valid) << t;
        EXPECT_EQ(check_qp_transition(IBV_QPS_RESET, IBV_QPS_RESET, type, IBV_QP_STATE),
                  "unknown QP type " + std::to_string(t));
        EXPECT_STREQ(qp_type_name(type), "UNKNOWN");
    }
}

// IBV_QPS_UNKNOWN is the only bad value an ibv_qp_state can hold; raw
// out-of-range values are refused by check_qp_attr_values() before this.
TEST(qpTransitionEnums, UnknownStateIsRefused) {
    const ibv_qp_state state = IBV_QPS_UNKNOWN;
    EXPECT_FALSE(qp_transition_rule(state, IBV_QPS_RESET, IBV_QPT_RC).valid);
    EXPECT_FALSE(qp_transition_rule(IBV_QPS_ERR, state, IBV_QPT_RC).valid);
    EXPECT_FALSE(qp_transition_rule(state, state, IBV_QPT_RC).valid);
    EXPECT_EQ(check_qp_transition(state, IBV_QPS_RESET, IBV_QPT_RC, IBV_QP_STATE),
              "unknown current QP state 7");
    EXPECT_EQ(check_qp_transition(IBV_QPS_ERR, state, IBV_QPT_RC, IBV_QP_STATE),
              "unknown QP state 7");
    EXPECT_STREQ(qp_state_name(state), "UNKNOWN");
}

// perftest -c XRC and ibv_xsrq_pingpong pass responder attributes for the
// XRC_INI QP and requester ones for the XRC_TGT QP; the kernel drops them
// before checking the transition.
TEST(qpIgnoredAttrs, XrcSidesDropTheOtherSidesAttributes) {
    constexpr int kRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    EXPECT_EQ(drop_ignored_qp_attrs(IBV_QPT_XRC_SEND, kRtr),
              kRtr & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
    EXPECT_EQ(check_qp_transition(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND,
                                  drop_ignored_qp_attrs(IBV_QPT_XRC_SEND, kRtr)),
              "");
    EXPECT_NE(check_qp_transition(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, kRtr), "");
    constexpr int kRts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    EXPECT_EQ(drop_ignored_qp_attrs(IBV_QPT_XRC_RECV, kRts),
              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN);
    // Nothing is dropped for the other types.
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET}) {
        EXPECT_EQ(drop_ignored_qp_attrs(type, kRtr | kRts), kRtr | kRts) << type;
    }
}

TEST(qpNames, StatesTypesAndMasks) {
    std::set<std::string> states;
    for (const auto& [name, state] : kStateByName) {
        EXPECT_EQ(qp_state_name(state), name);
        states.insert(qp_state_name(state));
    }
    EXPECT_EQ(states.size(), 7u);
    for (const auto& [name, type] : kTypeByName) {
        EXPECT_EQ(qp_type_name(type), name);
    }
    for (const auto& [name, bit] : kBitByName) {
        EXPECT_EQ(qp_attr_mask_names(bit), "IBV_QP_" + name);
    }
    EXPECT_EQ(qp_attr_mask_names(IBV_QP_AV | IBV_QP_PATH_MTU), "IBV_QP_AV|IBV_QP_PATH_MTU");
    EXPECT_EQ(qp_attr_mask_names(IBV_QP_STATE), "IBV_QP_STATE");
    EXPECT_EQ(qp_attr_mask_names(0), "0");
    EXPECT_EQ(qp_attr_mask_names(IBV_QP_DEST_QPN | 1u << 21 | 1u << 31),
              "IBV_QP_DEST_QPN|0x200000|0x80000000");
}

}  // namespace
}  // namespace uroce
