// Every send work-request opcode uroce carries, as data (the spirit of the
// kernel's rxe_wr_opcode_info[]): which QP types may post it, what kind of
// operation it is, what it completes as and which fields of the WR it uses.
// The provider checks posts against it and the daemon sends, answers and
// completes by it. Adding an opcode is a row here plus its packets in the
// requester, responder and completer.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <array>

#include "uroce_abi.h"

namespace uroce::wr {

// What the operation does, which decides its packets and its completion.
enum class Kind : uint8_t {
    kSend,         // consumes a receive WQE at the responder
    kWrite,        // places data at (remote_addr, rkey)
    kRead,         // fetches data from (remote_addr, rkey) into the gather list
    kAtomic,       // 8 bytes at an aligned remote address, the old value returned
    kAtomicWrite,  // IBA 1.5: 8 bytes written atomically, acknowledged as a write
    kLocal,        // acts on the device's memory keys; no packet
};

// The QP types that may post an opcode, as bits.
enum QpTypeBits : uint8_t {
    kRcBit = 1 << 0,
    kUcBit = 1 << 1,
    kUdBit = 1 << 2,
    kXrcSendBit = 1 << 3,
    kRawBit = 1 << 4,
};
inline constexpr uint8_t kReliableBits = kRcBit | kXrcSendBit;
inline constexpr uint8_t kConnectedBits = kReliableBits | kUcBit;

constexpr uint8_t qp_type_bit(ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return kRcBit;
        case IBV_QPT_UC:
            return kUcBit;
        case IBV_QPT_UD:
            return kUdBit;
        case IBV_QPT_XRC_SEND:
            return kXrcSendBit;
        case IBV_QPT_RAW_PACKET:
            return kRawBit;
        default:
            return 0;  // XRC_RECV and the rest post nothing
    }
}

struct OpcodeInfo {
    const char* name;  // as ibv_wr_opcode_str
    uint32_t opcode;   // ibv_wr_opcode; 0 with name null: a hole
    uint8_t qp_types;  // QpTypeBits that may post it
    Kind kind;
    ibv_wc_opcode wc_opcode;  // what its completion says
    uint64_t send_ops_flag;   // its IBV_QP_EX_WITH_* bit (ibv_create_qp_ex)
    bool immediate;           // carries imm_data
    bool invalidate;          // carries an rkey to invalidate at the responder
    bool inline_allowed;      // IBV_SEND_INLINE is valid (ibv_post_send(3))
    bool uses_rd_atomic;      // holds one of the QP's max_rd_atomic slots until answered
};

inline constexpr uint8_t kSendTypes = kConnectedBits | kUdBit;

// IBA 1.5's atomic write has its names from rdma-core v44 (uroce_abi.h).
#if UROCE_HAVE_ATOMIC_WRITE
static_assert(UROCE_WR_ATOMIC_WRITE == IBV_WR_ATOMIC_WRITE &&
              UROCE_WC_ATOMIC_WRITE == IBV_WC_ATOMIC_WRITE &&
              UROCE_QP_EX_WITH_ATOMIC_WRITE == IBV_QP_EX_WITH_ATOMIC_WRITE);
#endif
inline constexpr uint32_t kWrAtomicWrite = UROCE_WR_ATOMIC_WRITE;
inline constexpr ibv_wc_opcode kWcAtomicWrite = static_cast<ibv_wc_opcode>(UROCE_WC_ATOMIC_WRITE);

