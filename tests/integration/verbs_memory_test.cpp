// Protection domains, memory regions and windows, address handles and XRC
// domains.
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

constexpr size_t kBufferSize = 8192;

class MemoryTest : public VerbsTest {
  protected:
    MrPtr reg_mr(int access) {
        return MrPtr(ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), access));
    }
    std::vector<char> buffer_ = std::vector<char>(kBufferSize);
};

TEST_F(MemoryTest, PdLifecycle) {
    PdPtr pd(ibv_alloc_pd(context()));
    ASSERT_TRUE(pd) << strerror(errno);
    EXPECT_EQ(pd->context, context());
    EXPECT_NE(pd->handle, pd_->handle);
}

class MrAccessTest : public MemoryTest, public ::testing::WithParamInterface<int> {};

TEST_P(MrAccessTest, RegistersAndDeregisters) {
    MrPtr mr = reg_mr(GetParam());
    ASSERT_TRUE(mr) << strerror(errno);
    EXPECT_EQ(mr->context, context());
    EXPECT_EQ(mr->pd, pd());
    EXPECT_EQ(mr->addr, buffer_.data());
    EXPECT_EQ(mr->length, buffer_.size());
}

INSTANTIATE_TEST_SUITE_P(Access, MrAccessTest,
                         ::testing::Values(0, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
                                           IBV_ACCESS_MW_BIND,
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                               IBV_ACCESS_MW_BIND));

// ibv_reg_mr(3): remote write or atomic access needs local write.
class MrAccessRefusedTest : public MemoryTest, public ::testing::WithParamInterface<int> {};

