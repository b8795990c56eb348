// The work-request opcode table against the rules of ibv_post_send(3) and
// the IBA's transport services, which every user of the table relies on.
#include "protocol/work_requests.h"

#include <gtest/gtest.h>

#include <set>

namespace uroce::wr {
namespace {

constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC,       IBV_QPT_UC,       IBV_QPT_UD,
                                  IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_RAW_PACKET};

std::vector<const OpcodeInfo*> rows() {
    std::vector<const OpcodeInfo*> all;
    for (const OpcodeInfo& info : kOpcodes) {
        if (info.name) {
            all.push_back(&info);
        }
    }
    return all;
}

TEST(WorkRequestTable, EachRowSitsAtItsOpcode) {
    for (uint32_t value = 0; value < 64; ++value) {
        const OpcodeInfo* info = opcode_info(value);
        if (info) {
            EXPECT_EQ(info->opcode, value) << info->name;
            EXPECT_EQ(&kOpcodes[value], info);
        }
    }
    EXPECT_EQ(rows().size(), 11u);  // every opcode uroce offers
    EXPECT_EQ(opcode_info(IBV_WR_TSO), nullptr);
    EXPECT_EQ(opcode_info(IBV_WR_DRIVER1), nullptr);
    EXPECT_EQ(opcode_info(UINT32_MAX), nullptr);
}

TEST(WorkRequestTable, DatagramsOnlySendAndRawFramesCarryNoImmediate) {
    EXPECT_EQ(allowed_mask(IBV_QPT_UD), (1u << IBV_WR_SEND) | (1u << IBV_WR_SEND_WITH_IMM));
    EXPECT_EQ(allowed_mask(IBV_QPT_RAW_PACKET), 1u << IBV_WR_SEND);
    EXPECT_EQ(allowed_mask(IBV_QPT_XRC_RECV), 0u);
    EXPECT_EQ(allowed_mask(static_cast<ibv_qp_type>(0x77)), 0u);
}

TEST(WorkRequestTable, OnlyReliableServicesReadInvalidateOrAtomically) {
    for (const OpcodeInfo* info : rows()) {
        const bool reliable_only = info->kind == Kind::kRead || info->kind == Kind::kAtomic ||
                                   info->kind == Kind::kAtomicWrite || info->invalidate;
        EXPECT_EQ(allowed(IBV_QPT_RC, info->opcode), true) << info->name;
        EXPECT_EQ(allowed(IBV_QPT_XRC_SEND, info->opcode), true) << info->name;
        EXPECT_EQ(allowed(IBV_QPT_UC, info->opcode), !reliable_only) << info->name;
    }
}

TEST(WorkRequestTable, MaskAndRowsAgreeForEveryType) {
    for (ibv_qp_type type : kTypes) {
        for (uint32_t value = 0; value < 32; ++value) {
            EXPECT_EQ(allowed(type, value), ((allowed_mask(type) >> value) & 1) != 0)
                << "type " << type << " opcode " << value;
        }
    }
}

TEST(WorkRequestTable, ReadsAndAtomicsHoldAnRdAtomicSlotAndReturnData) {
    for (const OpcodeInfo* info : rows()) {
        // The atomic write is acknowledged like a write (rxe: no rd_atomic slot).
        EXPECT_EQ(info->uses_rd_atomic, returns_data(info->kind)) << info->name;
        // ibv_post_send(3): IBV_SEND_INLINE is for sends and RDMA writes.
        EXPECT_EQ(info->inline_allowed, info->kind == Kind::kSend || info->kind == Kind::kWrite)
            << info->name;
        EXPECT_FALSE(info->immediate && info->invalidate) << info->name;
    }
}

TEST(WorkRequestTable, CompletionOpcodesFollowTheOperation) {
    for (const OpcodeInfo* info : rows()) {
        switch (info->kind) {
            case Kind::kSend:
                EXPECT_EQ(info->wc_opcode, IBV_WC_SEND) << info->name;
                break;
            case Kind::kWrite:
                EXPECT_EQ(info->wc_opcode, IBV_WC_RDMA_WRITE) << info->name;
                break;
            case Kind::kRead:
                EXPECT_EQ(info->wc_opcode, IBV_WC_RDMA_READ) << info->name;
                break;
            default:
                // Each atomic and local operation completes as itself.
                EXPECT_NE(info->wc_opcode, IBV_WC_SEND) << info->name;
                break;
        }
    }
    std::set<ibv_wc_opcode> distinct;
    for (const OpcodeInfo* info : rows()) {
        if (info->kind != Kind::kSend && info->kind != Kind::kWrite) {
            EXPECT_TRUE(distinct.insert(info->wc_opcode).second) << info->name;
        }
    }
}

// libibverbs numbers IBV_QP_EX_WITH_<op> as 1 << IBV_WR_<op> for the first
// ten; the atomic write's bit comes after TSO and FLUSH, and before v44,
// whose ibv_qp_ex has wr_atomic_write, there is none (uroce_abi.h).
TEST(WorkRequestTable, SendOpsFlagsNameTheirOpcode) {
    for (const OpcodeInfo* info : rows()) {
        if (info->opcode == kWrAtomicWrite && !UROCE_HAVE_ATOMIC_WRITE) {
            EXPECT_EQ(info->send_ops_flag, 0u);
            continue;
        }
        EXPECT_EQ(opcode_of_send_ops_flag(info->send_ops_flag), info) << info->name;
        if (info->opcode <= IBV_WR_SEND_WITH_INV) {
            EXPECT_EQ(info->send_ops_flag, 1ull << info->opcode) << info->name;
        }
    }
    EXPECT_EQ(opcode_of_send_ops_flag(IBV_QP_EX_WITH_TSO), nullptr);
    EXPECT_EQ(opcode_of_send_ops_flag(0), nullptr);
}

}  // namespace
}  // namespace uroce::wr
