// Value checks on the attributes of an ibv_modify_qp() call, the ones the
// kernel's Soft-RoCE driver makes in rxe_qp_chk_attr() and uverbs makes before
// it: ranges, enum values and device limits. Which attributes a transition
// needs is checked by check_qp_transition() in qp_transitions.h.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <string>

namespace uroce {

struct QpAttrLimits {
    uint8_t port_count;  // ports are numbered 1..port_count
    ibv_mtu port_max_mtu;
    uint16_t pkey_table_len;
    uint32_t gid_table_len;
    uint32_t max_qp_rd_atom;       // device cap: responder resources (max_dest_rd_atomic limit)
    uint32_t max_qp_init_rd_atom;  // device cap: initiator depth (max_rd_atomic limit)
};

// Empty when every attribute selected by attr_mask has a valid value;
// otherwise why not (the caller fails the modify with EINVAL). Attributes
// are checked in mask bit order, so the first bad one is reported.
std::string check_qp_attr_values(const ibv_qp_attr& attr, int attr_mask, ibv_qp_type type,
                                 const QpAttrLimits& limits);

}  // namespace uroce
