// Device memory (ibv_alloc_dm(3)): allocation against max_dm_size, copies in
// and out, zero-based MRs on it (ibv_reg_dm_mr), and those MRs as the local
// and the remote buffers of every RC operation between two devices.
#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr size_t kSize = 4096;
constexpr unsigned kDmAccess = IBV_ACCESS_ZERO_BASED | kRemoteAccess;

class DeviceMemoryTest : public RcTest {
  protected:
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(connect_pair()); }

    static DmPtr alloc(const RcSide& side, size_t length, uint32_t log_align = 0) {
        ibv_alloc_dm_attr attr{length, log_align, 0};
        return DmPtr(ibv_alloc_dm(side.context(), &attr));
    }

    static uint64_t max_dm_size(const RcSide& side) {
        ibv_device_attr_ex attr{};
        EXPECT_EQ(ibv_query_device_ex(side.context(), nullptr, &attr), 0);
        return attr.max_dm_size;
    }

    // Device memory on `side` holding pattern `seed`, with an MR over all of it.
    struct Memory {
        DmPtr dm;
        MrPtr mr;
    };
    static Memory memory(const RcSide& side, uint32_t seed) {
        Memory m{alloc(side, kSize), nullptr};
        EXPECT_TRUE(m.dm) << strerror(errno);
        if (!m.dm) {
            return m;
        }
        const std::vector<uint8_t> bytes = pattern(seed, kSize);
        EXPECT_EQ(ibv_memcpy_to_dm(m.dm.get(), 0, bytes.data(), kSize), 0);
        m.mr.reset(ibv_reg_dm_mr(side.pd(), m.dm.get(), 0, kSize, kDmAccess));
        EXPECT_TRUE(m.mr) << strerror(errno);
        return m;
    }

    static std::vector<uint8_t> read(ibv_dm* dm, size_t offset, size_t length) {
        std::vector<uint8_t> bytes(length);
        EXPECT_EQ(ibv_memcpy_from_dm(bytes.data(), dm, offset, length), 0);
        return bytes;
    }
};

TEST_F(DeviceMemoryTest, AllocationsShareTheDevicesMaxDmSize) {
    const uint64_t size = max_dm_size(a_);
    ASSERT_GE(size, kSize);
    DmPtr all = alloc(a_, size);
    ASSERT_TRUE(all) << strerror(errno);
    DmPtr more = alloc(a_, 4);
    EXPECT_FALSE(more);
    EXPECT_EQ(errno, ENOMEM);
    // Another context on the same device finds it full too; the other device does not.
    ContextPtr again = open_device(a_.device());
    ibv_alloc_dm_attr attr{4, 0, 0};
    DmPtr from_again(ibv_alloc_dm(again.get(), &attr));
    EXPECT_FALSE(from_again);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_TRUE(alloc(b_, 4)) << strerror(errno);
    all.reset();
    EXPECT_TRUE(alloc(a_, 4)) << strerror(errno);
}