// Indexed by ibv_wr_opcode. TSO, DRIVER1 and FLUSH are not offered.
inline constexpr std::array<OpcodeInfo, kWrAtomicWrite + 1> kOpcodes = [] {
    std::array<OpcodeInfo, kWrAtomicWrite + 1> t{};
    // clang-format off
    // name, opcode, QP types, kind, WC opcode, send_ops flag, immediate, invalidate, inline, rd_atomic
    t[IBV_WR_RDMA_WRITE] =          {"RDMA_WRITE",          IBV_WR_RDMA_WRITE,          kConnectedBits,         Kind::kWrite,       IBV_WC_RDMA_WRITE,   IBV_QP_EX_WITH_RDMA_WRITE,            false, false, true,  false};
    t[IBV_WR_RDMA_WRITE_WITH_IMM] = {"RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, kConnectedBits,         Kind::kWrite,       IBV_WC_RDMA_WRITE,   IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,   true,  false, true,  false};
    t[IBV_WR_SEND] =                {"SEND",                IBV_WR_SEND,                kSendTypes | kRawBit,   Kind::kSend,        IBV_WC_SEND,         IBV_QP_EX_WITH_SEND,                  false, false, true,  false};
    // Ethernet frames carry no immediate data.
    t[IBV_WR_SEND_WITH_IMM] =       {"SEND_WITH_IMM",       IBV_WR_SEND_WITH_IMM,       kSendTypes,             Kind::kSend,        IBV_WC_SEND,         IBV_QP_EX_WITH_SEND_WITH_IMM,         true,  false, true,  false};
    t[IBV_WR_RDMA_READ] =           {"RDMA_READ",           IBV_WR_RDMA_READ,           kReliableBits,          Kind::kRead,        IBV_WC_RDMA_READ,    IBV_QP_EX_WITH_RDMA_READ,             false, false, false, true};
    t[IBV_WR_ATOMIC_CMP_AND_SWP] =  {"ATOMIC_CMP_AND_SWP",  IBV_WR_ATOMIC_CMP_AND_SWP,  kReliableBits,          Kind::kAtomic,      IBV_WC_COMP_SWAP,    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,    false, false, false, true};
    t[IBV_WR_ATOMIC_FETCH_AND_ADD] = {"ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD, kReliableBits,       Kind::kAtomic,      IBV_WC_FETCH_ADD,    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,  false, false, false, true};
    t[IBV_WR_LOCAL_INV] =           {"LOCAL_INV",           IBV_WR_LOCAL_INV,           kConnectedBits,         Kind::kLocal,       IBV_WC_LOCAL_INV,    IBV_QP_EX_WITH_LOCAL_INV,             false, false, false, false};
    t[IBV_WR_BIND_MW] =             {"BIND_MW",             IBV_WR_BIND_MW,             kConnectedBits,         Kind::kLocal,       IBV_WC_BIND_MW,      IBV_QP_EX_WITH_BIND_MW,               false, false, false, false};
    // UC has no wire opcode for send with invalidate.
    t[IBV_WR_SEND_WITH_INV] =       {"SEND_WITH_INV",       IBV_WR_SEND_WITH_INV,       kReliableBits,          Kind::kSend,        IBV_WC_SEND,         IBV_QP_EX_WITH_SEND_WITH_INV,         false, true,  true,  false};
    // Its 8 bytes travel inline; like rxe, it takes no max_rd_atomic slot.
    // Before v44 ibv_qp_ex has no wr_atomic_write: no send_ops flag then.
    t[kWrAtomicWrite] =             {"ATOMIC_WRITE",        kWrAtomicWrite,             kReliableBits,          Kind::kAtomicWrite, kWcAtomicWrite,      UROCE_QP_EX_WITH_ATOMIC_WRITE,        false, false, false, false};
    // clang-format on
    return t;
}();

// The row of `opcode`, or nullptr for a value no row describes (read as a
// number: a C caller may store anything in the enum).
constexpr const OpcodeInfo* opcode_info(uint32_t opcode) {
    return opcode < kOpcodes.size() && kOpcodes[opcode].name ? &kOpcodes[opcode] : nullptr;
}

// Whether a QP of `type` may post `opcode`.
constexpr bool allowed(ibv_qp_type type, uint32_t opcode) {
    const OpcodeInfo* info = opcode_info(opcode);
    return info && (info->qp_types & qp_type_bit(type));
}

// The opcodes a QP of `type` may post, as bits 1 << ibv_wr_opcode.
constexpr uint32_t allowed_mask(ibv_qp_type type) {
    uint32_t mask = 0;
    for (const OpcodeInfo& info : kOpcodes) {
        if (info.name && (info.qp_types & qp_type_bit(type))) {
            mask |= 1u << info.opcode;
        }
    }
    return mask;
}

// The opcode an IBV_QP_EX_WITH_* bit stands for, or nullptr.
constexpr const OpcodeInfo* opcode_of_send_ops_flag(uint64_t flag) {
    for (const OpcodeInfo& info : kOpcodes) {
        if (info.name && info.send_ops_flag && info.send_ops_flag == flag) {
            return &info;
        }
    }
    return nullptr;
}

// Reads and atomics answer with data the gather list receives.
constexpr bool returns_data(Kind kind) {
    return kind == Kind::kRead || kind == Kind::kAtomic;
}

// Atomics move exactly 8 bytes to an 8-byte aligned remote address.
constexpr bool eight_bytes(Kind kind) {
    return kind == Kind::kAtomic || kind == Kind::kAtomicWrite;
}

}  // namespace uroce::wr
