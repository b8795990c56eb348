// The QP state transition rules every Linux RDMA driver applies through
// ib_modify_qp_is_ok() (drivers/infiniband/core/verbs.c): which state changes
// are legal for each QP type and which attr_mask bits each change requires or
// allows.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <string>

namespace uroce {

struct QpTransitionRule {
    bool valid;
    uint32_t required;  // ibv_qp_attr_mask bits, IBV_QP_STATE excluded
    uint32_t optional;  // ibv_qp_attr_mask bits, IBV_QP_STATE excluded
};

// The rule for cur -> next for a QP type. Unknown states or types give an
// invalid rule.
QpTransitionRule qp_transition_rule(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type);

// Empty when ib_modify_qp_is_ok() would accept the modify; otherwise why not,
// e.g. "RC INIT->RTR requires IBV_QP_AV". The caller computes next as the
// kernel does: (attr_mask & IBV_QP_STATE) ? attr.qp_state : cur.
std::string check_qp_transition(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type,
                                int attr_mask);

// The attr_mask without the bits the kernel's uverbs modify_qp ignores for
// the type before any check (its modify_qp_mask()): an XRC_INI QP has no
// responder, an XRC_TGT QP no requester, so their attributes mean nothing.
int drop_ignored_qp_attrs(ibv_qp_type type, int attr_mask);

// "RESET" ... "ERR"; "UNKNOWN" for anything else.
const char* qp_state_name(ibv_qp_state state);
// "RC", "UC", "UD", "RAW_PACKET", "XRC_INI", "XRC_TGT" (kernel names for the
// XRC send and receive sides); "UNKNOWN" for anything else.
const char* qp_type_name(ibv_qp_type type);
// "IBV_QP_AV|IBV_QP_PATH_MTU"; bits without a name print as hex, 0 as "0".
std::string qp_attr_mask_names(uint32_t mask);

}  // namespace uroce