TEST_F(DeviceMemoryTest, BadAllocationsFailWithEinval) {
    EXPECT_FALSE(alloc(a_, 0));
    EXPECT_EQ(errno, EINVAL);
    EXPECT_FALSE(alloc(a_, kSize, 20));
    EXPECT_EQ(errno, EINVAL);
    ibv_alloc_dm_attr attr{kSize, 0, IBV_DM_MASK_HANDLE << 1};
    EXPECT_EQ(ibv_alloc_dm(a_.context(), &attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_TRUE(alloc(a_, kSize, 12)) << strerror(errno);
}

TEST_F(DeviceMemoryTest, CopiesInAndOutKeepTheBytesAndStayInside) {
    DmPtr dm = alloc(a_, kSize);
    ASSERT_TRUE(dm);
    const std::vector<uint8_t> bytes = pattern(3, 1000);
    ASSERT_EQ(ibv_memcpy_to_dm(dm.get(), 100, bytes.data(), bytes.size()), 0);
    EXPECT_TRUE(same_bytes(read(dm.get(), 100, bytes.size()), bytes));
    // Past the end: refused whole, nothing written.
    const std::vector<uint8_t> other = pattern(4, 200);
    EXPECT_EQ(ibv_memcpy_to_dm(dm.get(), kSize - 100, other.data(), other.size()), EFAULT);
    std::vector<uint8_t> out(200, 0xee);
    EXPECT_EQ(ibv_memcpy_from_dm(out.data(), dm.get(), kSize - 100, out.size()), EFAULT);
    EXPECT_EQ(out, std::vector<uint8_t>(200, 0xee));
    EXPECT_TRUE(same_bytes(read(dm.get(), 100, bytes.size()), bytes));
}

// Device memory is reached in 32-bit words, as on mlx5 (rdma-core's
// test_dm_bad_access): an unaligned offset or length is EINVAL, nothing moves.
TEST_F(DeviceMemoryTest, UnalignedCopiesAreInvalidAndCopyNothing) {
    DmPtr dm = alloc(a_, kSize);
    ASSERT_TRUE(dm);
    const std::vector<uint8_t> bytes = pattern(5, 64);
    ASSERT_EQ(ibv_memcpy_to_dm(dm.get(), 0, bytes.data(), bytes.size()), 0);
    const std::vector<uint8_t> other = pattern(6, 64);
    for (auto [offset, length] : {std::pair<uint64_t, size_t>{3, 4}, {4, 3}, {1, 60}, {0, 63}}) {
        SCOPED_TRACE(offset);
        SCOPED_TRACE(length);
        EXPECT_EQ(ibv_memcpy_to_dm(dm.get(), offset, other.data(), length), EINVAL);
        std::vector<uint8_t> out(64, 0xee);
        EXPECT_EQ(ibv_memcpy_from_dm(out.data(), dm.get(), offset, length), EINVAL);
        EXPECT_EQ(out, std::vector<uint8_t>(64, 0xee));
    }
    EXPECT_TRUE(same_bytes(read(dm.get(), 0, bytes.size()), bytes));
    // Past the end is EFAULT, aligned or not.
    EXPECT_EQ(ibv_memcpy_to_dm(dm.get(), kSize, other.data(), 4), EFAULT);
    EXPECT_EQ(ibv_memcpy_to_dm(dm.get(), kSize - 2, other.data(), 3), EFAULT);
}

TEST_F(DeviceMemoryTest, RegDmMrRefusesWhatTheKernelRefuses) {
    DmPtr dm = alloc(a_, kSize);
    ASSERT_TRUE(dm);
    auto reg = [&](uint64_t offset, size_t length, unsigned access) {
        MrPtr mr(ibv_reg_dm_mr(a_.pd(), dm.get(), offset, length, access));
        return error_of(mr);
    };
    EXPECT_EQ(reg(0, kSize, kRemoteAccess), EINVAL);  // not zero-based
    EXPECT_EQ(reg(0, kSize + 1, kDmAccess), EINVAL);
    EXPECT_EQ(reg(kSize, 1, kDmAccess), EINVAL);
    EXPECT_EQ(reg(1, UINT64_MAX, kDmAccess), EINVAL);
    EXPECT_EQ(reg(0, kSize, kDmAccess | IBV_ACCESS_MW_BIND), EINVAL);
    EXPECT_EQ(reg(0, kSize, kDmAccess | IBV_ACCESS_ON_DEMAND), EINVAL);
    EXPECT_EQ(reg(0, kSize, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE), EINVAL);
    EXPECT_EQ(reg(kSize - 8, 8, kDmAccess), 0);
    // Empty MRs anywhere inside, as the kernel (rdma-core's test_create_dm_mr).
    EXPECT_EQ(reg(0, 0, kDmAccess), 0);
    EXPECT_EQ(reg(kSize, 0, kDmAccess), 0);
}

TEST_F(DeviceMemoryTest, MrKeepsTheMemoryAndIsNeverReregistered) {
    DmPtr dm = alloc(a_, kSize);
    ASSERT_TRUE(dm);
    MrPtr mr(ibv_reg_dm_mr(a_.pd(), dm.get(), 0, kSize, kDmAccess));
    ASSERT_TRUE(mr) << strerror(errno);
    EXPECT_EQ(mr->addr, nullptr);
    EXPECT_EQ(mr->length, kSize);
    EXPECT_EQ(ibv_free_dm(dm.get()), EBUSY);
    EXPECT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                           IBV_ACCESS_LOCAL_WRITE),
              IBV_REREG_MR_ERR_CMD);
    EXPECT_EQ(errno, EINVAL);
    mr.reset();
    EXPECT_EQ(ibv_free_dm(dm.release()), 0);
}

// a sends out of its device memory into b's, addressing both from 0.
TEST_F(DeviceMemoryTest, SendAndReceiveBuffersInDeviceMemory) {
    Memory src = memory(a_, 11);
    Memory dst = memory(b_, 12);
    ASSERT_TRUE(src.mr && dst.mr);
    b_.post_recv(1, ibv_sge{64, 2000, dst.mr->lkey});
    ibv_sge sge{100, 2000, src.mr->lkey};
    ibv_send_wr wr = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(wr);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 2000u);
    const std::vector<uint8_t> sent = pattern(11, kSize);
    EXPECT_TRUE(same_bytes(read(dst.dm.get(), 64, 2000), std::span(sent).subspan(100, 2000)));
    // Around the received bytes, b's memory is as it was.
    const std::vector<uint8_t> before = pattern(12, kSize);
    EXPECT_TRUE(same_bytes(read(dst.dm.get(), 0, 64), std::span(before).first(64)));
    EXPECT_TRUE(
        same_bytes(read(dst.dm.get(), 2064, kSize - 2064), std::span(before).subspan(2064)));
}