TEST_P(MrAccessRefusedTest, WithoutLocalWriteIsInvalid) {
    EXPECT_EQ(error_of(reg_mr(GetParam())), EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Access, MrAccessRefusedTest,
                         ::testing::Values(IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
                                           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));

// The kernel (ib_check_mr_access) refuses on-demand paging with EOPNOTSUPP
// on a device that does not advertise it, and registers it where it does.
TEST_F(MemoryTest, OnDemandPagingAgreesWithOdpCaps) {
    MrPtr mr = reg_mr(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
    if (device_attr_.odp_caps.general_caps & IBV_ODP_SUPPORT) {
        EXPECT_TRUE(mr) << strerror(errno);
    } else {
        EXPECT_EQ(error_of(mr), EOPNOTSUPP) << "ODP registered, but odp_caps do not offer it";
    }
}

// The daemon reaches application memory only when an operation touches it,
// so every operation of every transport works on ODP memory, and one MR may
// cover the whole address space.
TEST_F(MemoryTest, OdpCapsClaimEveryOperationAndImplicitOdp) {
    const ibv_odp_caps& odp = device_attr_.odp_caps;
    EXPECT_EQ(odp.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
    constexpr uint32_t kSendRecv = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
    constexpr uint32_t kRdmaAtomic =
        IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
    EXPECT_EQ(odp.per_transport_caps.rc_odp_caps,
              kSendRecv | kRdmaAtomic | IBV_ODP_SUPPORT_SRQ_RECV);
    EXPECT_EQ(odp.per_transport_caps.uc_odp_caps, kSendRecv | IBV_ODP_SUPPORT_WRITE);
    EXPECT_EQ(odp.per_transport_caps.ud_odp_caps, kSendRecv | IBV_ODP_SUPPORT_SRQ_RECV);
    EXPECT_EQ(device_attr_.xrc_odp_caps,
              IBV_ODP_SUPPORT_SEND | kRdmaAtomic | IBV_ODP_SUPPORT_SRQ_RECV);
}

TEST_F(MemoryTest, TheWholeAddressSpaceRegistersOnlyOnDemand) {
    MrPtr implicit(
        ibv_reg_mr(pd(), nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
    ASSERT_TRUE(implicit) << strerror(errno);
    EXPECT_EQ(implicit->length, SIZE_MAX);
    EXPECT_EQ(error_of(MrPtr(ibv_reg_mr(pd(), nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE))), EINVAL);
}

// ibv_advise_mr on untouched anonymous memory registered on demand.
class AdviseMrTest : public MemoryTest {
  protected:
    static constexpr size_t kPages = 16;
    void SetUp() override {
        MemoryTest::SetUp();
        page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        region_ = mmap(nullptr, kPages * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        ASSERT_NE(region_, MAP_FAILED) << strerror(errno);
        mr_.reset(ibv_reg_mr(pd(), region_, kPages * page_,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
        ASSERT_TRUE(mr_) << strerror(errno);
    }
    void TearDown() override {
        mr_.reset();
        munmap(region_, kPages * page_);
        MemoryTest::TearDown();
    }
    size_t resident_pages() const {
        std::vector<unsigned char> pages(kPages);
        EXPECT_EQ(mincore(region_, kPages * page_, pages.data()), 0) << strerror(errno);
        size_t resident = 0;
        for (unsigned char page : pages) {
            resident += page & 1;
        }
        return resident;
    }
    int advise(ibv_advise_mr_advice advice, uint32_t flags, ibv_sge sge) {
        return ibv_advise_mr(pd(), advice, flags, &sge, 1);
    }
    ibv_sge whole() const {
        return {reinterpret_cast<uintptr_t>(region_), static_cast<uint32_t>(kPages * page_),
                mr_->lkey};
    }

    size_t page_ = 0;
    void* region_ = nullptr;
    MrPtr mr_;
};

TEST_F(AdviseMrTest, PrefetchFaultsThePagesIn) {
    ASSERT_EQ(resident_pages(), 0u);
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, whole()), 0);
    EXPECT_EQ(resident_pages(), 0u);  // NO_FAULT maps only what is present
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, whole()), 0);
    EXPECT_EQ(resident_pages(), kPages);
}

// ibv_advise_mr(3)'s errors: an unsupported advice, unknown flags, no
// range; an invalid lkey, a range outside the MR, or a write prefetch of a
// read-only MR is EFAULT. None of them touches the memory.
TEST_F(AdviseMrTest, RefusesWhatTheManPageRefuses) {
    const ibv_sge range = whole();
    EXPECT_EQ(advise(static_cast<ibv_advise_mr_advice>(7), 0, range), EOPNOTSUPP);
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 2, range), EINVAL);
    EXPECT_EQ(ibv_advise_mr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, nullptr, 0), EINVAL);
    ibv_sge bad_key = range;
    bad_key.lkey ^= 0x100;  // another key index
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, bad_key), EFAULT);
    ibv_sge past_the_end = range;
    past_the_end.addr += page_;
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, past_the_end), EFAULT);
    MrPtr read_only(ibv_reg_mr(pd(), region_, kPages * page_, IBV_ACCESS_ON_DEMAND));
    ASSERT_TRUE(read_only) << strerror(errno);
    ibv_sge read_only_range = range;
    read_only_range.lkey = read_only->lkey;
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, read_only_range), EFAULT);
    EXPECT_EQ(resident_pages(), 0u);
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, read_only_range), 0);
}

TEST_F(AdviseMrTest, AnUnmappedRangeOfAnImplicitMrIsAFault) {
    MrPtr implicit(
        ibv_reg_mr(pd(), nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
    ASSERT_TRUE(implicit) << strerror(errno);
    ibv_sge range = whole();
    range.lkey = implicit->lkey;
    ASSERT_EQ(munmap(static_cast<char*>(region_) + page_, page_), 0);  // a hole
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, range), EFAULT);
    range.length = static_cast<uint32_t>(page_);  // the first page alone is mapped
    EXPECT_EQ(advise(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, range), 0);
}

