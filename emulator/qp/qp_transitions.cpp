#include "qp/qp_transitions.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <iterator>

namespace uroce {
namespace {

constexpr uint32_t kCurState = IBV_QP_CUR_STATE;
constexpr uint32_t kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;
constexpr uint32_t kAccess = IBV_QP_ACCESS_FLAGS;
constexpr uint32_t kPkey = IBV_QP_PKEY_INDEX;
constexpr uint32_t kPort = IBV_QP_PORT;
constexpr uint32_t kQkey = IBV_QP_QKEY;
constexpr uint32_t kAv = IBV_QP_AV;
constexpr uint32_t kMtu = IBV_QP_PATH_MTU;
constexpr uint32_t kTimeout = IBV_QP_TIMEOUT;
constexpr uint32_t kRetry = IBV_QP_RETRY_CNT;
constexpr uint32_t kRnrRetry = IBV_QP_RNR_RETRY;
constexpr uint32_t kRqPsn = IBV_QP_RQ_PSN;
constexpr uint32_t kRdAtomic = IBV_QP_MAX_QP_RD_ATOMIC;
constexpr uint32_t kAltPath = IBV_QP_ALT_PATH;
constexpr uint32_t kMinRnr = IBV_QP_MIN_RNR_TIMER;
constexpr uint32_t kSqPsn = IBV_QP_SQ_PSN;
constexpr uint32_t kDestRdAtomic = IBV_QP_MAX_DEST_RD_ATOMIC;
constexpr uint32_t kMigState = IBV_QP_PATH_MIG_STATE;
constexpr uint32_t kDestQpn = IBV_QP_DEST_QPN;
constexpr uint32_t kRateLimit = IBV_QP_RATE_LIMIT;

// Column order of the per-type masks in kTransitions.
constexpr std::array<ibv_qp_type, 6> kTypes = {
    IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV};
using PerType = std::array<uint32_t, kTypes.size()>;

struct Transition {
    ibv_qp_state from;
    ibv_qp_state to;
    PerType required;
    PerType optional;
};

// qp_state_table of drivers/infiniband/core/verbs.c without the SMI/GSI
// columns. A state pair that is listed is valid for every QP type, even one
// whose masks are all zero (e.g. RC SQE->RTS). Pairs not listed are invalid.
// clang-format off
constexpr Transition kTransitions[] = {
    {IBV_QPS_RESET, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_RESET, IBV_QPS_INIT,
     {// required: RC, UC, UD, RAW_PACKET, XRC_INI, XRC_TGT
      kPkey | kPort | kAccess,
      kPkey | kPort | kAccess,
      kPkey | kPort | kQkey,
      kPort,
      kPkey | kPort | kAccess,
      kPkey | kPort | kAccess},
     {}},

    {IBV_QPS_INIT, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_INIT, IBV_QPS_ERR, {}, {}},
    {IBV_QPS_INIT, IBV_QPS_INIT,
     {},
     {// optional: RC, UC, UD, RAW_PACKET, XRC_INI, XRC_TGT
      kPkey | kPort | kAccess,
      kPkey | kPort | kAccess,
      kPkey | kPort | kQkey,
      0,
      kPkey | kPort | kAccess,
      kPkey | kPort | kAccess}},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     {// required
      kAv | kMtu | kDestQpn | kRqPsn | kDestRdAtomic | kMinRnr,
      kAv | kMtu | kDestQpn | kRqPsn,
      0,
      0,
      kAv | kMtu | kDestQpn | kRqPsn,
      kAv | kMtu | kDestQpn | kRqPsn | kDestRdAtomic | kMinRnr},
     {// optional
      kAltPath | kAccess | kPkey,
      kAltPath | kAccess | kPkey,
      kPkey | kQkey,
      0,
      kAltPath | kAccess | kPkey,
      kAltPath | kAccess | kPkey}},