// WRITE and READ between device memories, by offset on both sides.
TEST_F(DeviceMemoryTest, RdmaWriteAndReadBetweenDeviceMemories) {
    Memory local = memory(a_, 21);
    Memory remote = memory(b_, 22);
    ASSERT_TRUE(local.mr && remote.mr);
    ibv_sge sge{0, 1024, local.mr->lkey};
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    write.wr.rdma = {512, remote.mr->rkey};
    a_.post_send(write);
    ASSERT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const std::vector<uint8_t> written = pattern(21, 1024);
    EXPECT_TRUE(same_bytes(read(remote.dm.get(), 512, 1024), written));

    sge = {2048, 1024, local.mr->lkey};
    ibv_send_wr rd = make_wr(2, IBV_WR_RDMA_READ, std::span(&sge, 1));
    rd.wr.rdma = {3072, remote.mr->rkey};
    a_.post_send(rd);
    ASSERT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const std::vector<uint8_t> remote_bytes = pattern(22, kSize);
    EXPECT_TRUE(
        same_bytes(read(local.dm.get(), 2048, 1024), std::span(remote_bytes).subspan(3072, 1024)));
}

TEST_F(DeviceMemoryTest, AtomicsOnDeviceMemory) {
    Memory local = memory(a_, 31);
    Memory remote = memory(b_, 32);
    ASSERT_TRUE(local.mr && remote.mr);
    const uint64_t start = 1000;
    ASSERT_EQ(ibv_memcpy_to_dm(remote.dm.get(), 8, &start, sizeof(start)), 0);
    ibv_sge sge{16, 8, local.mr->lkey};
    ibv_send_wr add = make_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, std::span(&sge, 1));
    add.wr.atomic = {8, 5, 0, remote.mr->rkey};
    a_.post_send(add);
    ASSERT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    uint64_t value = 0;
    ASSERT_EQ(ibv_memcpy_from_dm(&value, local.dm.get(), 16, sizeof(value)), 0);
    EXPECT_EQ(value, start);
    ASSERT_EQ(ibv_memcpy_from_dm(&value, remote.dm.get(), 8, sizeof(value)), 0);
    EXPECT_EQ(value, start + 5);

    ibv_send_wr swap = make_wr(2, IBV_WR_ATOMIC_CMP_AND_SWP, std::span(&sge, 1));
    swap.wr.atomic = {8, start + 5, 77, remote.mr->rkey};
    a_.post_send(swap);
    ASSERT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    ASSERT_EQ(ibv_memcpy_from_dm(&value, remote.dm.get(), 8, sizeof(value)), 0);
    EXPECT_EQ(value, 77u);
}

// The MR covers [0, length): an offset past it is a protection error on
// either side, and the device memory beyond the MR is untouched.
TEST_F(DeviceMemoryTest, AccessBeyondTheMrFails) {
    Memory local = memory(a_, 41);
    DmPtr dm = alloc(b_, kSize);
    ASSERT_TRUE(local.mr && dm);
    const std::vector<uint8_t> before = pattern(42, kSize);
    ASSERT_EQ(ibv_memcpy_to_dm(dm.get(), 0, before.data(), kSize), 0);
    MrPtr half(ibv_reg_dm_mr(b_.pd(), dm.get(), 0, kSize / 2, kDmAccess));
    ASSERT_TRUE(half) << strerror(errno);

    ibv_sge sge{0, 16, local.mr->lkey};
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    write.wr.rdma = {kSize / 2 - 8, half->rkey};
    post_with_followers(write);
    expect_failed_then_flushed(1, IBV_WC_REM_ACCESS_ERR);
    EXPECT_TRUE(same_bytes(read(dm.get(), 0, kSize), before));
}

TEST_F(DeviceMemoryTest, LocalSgeBeyondTheMrFails) {
    Memory local = memory(a_, 51);
    ASSERT_TRUE(local.mr);
    ibv_sge sge{kSize - 8, 16, local.mr->lkey};
    post_with_followers(make_wr(1, IBV_WR_SEND, std::span(&sge, 1)));
    expect_failed_then_flushed(1, IBV_WC_LOC_PROT_ERR);
}

}  // namespace
}  // namespace uroce::test