TEST_F(MemoryTest, DeallocPdWithLiveMrIsBusy) {
    PdPtr pd(ibv_alloc_pd(context()));
    ASSERT_TRUE(pd);
    MrPtr mr(ibv_reg_mr(pd.get(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(mr);
    EXPECT_EQ(ibv_dealloc_pd(pd.get()), EBUSY);
    mr.reset();
    EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0);
}

// Registered with remote access so that the rkey is meaningful too.
constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;

// ibv_rereg_mr keeps the keys (as mlx5 and the kernel's rxe): rdma-core's
// tests use the keys they read at registration after each rereg.
TEST_F(MemoryTest, ReregChangeTranslationMovesTheRegionAndKeepsItsKeys) {
    MrPtr mr = reg_mr(kRemoteAccess);
    ASSERT_TRUE(mr);
    const uint32_t lkey = mr->lkey, rkey = mr->rkey;
    std::vector<char> other(2 * kBufferSize);
    ASSERT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other.data(),
                           other.size(), 0),
              0)
        << strerror(errno);
    EXPECT_EQ(mr->addr, other.data());
    EXPECT_EQ(mr->length, other.size());
    EXPECT_EQ(mr->pd, pd());
    EXPECT_EQ(mr->lkey, lkey);
    EXPECT_EQ(mr->rkey, rkey);
}

TEST_F(MemoryTest, ReregChangePdReleasesTheOldPd) {
    PdPtr old_pd(ibv_alloc_pd(context()));
    PdPtr new_pd(ibv_alloc_pd(context()));
    ASSERT_TRUE(old_pd && new_pd);
    MrPtr mr(ibv_reg_mr(old_pd.get(), buffer_.data(), buffer_.size(), kRemoteAccess));
    ASSERT_TRUE(mr);
    const uint32_t lkey = mr->lkey, rkey = mr->rkey;
    ASSERT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_PD, new_pd.get(), nullptr, 0, 0), 0)
        << strerror(errno);
    EXPECT_EQ(mr->pd, new_pd.get());
    EXPECT_EQ(mr->addr, buffer_.data());
    EXPECT_EQ(mr->lkey, lkey);
    EXPECT_EQ(mr->rkey, rkey);
    EXPECT_EQ(ibv_dealloc_pd(new_pd.get()), EBUSY);
    EXPECT_EQ(ibv_dealloc_pd(old_pd.release()), 0);
}

TEST_F(MemoryTest, ReregChangeAccess) {
    MrPtr mr = reg_mr(kRemoteAccess);
    ASSERT_TRUE(mr);
    const uint32_t lkey = mr->lkey, rkey = mr->rkey;
    ASSERT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
              0)
        << strerror(errno);
    EXPECT_EQ(mr->lkey, lkey);
    EXPECT_EQ(mr->rkey, rkey);
    EXPECT_EQ(mr->addr, buffer_.data());
}

TEST_F(MemoryTest, ReregToRemoteWriteWithoutLocalWriteFails) {
    MrPtr mr = reg_mr(kRemoteAccess);
    ASSERT_TRUE(mr);
    EXPECT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                           IBV_ACCESS_REMOTE_WRITE),
              IBV_REREG_MR_ERR_CMD);
    EXPECT_EQ(errno, EINVAL);
}

class MwTest : public MemoryTest, public ::testing::WithParamInterface<ibv_mw_type> {};

TEST_P(MwTest, AllocatesUnboundWindow) {
    MwPtr mw(ibv_alloc_mw(pd(), GetParam()));
    ASSERT_TRUE(mw) << strerror(errno);
    EXPECT_EQ(mw->type, GetParam());
    EXPECT_EQ(mw->pd, pd());
    EXPECT_EQ(mw->context, context());
}

INSTANTIATE_TEST_SUITE_P(Types, MwTest, ::testing::Values(IBV_MW_TYPE_1, IBV_MW_TYPE_2));

TEST_F(MemoryTest, MwTypeThreeIsInvalid) {
    EXPECT_EQ(error_of(MwPtr(ibv_alloc_mw(pd(), static_cast<ibv_mw_type>(3)))), EINVAL);
}

class AhTest : public MemoryTest {
  protected:
    // A GRH to uroce1's GID, as RoCE needs.
    ibv_ah_attr ah_attr() const {
        ibv_ah_attr attr{};
        attr.is_global = 1;
        attr.port_num = 1;
        attr.grh.sgid_index = 0;
        attr.grh.hop_limit = 64;
        inet_pton(AF_INET6, "::ffff:127.0.0.2", attr.grh.dgid.raw);
        return attr;
    }
};