    {IBV_QPS_RTR, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_RTR, IBV_QPS_ERR, {}, {}},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     {// required
      kTimeout | kRetry | kRnrRetry | kSqPsn | kRdAtomic,
      kSqPsn,
      kSqPsn,
      0,
      kTimeout | kRetry | kRnrRetry | kSqPsn | kRdAtomic,
      kTimeout | kSqPsn},
     {// optional
      kCurState | kAltPath | kAccess | kMinRnr | kMigState,
      kCurState | kAltPath | kAccess | kMigState,
      kCurState | kQkey,
      kRateLimit,
      kCurState | kAltPath | kAccess | kMigState,
      kCurState | kAltPath | kAccess | kMinRnr | kMigState}},

    {IBV_QPS_RTS, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_RTS, IBV_QPS_ERR, {}, {}},
    {IBV_QPS_RTS, IBV_QPS_RTS,
     {},
     {// optional
      kCurState | kAccess | kAltPath | kMigState | kMinRnr,
      kCurState | kAccess | kAltPath | kMigState,
      kCurState | kQkey,
      kRateLimit,
      kCurState | kAccess | kAltPath | kMigState,
      kCurState | kAccess | kAltPath | kMigState | kMinRnr}},
    {IBV_QPS_RTS, IBV_QPS_SQD,
     {},
     {// optional
      kSqdNotify, kSqdNotify, kSqdNotify, 0, kSqdNotify, kSqdNotify}},

    {IBV_QPS_SQD, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_SQD, IBV_QPS_ERR, {}, {}},
    {IBV_QPS_SQD, IBV_QPS_RTS,
     {},
     {// optional
      kCurState | kAltPath | kAccess | kMinRnr | kMigState,
      kCurState | kAltPath | kAccess | kMigState,
      kCurState | kQkey,
      0,
      kCurState | kAltPath | kAccess | kMigState,
      kCurState | kAltPath | kAccess | kMinRnr | kMigState}},
    {IBV_QPS_SQD, IBV_QPS_SQD,
     {},
     {// optional
      kPort | kAv | kTimeout | kRetry | kRnrRetry | kRdAtomic | kDestRdAtomic | kAltPath |
          kAccess | kPkey | kMinRnr | kMigState,
      kAv | kAltPath | kAccess | kPkey | kMigState,
      kPkey | kQkey,
      0,
      kPort | kAv | kTimeout | kRetry | kRnrRetry | kRdAtomic | kAltPath | kAccess | kPkey |
          kMigState,
      kPort | kAv | kTimeout | kDestRdAtomic | kAltPath | kAccess | kPkey | kMinRnr |
          kMigState}},

    {IBV_QPS_SQE, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_SQE, IBV_QPS_ERR, {}, {}},
    {IBV_QPS_SQE, IBV_QPS_RTS,
     {},
     {// optional
      0,
      kCurState | kAccess,
      kCurState | kQkey,
      0,
      0,
      0}},

    {IBV_QPS_ERR, IBV_QPS_RESET, {}, {}},
    {IBV_QPS_ERR, IBV_QPS_ERR, {}, {}},
};
// clang-format on

// IBV_QP_CUR_STATE only makes sense where the hardware may have moved the QP
// on its own (SQD drained, SQE, RTR->RTS on first receive).
constexpr uint32_t kCurStateFrom =
    1u << IBV_QPS_RTR | 1u << IBV_QPS_RTS | 1u << IBV_QPS_SQD | 1u << IBV_QPS_SQE;

struct MaskName {
    uint32_t bit;
    const char* name;
};

