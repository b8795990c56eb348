#include "qp/qp_attr_check.h"

#include <cstring>
#include <string_view>

#include "qp/qp_transitions.h"

namespace uroce {
namespace {

constexpr uint32_t kPsnMax = 0xffffff;  // PSNs and QP numbers are 24 bits on the wire
constexpr unsigned kTimerMax = 31;      // 5-bit timeout and RNR timer encodings
constexpr unsigned kRetryMax = 7;       // 3-bit retry counters

// Enum fields come from a client and may hold any 32-bit value; reading them
// as integers avoids loading an enum outside its range.
template <typename Enum>
uint32_t raw(const Enum& field) {
    static_assert(sizeof(Enum) == sizeof(uint32_t));
    uint32_t value;
    std::memcpy(&value, &field, sizeof(value));
    return value;
}

std::string num(uint64_t v) {
    return std::to_string(v);
}

int mtu_bytes(unsigned mtu) {
    return 128 << mtu;
}

std::string check_port(unsigned port, const char* what, const QpAttrLimits& limits) {
    if (port < 1 || port > limits.port_count) {
        return std::string(what) + " " + num(port) + " is out of range 1.." +
               num(limits.port_count);
    }
    return {};
}

std::string check_pkey_index(unsigned index, const char* what, const QpAttrLimits& limits) {
    if (index >= limits.pkey_table_len) {
        return std::string(what) + " " + num(index) + " is beyond the P_Key table of " +
               num(limits.pkey_table_len) + " entries";
    }
    return {};
}

std::string check_timer(unsigned value, const char* what) {
    if (value > kTimerMax) {
        return std::string(what) + " " + num(value) + " is above " + num(kTimerMax);
    }
    return {};
}

std::string check_retry(unsigned value, const char* what) {
    if (value > kRetryMax) {
        return std::string(what) + " " + num(value) + " is above " + num(kRetryMax);
    }
    return {};
}

std::string check_24bit(uint32_t value, const char* what) {
    if (value > kPsnMax) {
        return std::string(what) + " " + num(value) + " does not fit in 24 bits";
    }
    return {};
}

std::string check_cap(unsigned value, uint32_t cap, const char* what, const char* cap_name) {
    if (value > cap) {
        return std::string(what) + " " + num(value) + " is above the device's " + cap_name + " " +
               num(cap);
    }
    return {};
}

std::string check_state(unsigned state, const char* what) {
    if (state > IBV_QPS_ERR) {
        return std::string("unknown ") + what + " " + num(state);
    }
    return {};
}

// On RoCE every address carries a GRH: the source GID selects the IP/MAC.
std::string check_ah(const ibv_ah_attr& ah, const char* what, const QpAttrLimits& limits) {
    const std::string name(what);
    if (auto err = check_port(ah.port_num, (name + ".port_num").c_str(), limits); !err.empty()) {
        return err;
    }
    if (!ah.is_global) {
        return name + ".is_global must be 1: RoCE addresses need a GRH";
    }
    if (ah.grh.sgid_index >= limits.gid_table_len) {
        return name + ".grh.sgid_index " + num(ah.grh.sgid_index) + " is beyond the GID table of " +
               num(limits.gid_table_len) + " entries";
    }
    return {};
}

std::string check_path_mtu(unsigned mtu, const QpAttrLimits& limits) {
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
        return "unknown path_mtu " + num(mtu);
    }
    if (mtu > static_cast<unsigned>(limits.port_max_mtu)) {
        return "path_mtu " + num(mtu_bytes(mtu)) + " is above the port's max MTU " +
               num(mtu_bytes(limits.port_max_mtu));
    }
    return {};
}

std::string check_alt_path(const ibv_qp_attr& attr, const QpAttrLimits& limits) {
    if (auto err = check_port(attr.alt_port_num, "alt_port_num", limits); !err.empty()) {
        return err;
    }
    if (auto err = check_ah(attr.alt_ah_attr, "alt_ah_attr", limits); !err.empty()) {
        return err;
    }
    // uverbs rejects an alternate path whose two port numbers disagree.
    if (attr.alt_ah_attr.port_num != attr.alt_port_num) {
        return "alt_ah_attr.port_num " + num(attr.alt_ah_attr.port_num) +
               " differs from alt_port_num " + num(attr.alt_port_num);
    }
    if (auto err = check_pkey_index(attr.alt_pkey_index, "alt_pkey_index", limits); !err.empty()) {
        return err;
    }
    return check_timer(attr.alt_timeout, "alt_timeout");
}

using Check = std::string (*)(const ibv_qp_attr&, uint32_t mask, const QpAttrLimits&);
struct AttrCheck {
    uint32_t bit;
    Check check;
};

// One entry per attr_mask bit that has a value to check, in bit order.
// IBV_QP_EN_SQD_ASYNC_NOTIFY, ACCESS_FLAGS, QKEY, CAP and RATE_LIMIT take any
// value here.
constexpr AttrCheck kChecks[] = {
    {IBV_QP_STATE, [](const ibv_qp_attr& a, uint32_t,
                      const QpAttrLimits&) { return check_state(raw(a.qp_state), "qp_state"); }},
    {IBV_QP_CUR_STATE,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits&) {
         return check_state(raw(a.cur_qp_state), "cur_qp_state");
     }},
    {IBV_QP_PKEY_INDEX,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits& l) {
         return check_pkey_index(a.pkey_index, "pkey_index", l);
     }},
    {IBV_QP_PORT, [](const ibv_qp_attr& a, uint32_t,
                     const QpAttrLimits& l) { return check_port(a.port_num, "port_num", l); }},
    {IBV_QP_AV,
     [](const ibv_qp_attr& a, uint32_t mask, const QpAttrLimits& l) {
         if (auto err = check_ah(a.ah_attr, "ah_attr", l); !err.empty()) {
             return err;
         }
         // Only SQD->SQD allows both; the QP's port follows the new path.
         if ((mask & IBV_QP_PORT) && a.ah_attr.port_num != a.port_num) {
             return "ah_attr.port_num " + num(a.ah_attr.port_num) + " differs from port_num " +
                    num(a.port_num);
         }
         return std::string();
     }},
    {IBV_QP_PATH_MTU, [](const ibv_qp_attr& a, uint32_t,
                         const QpAttrLimits& l) { return check_path_mtu(raw(a.path_mtu), l); }},
    {IBV_QP_TIMEOUT, [](const ibv_qp_attr& a, uint32_t,
                        const QpAttrLimits&) { return check_timer(a.timeout, "timeout"); }},
    {IBV_QP_RETRY_CNT, [](const ibv_qp_attr& a, uint32_t,
                          const QpAttrLimits&) { return check_retry(a.retry_cnt, "retry_cnt"); }},
    {IBV_QP_RNR_RETRY, [](const ibv_qp_attr& a, uint32_t,
                          const QpAttrLimits&) { return check_retry(a.rnr_retry, "rnr_retry"); }},
    {IBV_QP_RQ_PSN, [](const ibv_qp_attr& a, uint32_t,
                       const QpAttrLimits&) { return check_24bit(a.rq_psn, "rq_psn"); }},
    {IBV_QP_MAX_QP_RD_ATOMIC,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits& l) {
         return check_cap(a.max_rd_atomic, l.max_qp_init_rd_atom, "max_rd_atomic",
                          "max_qp_init_rd_atom");
     }},
    {IBV_QP_ALT_PATH,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits& l) { return check_alt_path(a, l); }},
    {IBV_QP_MIN_RNR_TIMER,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits&) {
         return check_timer(a.min_rnr_timer, "min_rnr_timer");
     }},
    {IBV_QP_SQ_PSN, [](const ibv_qp_attr& a, uint32_t,
                       const QpAttrLimits&) { return check_24bit(a.sq_psn, "sq_psn"); }},
    {IBV_QP_MAX_DEST_RD_ATOMIC,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits& l) {
         return check_cap(a.max_dest_rd_atomic, l.max_qp_rd_atom, "max_dest_rd_atomic",
                          "max_qp_rd_atom");
     }},
    {IBV_QP_PATH_MIG_STATE,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits&) {
         const uint32_t state = raw(a.path_mig_state);
         return state > IBV_MIG_ARMED ? "unknown path_mig_state " + num(state) : std::string();
     }},
    {IBV_QP_DEST_QPN,
     [](const ibv_qp_attr& a, uint32_t, const QpAttrLimits&) {
         return check_24bit(a.dest_qp_num, "dest_qp_num");
     }},
};

}  // namespace

std::string check_qp_attr_values(const ibv_qp_attr& attr, int attr_mask, ibv_qp_type type,
                                 const QpAttrLimits& limits) {
    if (std::string_view(qp_type_name(type)) == "UNKNOWN") {
        return "unknown QP type " + num(static_cast<unsigned>(type));
    }
    const auto mask = static_cast<uint32_t>(attr_mask);
    for (const AttrCheck& c : kChecks) {
        if (mask & c.bit) {
            if (auto err = c.check(attr, mask, limits); !err.empty()) {
                return err;
            }
        }
    }
    return {};
}

}  // namespace uroce