TEST_F(AhTest, GlobalAhLifecycle) {
    ibv_ah_attr attr = ah_attr();
    AhPtr ah(ibv_create_ah(pd(), &attr));
    ASSERT_TRUE(ah) << strerror(errno);
    EXPECT_EQ(ah->pd, pd());
    EXPECT_EQ(ah->context, context());
}

// ibv_create_ah(3): a port with IBV_QPF_GRH_REQUIRED (every RoCE port) needs
// is_global = 1.
TEST_F(AhTest, WithoutGrhIsInvalidOnRoce) {
    ibv_ah_attr attr = ah_attr();
    attr.is_global = 0;
    EXPECT_EQ(error_of(AhPtr(ibv_create_ah(pd(), &attr))), EINVAL);
}

TEST_F(AhTest, SgidIndexBeyondTheGidTableIsInvalid) {
    ibv_ah_attr attr = ah_attr();
    attr.grh.sgid_index = static_cast<uint8_t>(port_attr_.gid_tbl_len);
    EXPECT_EQ(error_of(AhPtr(ibv_create_ah(pd(), &attr))), EINVAL);
}

// A device on lo has GIDs 0 and 1; GID 2 is an empty entry: ENODATA, as
// the kernel's rdma_get_gid_attr.
TEST_F(AhTest, SgidIndexOfAnEmptyEntryHasNoData) {
    ibv_ah_attr attr = ah_attr();
    attr.grh.sgid_index = 2;
    EXPECT_EQ(error_of(AhPtr(ibv_create_ah(pd(), &attr))), ENODATA);
}

TEST_F(MemoryTest, DeallocPdWithLiveAhIsBusy) {
    PdPtr pd(ibv_alloc_pd(context()));
    ASSERT_TRUE(pd);
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = 1;
    AhPtr ah(ibv_create_ah(pd.get(), &attr));
    ASSERT_TRUE(ah) << strerror(errno);
    EXPECT_EQ(ibv_dealloc_pd(pd.get()), EBUSY);
    ah.reset();
    EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0);
}

class XrcdTest : public MemoryTest {
  protected:
    void SetUp() override {
        MemoryTest::SetUp();
        char path[] = "/tmp/uroce-it-xrcd.XXXXXX";
        fd_ = mkstemp(path);
        ASSERT_GE(fd_, 0) << strerror(errno);
        unlink(path);
    }
    void TearDown() override { close(fd_); }

    XrcdPtr open_xrcd(int fd, int oflags) const {
        ibv_xrcd_init_attr attr{};
        attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        attr.fd = fd;
        attr.oflags = oflags;
        return XrcdPtr(ibv_open_xrcd(context(), &attr));
    }
    int fd_ = -1;
};

TEST_F(XrcdTest, WithoutFileIsPrivate) {
    XrcdPtr xrcd = open_xrcd(-1, O_CREAT);
    ASSERT_TRUE(xrcd) << strerror(errno);
    EXPECT_EQ(xrcd->context, context());
}

TEST_F(XrcdTest, FileNamesOneSharedDomain) {
    XrcdPtr first = open_xrcd(fd_, O_CREAT);
    ASSERT_TRUE(first) << strerror(errno);
    // O_CREAT has no effect on an existing domain; O_EXCL refuses it.
    XrcdPtr second = open_xrcd(fd_, O_CREAT);
    EXPECT_TRUE(second) << strerror(errno);
    EXPECT_EQ(error_of(open_xrcd(fd_, O_CREAT | O_EXCL)), EINVAL);
    // Without O_CREAT, the existing domain is opened.
    EXPECT_TRUE(open_xrcd(fd_, 0)) << strerror(errno);
}

// ib_uverbs_open_xrcd(): no domain for the inode and no O_CREAT is EAGAIN.
TEST_F(XrcdTest, UnusedFileWithoutCreateFails) {
    EXPECT_EQ(error_of(open_xrcd(fd_, 0)), EAGAIN);
}

}  // namespace
}  // namespace uroce::test