constexpr MaskName kMaskNames[] = {
    {IBV_QP_STATE, "IBV_QP_STATE"},
    {IBV_QP_CUR_STATE, "IBV_QP_CUR_STATE"},
    {IBV_QP_EN_SQD_ASYNC_NOTIFY, "IBV_QP_EN_SQD_ASYNC_NOTIFY"},
    {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
    {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
    {IBV_QP_PORT, "IBV_QP_PORT"},
    {IBV_QP_QKEY, "IBV_QP_QKEY"},
    {IBV_QP_AV, "IBV_QP_AV"},
    {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
    {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
    {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
    {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
    {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
    {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
    {IBV_QP_ALT_PATH, "IBV_QP_ALT_PATH"},
    {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
    {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
    {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
    {IBV_QP_PATH_MIG_STATE, "IBV_QP_PATH_MIG_STATE"},
    {IBV_QP_CAP, "IBV_QP_CAP"},
    {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
    {IBV_QP_RATE_LIMIT, "IBV_QP_RATE_LIMIT"},
};

int type_column(ibv_qp_type type) {
    const auto* it = std::find(kTypes.begin(), kTypes.end(), type);
    return it == kTypes.end() ? -1 : static_cast<int>(it - kTypes.begin());
}

bool known_state(ibv_qp_state state) {
    return static_cast<uint32_t>(state) <= IBV_QPS_ERR;
}

const Transition* find_transition(ibv_qp_state from, ibv_qp_state to) {
    const auto* it =
        std::find_if(std::begin(kTransitions), std::end(kTransitions),
                     [&](const Transition& t) { return t.from == from && t.to == to; });
    return it == std::end(kTransitions) ? nullptr : it;
}

}  // namespace

QpTransitionRule qp_transition_rule(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type) {
    const int column = type_column(type);
    const Transition* t = find_transition(cur, next);
    if (column < 0 || t == nullptr) {
        return {false, 0, 0};
    }
    return {true, t->required[column], t->optional[column]};
}

std::string check_qp_transition(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type,
                                int attr_mask) {
    const auto mask = static_cast<uint32_t>(attr_mask);
    if (type_column(type) < 0) {
        return "unknown QP type " + std::to_string(static_cast<int>(type));
    }
    if (!known_state(cur)) {
        return "unknown current QP state " + std::to_string(static_cast<int>(cur));
    }
    if (!known_state(next)) {
        return "unknown QP state " + std::to_string(static_cast<int>(next));
    }
    if (!(mask & IBV_QP_STATE) && next != cur) {
        return std::string("next state ") + qp_state_name(next) + " differs from current state " +
               qp_state_name(cur) + " but IBV_QP_STATE is not set";
    }
    if ((mask & IBV_QP_CUR_STATE) && !(kCurStateFrom & (1u << cur))) {
        return std::string("IBV_QP_CUR_STATE is only allowed from RTR, RTS, SQD or SQE, not ") +
               qp_state_name(cur);
    }

    const std::string where =
        std::string(qp_type_name(type)) + " " + qp_state_name(cur) + "->" + qp_state_name(next);
    const QpTransitionRule rule = qp_transition_rule(cur, next, type);
    if (!rule.valid) {
        return where + " is not a valid transition";
    }
    if (const uint32_t missing = rule.required & ~mask) {
        return where + " requires " + qp_attr_mask_names(missing);
    }
    if (const uint32_t extra = mask & ~(rule.required | rule.optional | IBV_QP_STATE)) {
        return qp_attr_mask_names(extra) + (std::has_single_bit(extra) ? " is" : " are") +
               " not allowed in " + where;
    }
    return {};
}

int drop_ignored_qp_attrs(ibv_qp_type type, int attr_mask) {
    switch (type) {
        case IBV_QPT_XRC_SEND:
            return attr_mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        case IBV_QPT_XRC_RECV:
            return attr_mask & ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
        default:
            return attr_mask;
    }
}

const char* qp_state_name(ibv_qp_state state) {
    static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return known_state(state) ? kNames[state] : "UNKNOWN";
}

const char* qp_type_name(ibv_qp_type type) {
    static constexpr const char* kNames[kTypes.size()] = {"RC",         "UC",      "UD",
                                                          "RAW_PACKET", "XRC_INI", "XRC_TGT"};
    const int column = type_column(type);
    return column < 0 ? "UNKNOWN" : kNames[column];
}

std::string qp_attr_mask_names(uint32_t mask) {
    if (mask == 0) {
        return "0";
    }
    std::string out;
    for (uint32_t rest = mask; rest != 0; rest &= rest - 1) {
        const uint32_t bit = 1u << std::countr_zero(rest);
        const auto* it = std::find_if(std::begin(kMaskNames), std::end(kMaskNames),
                                      [&](const MaskName& m) { return m.bit == bit; });
        if (!out.empty()) {
            out += '|';
        }
        if (it != std::end(kMaskNames)) {
            out += it->name;
        } else {
            char hex[16];
            std::snprintf(hex, sizeof(hex), "0x%x", bit);
            out += hex;
        }
    }
    return out;
}

}  // namespace uroce
