// Memory windows between two devices (ibv_alloc_mw(3), ibv_bind_mw(3),
// ibv_post_send(3)): side b opens part of an MR of its own to side a through
// a window, and a reaches it by the window's rkey, or fails to once the
// window is rebound or invalidated. Type 1 windows are bound by
// ibv_bind_mw, type 2 by IBV_WR_BIND_MW and invalidated by IBV_WR_LOCAL_INV
// or a SEND with invalidate.
#include <arpa/inet.h>

#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr size_t kSize = 4096;
// Memory that only windows open: the MR has no rkey of its own.
constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr int kReadWrite = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class MemoryWindowTest : public RcTest {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(connect_pair());
        memory_ = &b_.buffer(kSize, kBindable, 7);
        local_ = &a_.buffer(kSize, IBV_ACCESS_LOCAL_WRITE, 8);
    }

    MwPtr alloc(ibv_mw_type type) const {
        MwPtr mw(ibv_alloc_mw(b_.pd(), type));
        EXPECT_TRUE(mw) << strerror(errno);
        return mw;
    }

    // ibv_bind_mw on b's QP, signaled; the status of its completion.
    ibv_wc_status bind_type1(ibv_mw* mw, ibv_mr* mr, size_t offset, size_t length,
                             int access = kReadWrite) const {
        ibv_mw_bind bind{};
        bind.wr_id = 50;
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info = {mr, mr ? memory_->addr(offset) : 0, length,
                          static_cast<unsigned>(access)};
        EXPECT_EQ(ibv_bind_mw(b_.qp(), mw, &bind), 0) << strerror(errno);
        return bound(50);
    }

    // IBV_WR_BIND_MW on b's QP giving the window `rkey`; its completion's status.
    ibv_wc_status bind_type2(ibv_mw* mw, uint32_t rkey, ibv_mr* mr, size_t offset, size_t length,
                             int access = kReadWrite) const {
        ibv_send_wr wr = make_wr(60, IBV_WR_BIND_MW, {});
        wr.bind_mw.mw = mw;
        wr.bind_mw.rkey = rkey;
        wr.bind_mw.bind_info = {mr, memory_->addr(offset), length, static_cast<unsigned>(access)};
        b_.post_send(wr);
        return bound(wr.wr_id);
    }

    ibv_wc_status bound(uint64_t wr_id) const {
        const ibv_wc wc = b_.poll_one();
        EXPECT_EQ(wc.wr_id, wr_id);
        if (wc.status == IBV_WC_SUCCESS) {
            EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
        }
        return wc.status;
    }

    // a's RDMA WRITE (or READ) of `length` bytes at `va` through `rkey`.
    ibv_wc_status access(ibv_wr_opcode opcode, uint32_t rkey, uint64_t va, uint32_t length) {
        ibv_sge sge = local_->sge(0, length);
        ibv_send_wr wr = make_wr(70, opcode, std::span(&sge, 1));
        wr.wr.rdma = {va, rkey};
        a_.post_send(wr);
        return a_.poll_one().status;
    }

    // A signaled IBV_WR_LOCAL_INV of `rkey` on b's QP; its completion's status.
    ibv_wc_status invalidate_locally(uint32_t rkey) const {
        ibv_send_wr wr = make_wr(80, IBV_WR_LOCAL_INV, {});
        wr.invalidate_rkey = rkey;
        b_.post_send(wr);
        const ibv_wc wc = b_.poll_one();
        EXPECT_EQ(wc.wr_id, 80u);
        if (wc.status == IBV_WC_SUCCESS) {
            EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
        }
        return wc.status;
    }

    // A bind that fails completes with IBV_WC_MW_BIND_ERR and fails b's QP.
    void expect_bind_error(ibv_wc_status status) const {
        EXPECT_EQ(status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(status);
        EXPECT_EQ(b_.state(), IBV_QPS_ERR);
    }

    Buffer* memory_ = nullptr;  // b's
    Buffer* local_ = nullptr;   // a's
};

TEST_F(MemoryWindowTest, Type1WindowOpensOnlyItsRange) {
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    const uint32_t allocated = mw->rkey;
    ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 1024, 512), IBV_WC_SUCCESS);
    EXPECT_NE(mw->rkey, allocated);
    EXPECT_EQ(mw->rkey >> 8, allocated >> 8);  // the same window, a new key

    std::vector<uint8_t> expected = memory_->copy();
    std::copy_n(local_->data(), 512, expected.begin() + 1024);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, mw->rkey, memory_->addr(1024), 512), IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(memory_->bytes(), expected));
    local_->fill(9);
    EXPECT_EQ(access(IBV_WR_RDMA_READ, mw->rkey, memory_->addr(1024), 512), IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(local_->bytes().first(512), std::span(expected).subspan(1024, 512)));
    // One byte past the window.
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, mw->rkey, memory_->addr(1025), 512), IBV_WC_REM_ACCESS_ERR);
    EXPECT_TRUE(same_bytes(memory_->bytes(), expected));
}

TEST_F(MemoryWindowTest, Type1RebindLeavesTheOldRkeyStale) {
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    const uint32_t old_rkey = mw->rkey;
    ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, mw->rkey, memory_->addr(), 64), IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, old_rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, ReadOnlyWindowRefusesWrites) {
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 0, kSize, IBV_ACCESS_REMOTE_READ),
              IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_READ, mw->rkey, memory_->addr(), 64), IBV_WC_SUCCESS);
    const std::vector<uint8_t> before = memory_->copy();
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, mw->rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
    EXPECT_TRUE(same_bytes(memory_->bytes(), before));
}

// Local flags in a bind are accepted, as the kernel's rxe accepts them
// (rdma-core's own tests bind with LOCAL_WRITE), beside the remote ones
// that open the window. Both window types.
TEST_F(MemoryWindowTest, LocalFlagsInABindAreAccepted) {
    for (ibv_mw_type type : {IBV_MW_TYPE_1, IBV_MW_TYPE_2}) {
        SCOPED_TRACE(type);
        MwPtr mw = alloc(type);
        uint32_t rkey = mw->rkey;
        const int flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | kReadWrite;
        if (type == IBV_MW_TYPE_1) {
            ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 0, kSize, flags), IBV_WC_SUCCESS);
            rkey = mw->rkey;
        } else {
            rkey = ibv_inc_rkey(rkey);
            ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 0, kSize, flags), IBV_WC_SUCCESS);
        }
        std::vector<uint8_t> expected = memory_->copy();
        std::copy_n(local_->data(), 64, expected.begin());
        EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, memory_->addr(), 64), IBV_WC_SUCCESS);
        EXPECT_TRUE(same_bytes(memory_->bytes(), expected));
        EXPECT_EQ(access(IBV_WR_RDMA_READ, rkey, memory_->addr(), 64), IBV_WC_SUCCESS);
    }
}

// A window bound with LOCAL_WRITE alone opens nothing remote (rdma-core's
// test_qp_ex_rc_bind_mw): the bind succeeds, a WRITE through it does not.
TEST_F(MemoryWindowTest, WindowWithOnlyLocalWriteRefusesRemoteWrites) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 0, kSize, IBV_ACCESS_LOCAL_WRITE),
              IBV_WC_SUCCESS);
    const std::vector<uint8_t> before = memory_->copy();
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
    EXPECT_TRUE(same_bytes(memory_->bytes(), before));
}

// A type 1 window bound to nothing (length 0) opens nothing, and its MR
// can be deregistered only once no window is bound to it (EINVAL before,
// as Soft-RoCE says).
TEST_F(MemoryWindowTest, BoundWindowKeepsItsMrUntilUnbound) {
    ibv_mr* mr = ibv_reg_mr(b_.pd(), memory_->data(), kSize, kBindable);
    ASSERT_TRUE(mr) << strerror(errno);
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(bind_type1(mw.get(), mr, 0, kSize), IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_dereg_mr(mr), EINVAL);
    ASSERT_EQ(bind_type1(mw.get(), nullptr, 0, 0), IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, mw->rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, Type2WindowLastsUntilLocallyInvalidated) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, memory_->addr(128), 256), IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(memory_->bytes().subspan(128, 256), local_->bytes().first(256)));
    ASSERT_EQ(invalidate_locally(rkey), IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, SendWithInvalidateRetiresTheWindow) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    Buffer& inbox = b_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 0);
    b_.post_recv(90, inbox.sge(0, 64));
    ibv_sge sge = local_->sge(0, 64);
    ibv_send_wr send = make_wr(91, IBV_WR_SEND_WITH_INV, std::span(&sge, 1));
    send.invalidate_rkey = rkey;
    a_.post_send(send);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.status, IBV_WC_SUCCESS) << ibv_wc_status_str(received.status);
    EXPECT_EQ(received.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(received.invalidated_rkey, rkey);
    EXPECT_TRUE(same_bytes(inbox.bytes(), local_->bytes().first(64)));
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, memory_->addr(), 64), IBV_WC_REM_ACCESS_ERR);
}

// Zero-based: the window's first byte is at address 0.
TEST_F(MemoryWindowTest, ZeroBasedType2WindowStartsAtZero) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 256, 256,
                         IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED),
              IBV_WC_SUCCESS);
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, 0, 256), IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(memory_->bytes().subspan(256, 256), local_->bytes().first(256)));
    EXPECT_EQ(access(IBV_WR_RDMA_WRITE, rkey, 1, 256), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, BindingToAnMrWithoutBindAccessFails) {
    Buffer& plain = b_.buffer(kSize, kRemoteAccess, 3);
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    expect_bind_error(bind_type1(mw.get(), plain.mr(), 0, kSize));
}

TEST_F(MemoryWindowTest, BindingBeyondTheMrFails) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    expect_bind_error(bind_type2(mw.get(), ibv_inc_rkey(mw->rkey), memory_->mr(), 1, kSize));
}

TEST_F(MemoryWindowTest, Type2BindOfNothingFails) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    expect_bind_error(bind_type2(mw.get(), ibv_inc_rkey(mw->rkey), memory_->mr(), 0, 0));
}

TEST_F(MemoryWindowTest, BoundType2WindowCannotBeBoundAgain) {
    MwPtr mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw.get(), rkey, memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    mw->rkey = rkey;
    expect_bind_error(bind_type2(mw.get(), ibv_inc_rkey(rkey), memory_->mr(), 0, kSize));
}

TEST_F(MemoryWindowTest, WritableWindowNeedsLocalWriteOnItsMr) {
    Buffer& read_only = b_.buffer(kSize, IBV_ACCESS_MW_BIND, 3);
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    expect_bind_error(bind_type1(mw.get(), read_only.mr(), 0, kSize));
}

TEST_F(MemoryWindowTest, LocalInvalidateOfAnMrKeyFails) {
    EXPECT_EQ(invalidate_locally(memory_->lkey()), IBV_WC_LOC_QP_OP_ERR);
    EXPECT_EQ(b_.state(), IBV_QPS_ERR);
}

TEST_F(MemoryWindowTest, LocalInvalidateOfAType1WindowFails) {
    MwPtr mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(bind_type1(mw.get(), memory_->mr(), 0, kSize), IBV_WC_SUCCESS);
    EXPECT_EQ(invalidate_locally(mw->rkey), IBV_WC_LOC_QP_OP_ERR);
    EXPECT_EQ(b_.state(), IBV_QPS_ERR);
}

// The receive completes in error and the sender hears "invalid request".
TEST_F(MemoryWindowTest, SendWithInvalidateOfAnMrKeyFailsBothSides) {
    Buffer& inbox = b_.buffer(64, kRemoteAccess, 0);
    b_.post_recv(92, inbox.sge(0, 64));
    ibv_sge sge = local_->sge(0, 64);
    ibv_send_wr send = make_wr(93, IBV_WR_SEND_WITH_INV, std::span(&sge, 1));
    send.invalidate_rkey = inbox.rkey();
    a_.post_send(send);
    const ibv_wc sent = a_.poll_one();
    EXPECT_EQ(sent.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(sent.status);
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.wr_id, 92u);
    EXPECT_EQ(received.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(received.status);
    EXPECT_EQ(b_.state(), IBV_QPS_ERR);
}

// What ibv_bind_mw(3) refuses outright (libibverbs itself, but for the
// zero-based type 1 window): nothing is posted and the window's rkey stays.
TEST_F(MemoryWindowTest, BindMwRefusesWhatTheManPageRefuses) {
    MwPtr type1 = alloc(IBV_MW_TYPE_1);
    MwPtr type2 = alloc(IBV_MW_TYPE_2);
    Buffer& other_pd = a_.buffer(kSize, kBindable, 4);
    struct Case {
        const char* what;
        ibv_mw* mw;
        ibv_mw_bind_info info;
        int error;
    } cases[] = {
        {"a type 2 window", type2.get(), {memory_->mr(), memory_->addr(), 64, kReadWrite}, EINVAL},
        {"zero-based",
         type1.get(),
         {memory_->mr(), memory_->addr(), 64, kReadWrite | IBV_ACCESS_ZERO_BASED},
         EINVAL},
        {"a range without an MR", type1.get(), {nullptr, memory_->addr(), 64, kReadWrite}, EINVAL},
        {"an MR of another PD",
         type1.get(),
         {other_pd.mr(), other_pd.addr(), 64, kReadWrite},
         EPERM},
    };
    for (const Case& c : cases) {
        const uint32_t rkey = c.mw->rkey;
        ibv_mw_bind bind{};
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info = c.info;
        EXPECT_EQ(ibv_bind_mw(b_.qp(), c.mw, &bind), c.error) << c.what;
        EXPECT_EQ(c.mw->rkey, rkey) << c.what;
    }
    b_.expect_empty();
}

}  // namespace
}  // namespace uroce::test
