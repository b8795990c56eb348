// The data path through stock libibverbs against a real uroced: posting work
// requests (ibv_post_send(3), ibv_post_recv(3), ibv_post_srq_recv(3)) and
// polling completions (ibv_poll_cq(3), ibv_create_cq_ex(3)). Nothing here
// needs the daemon to process a queue; where a test looks inside one, it
// plays the daemon through this process's mapping of the shared ring.
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <climits>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_fixture.h"
#include "protocol/queues.h"

namespace uroce::test {
namespace {

constexpr ibv_qp_cap kCap{10, 10, 3, 3, 64};

// A shared ring as this process maps it.
struct Mapping {
    std::byte* start = nullptr;
    size_t size = 0;
    std::string perms;

    queues::RingHeader& header() const { return *reinterpret_cast<queues::RingHeader*>(start); }
    std::byte* slot(uint32_t index, uint32_t entry_size) const {
        return start + queues::kRingHeaderSize +
               size_t{index & (header().entries - 1)} * entry_size;
    }
};

// This process's mappings of the memfds the daemon called `name`.
std::vector<Mapping> mappings_of(const std::string& name) {
    std::vector<Mapping> found;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.find("/memfd:" + name + " ") == std::string::npos) {
            continue;
        }
        char* rest;
        const uintptr_t start = strtoull(line.c_str(), &rest, 16);
        const uintptr_t end = strtoull(rest + 1, &rest, 16);
        found.push_back(
            {reinterpret_cast<std::byte*>(start), end - start, std::string(rest + 1, 4)});
    }
    return found;
}

// The mapping of `name` that `create` adds; a test failure when there is not
// exactly one.
template <class Create>
Mapping new_mapping(const std::string& name, Create create) {
    const std::vector<Mapping> before = mappings_of(name);
    create();
    std::vector<Mapping> added;
    for (const Mapping& mapping : mappings_of(name)) {
        bool old = false;
        for (const Mapping& known : before) {
            old = old || known.start == mapping.start;
        }
        if (!old) {
            added.push_back(mapping);
        }
    }
    EXPECT_EQ(added.size(), 1u) << "new mappings of " << name;
    return added.empty() ? Mapping{} : added.front();
}

class DatapathTest : public VerbsTest {
  protected:
    void SetUp() override {
        VerbsTest::SetUp();
        cq_ = create_cq();
        ASSERT_TRUE(cq_);
        ASSERT_EQ(ibv_query_gid(context(), 1, 0, &gid_), 0);
    }

    QpPtr create_qp(ibv_qp_type type, ibv_qp_cap& cap, ibv_srq* srq = nullptr) const {
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq_.get();
        init.srq = srq;
        init.cap = cap;
        init.qp_type = type;
        QpPtr qp(ibv_create_qp(pd(), &init));
        EXPECT_TRUE(qp) << "ibv_create_qp: " << strerror(errno);
        cap = init.cap;
        return qp;
    }

    // Walks `qp` from RESET up to `state` (at most RTS); connected QPs are
    // connected to themselves.
    void move_to(ibv_qp* qp, ibv_qp_state state) const {
        const bool ud = qp->qp_type == IBV_QPT_UD;
        const bool rc = qp->qp_type == IBV_QPT_RC;
        for (ibv_qp_state next : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
            if (next > state) {
                return;
            }
            ibv_qp_attr attr{};
            attr.qp_state = next;
            int mask = IBV_QP_STATE;
            if (next == IBV_QPS_INIT) {
                attr.port_num = 1;
                mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
                attr.qkey = 0x11111111;
                attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                mask |= ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
            } else if (next == IBV_QPS_RTR && !ud) {
                attr.ah_attr = ah_attr();
                attr.path_mtu = IBV_MTU_1024;
                attr.dest_qp_num = qp->qp_num;
                attr.max_dest_rd_atomic = 1;
                attr.min_rnr_timer = 12;
                mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
            } else if (next == IBV_QPS_RTS) {
                attr.timeout = 14;
                attr.retry_cnt = 7;
                attr.rnr_retry = 7;
                attr.max_rd_atomic = 1;
                mask |= IBV_QP_SQ_PSN | (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                                  IBV_QP_MAX_QP_RD_ATOMIC
                                            : 0);
            }
            ASSERT_EQ(ibv_modify_qp(qp, &attr, mask), 0)
                << "to state " << next << ": " << strerror(errno);
        }
    }

    ibv_ah_attr ah_attr() const {
        ibv_ah_attr attr{};
        attr.is_global = 1;
        attr.port_num = 1;
        attr.grh.dgid = gid_;
        attr.grh.hop_limit = 64;
        return attr;
    }
    // An address handle back to this port.
    AhPtr create_ah() const {
        ibv_ah_attr attr = ah_attr();
        AhPtr ah(ibv_create_ah(pd(), &attr));
        EXPECT_TRUE(ah) << "ibv_create_ah: " << strerror(errno);
        return ah;
    }

    // A UD QP in RTS, its send ring as mapped, and an address handle to
    // send to: for tests that read back what post_send wrote.
    struct UdSendQueue {
        QpPtr qp;
        Mapping sq;
        AhPtr ah;
        uint32_t entry_size = 0;
    };
    void open_ud_send_queue(ibv_qp_cap& cap, UdSendQueue& out) const {
        out.sq = new_mapping("uroce0-sq", [&] { out.qp = create_qp(IBV_QPT_UD, cap); });
        ASSERT_TRUE(out.qp && out.sq.start);
        move_to(out.qp.get(), IBV_QPS_RTS);
        out.ah = create_ah();
        ASSERT_TRUE(out.ah);
        out.entry_size = out.sq.header().entry_size;
    }

    CqPtr cq_;
    ibv_gid gid_{};
};

ibv_send_wr send_wr(uint64_t wr_id, ibv_wr_opcode opcode = IBV_WR_SEND) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    return wr;
}

// `count` WRs made by `make`, linked in order.
template <class Wr, class Make>
std::vector<Wr> chain(size_t count, Make make) {
    std::vector<Wr> wrs;
    for (size_t i = 0; i < count; ++i) {
        wrs.push_back(make(i));
    }
    for (size_t i = 0; i + 1 < count; ++i) {
        wrs[i].next = &wrs[i + 1];
    }
    return wrs;
}

// Where in `wrs` a failed post stopped.
template <class Wr>
ptrdiff_t position(const std::vector<Wr>& wrs, const Wr* bad) {
    return bad - wrs.data();
}

TEST_F(DatapathTest, PostSendBeforeRtsIsInvalidAndNamesTheFirstWr) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    std::vector<ibv_send_wr> wrs = chain<ibv_send_wr>(2, [](size_t i) { return send_wr(i); });
    for (ibv_qp_state state : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR}) {
        SCOPED_TRACE(state);
        move_to(qp.get(), state);
        ASSERT_EQ(qp->state, state);
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), EINVAL);
        EXPECT_EQ(bad, wrs.data());
        if (state == IBV_QPS_RESET) {
            continue;
        }
        // Back to RESET for the next walk.
        ibv_qp_attr reset{};
        reset.qp_state = IBV_QPS_RESET;
        ASSERT_EQ(ibv_modify_qp(qp.get(), &reset, IBV_QP_STATE), 0);
    }
    move_to(qp.get(), IBV_QPS_RTS);
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), 0) << strerror(errno);
}

// An opcode the QP type does not have, or an atomic the WR gets wrong.
struct BadSend {
    const char* name;
    ibv_qp_type type;
    uint32_t opcode;  // may be no ibv_wr_opcode at all
    uint64_t remote_addr;
    uint32_t length;
};

class BadSendTest : public DatapathTest, public ::testing::WithParamInterface<BadSend> {};

// The WR before the bad one stays posted; the bad one is named.
TEST_P(BadSendTest, IsInvalid) {
    const BadSend& bad_send = GetParam();
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(bad_send.type, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    AhPtr ah = create_ah();
    ASSERT_TRUE(ah);
    std::vector<char> buffer(64);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()), bad_send.length, 0};
    std::vector<ibv_send_wr> wrs = chain<ibv_send_wr>(2, [&](size_t i) {
        ibv_send_wr wr = send_wr(i);
        if (i) {
            // As a C caller may: any value in the enum's storage.
            memcpy(&wr.opcode, &bad_send.opcode, sizeof(wr.opcode));
        }
        wr.wr.ud = {ah.get(), qp->qp_num, 0x11111111};
        if (i) {
            wr.wr.atomic = {bad_send.remote_addr, 0, 0, 0x1234};
            wr.sg_list = &sge;
            wr.num_sge = 1;
        }
        return wr;
    });
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), EINVAL);
    EXPECT_EQ(position(wrs, bad), 1);
}

INSTANTIATE_TEST_SUITE_P(
    Wrs, BadSendTest,
    ::testing::Values(BadSend{"UdRdmaWrite", IBV_QPT_UD, IBV_WR_RDMA_WRITE, 0, 8},
                      BadSend{"UdRdmaRead", IBV_QPT_UD, IBV_WR_RDMA_READ, 0, 8},
                      BadSend{"UdAtomic", IBV_QPT_UD, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8},
                      BadSend{"UcRdmaRead", IBV_QPT_UC, IBV_WR_RDMA_READ, 0, 8},
                      BadSend{"UcCompareSwap", IBV_QPT_UC, IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8},
                      BadSend{"UcSendWithInvalidate", IBV_QPT_UC, IBV_WR_SEND_WITH_INV, 0, 8},
                      BadSend{"RcBindMw", IBV_QPT_RC, IBV_WR_BIND_MW, 0, 0},
                      BadSend{"RcUnknownOpcode", IBV_QPT_RC, 99, 0, 8},
                      BadSend{"RcAtomicUnaligned", IBV_QPT_RC, IBV_WR_ATOMIC_CMP_AND_SWP, 4, 8},
                      BadSend{"RcAtomicShort", IBV_QPT_RC, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 4}),
    [](const auto& p) { return std::string(p.param.name); });

TEST_F(DatapathTest, MoreSgesThanMaxSendSgeIsInvalid) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    std::vector<ibv_sge> sges(cap.max_send_sge + 1);
    ibv_send_wr wr = send_wr(1);
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    wr.num_sge = static_cast<int>(cap.max_send_sge);
    EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), 0);
}

// A fuzzer's gather lists: NULL with elements, or a count no array has.
// Each post is refused with EINVAL at that work request, nothing read.
TEST_F(DatapathTest, MissingOrImpossibleListsAreInvalid) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    for (int num_sge : {1, INT_MAX, -1}) {
        ibv_send_wr send = send_wr(1);
        send.sg_list = nullptr;
        send.num_sge = num_sge;
        ibv_send_wr* bad_send = nullptr;
        EXPECT_EQ(ibv_post_send(qp.get(), &send, &bad_send), EINVAL) << num_sge;
        EXPECT_EQ(bad_send, &send);
        ibv_recv_wr recv{2, nullptr, nullptr, num_sge};
        ibv_recv_wr* bad_recv = nullptr;
        EXPECT_EQ(ibv_post_recv(qp.get(), &recv, &bad_recv), EINVAL) << num_sge;
        EXPECT_EQ(bad_recv, &recv);
    }
    ibv_send_wr empty = send_wr(3);
    empty.sg_list = nullptr;
    empty.num_sge = 0;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), &empty, &bad), 0);  // a zero-length SEND
}

TEST_F(DatapathTest, InlineBeyondMaxInlineDataIsInvalid) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    std::vector<char> data(cap.max_inline_data + 1);
    // Split over two SGEs: the limit is on the total.
    const uint32_t half = cap.max_inline_data / 2;
    ibv_sge sges[2] = {
        {reinterpret_cast<uintptr_t>(data.data()), half, 0},
        {reinterpret_cast<uintptr_t>(data.data() + half), cap.max_inline_data + 1 - half, 0}};
    ibv_send_wr wr = send_wr(1);
    wr.sg_list = sges;
    wr.num_sge = 2;
    wr.send_flags = IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    sges[1].length -= 1;
    EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), 0);
    // ibv_post_send(3): inline is for sends and RDMA writes only.
    wr.opcode = IBV_WR_RDMA_READ;
    EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), EINVAL);
}

// One list, so that the daemon sees none of it before the post returns: it
// fills the queue however fast the daemon works.
TEST_F(DatapathTest, FullSendQueueIsOutOfMemory) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_UD, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    AhPtr ah = create_ah();
    ASSERT_TRUE(ah);
    const uint32_t ring = std::bit_ceil(std::max(cap.max_send_wr, 1u));
    std::vector<ibv_send_wr> wrs = chain<ibv_send_wr>(ring + 1, [&](size_t i) {
        ibv_send_wr wr = send_wr(i);
        wr.wr.ud = {ah.get(), qp->qp_num, 0x11111111};
        return wr;
    });
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), ENOMEM);
    EXPECT_GE(position(wrs, bad), cap.max_send_wr);
    EXPECT_LE(position(wrs, bad), ring);
}

TEST_F(DatapathTest, PostRecvWithAnSrqIsInvalid) {
    ibv_srq_init_attr srq_init{};
    srq_init.attr = {16, 1, 0};
    SrqPtr srq(ibv_create_srq(pd(), &srq_init));
    ASSERT_TRUE(srq) << strerror(errno);
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap, srq.get());
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_INIT);
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp.get(), &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
}

TEST_F(DatapathTest, PostRecvChecksStateSgesAndRoom) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp.get(), &wr, &bad), EINVAL);  // RESET
    move_to(qp.get(), IBV_QPS_INIT);
    std::vector<ibv_sge> sges(cap.max_recv_sge + 1);
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    EXPECT_EQ(ibv_post_recv(qp.get(), &wr, &bad), EINVAL);

    const uint32_t ring = std::bit_ceil(std::max(cap.max_recv_wr, 1u));
    std::vector<ibv_recv_wr> wrs = chain<ibv_recv_wr>(ring + 1, [](size_t i) {
        return ibv_recv_wr{i, nullptr, nullptr, 0};
    });
    EXPECT_EQ(ibv_post_recv(qp.get(), wrs.data(), &bad), ENOMEM);
    EXPECT_GE(position(wrs, bad), cap.max_recv_wr);
    EXPECT_LE(position(wrs, bad), ring);
}

TEST_F(DatapathTest, PostSrqRecvChecksSgesAndRoom) {
    ibv_srq_init_attr srq_init{};
    srq_init.attr = {16, 2, 0};
    SrqPtr srq(ibv_create_srq(pd(), &srq_init));
    ASSERT_TRUE(srq) << strerror(errno);
    std::vector<ibv_sge> sges(srq_init.attr.max_sge + 1);
    ibv_recv_wr wr{1, nullptr, sges.data(), static_cast<int>(sges.size())};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_srq_recv(srq.get(), &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);

    const uint32_t max_wr = srq_init.attr.max_wr;
    std::vector<ibv_recv_wr> wrs = chain<ibv_recv_wr>(std::bit_ceil(max_wr) + 1, [](size_t i) {
        return ibv_recv_wr{i, nullptr, nullptr, 0};
    });
    EXPECT_EQ(ibv_post_srq_recv(srq.get(), wrs.data(), &bad), ENOMEM);
    EXPECT_EQ(position(wrs, bad), max_wr);
}

// ibv_modify_srq(3) grows the queue under the receives already posted.
TEST_F(DatapathTest, GrownSrqTakesReceivesBeyondItsOldSize) {
    ibv_srq_init_attr srq_init{};
    srq_init.attr = {4, 1, 0};
    SrqPtr srq(ibv_create_srq(pd(), &srq_init));
    ASSERT_TRUE(srq) << strerror(errno);
    const uint32_t old_max = srq_init.attr.max_wr;
    auto post = [&](size_t count) {
        std::vector<ibv_recv_wr> wrs = chain<ibv_recv_wr>(count, [](size_t i) {
            return ibv_recv_wr{i, nullptr, nullptr, 0};
        });
        ibv_recv_wr* bad = nullptr;
        const int error = ibv_post_srq_recv(srq.get(), wrs.data(), &bad);
        return error ? position(wrs, bad) : static_cast<ptrdiff_t>(count);
    };
    ASSERT_EQ(post(old_max + 1), old_max);  // full

    ibv_srq_attr grow{4 * old_max, 0, 0};
    ASSERT_EQ(ibv_modify_srq(srq.get(), &grow, IBV_SRQ_MAX_WR), 0) << strerror(errno);
    ibv_srq_attr now{};
    ASSERT_EQ(ibv_query_srq(srq.get(), &now), 0);
    ASSERT_GE(now.max_wr, 4 * old_max);
    EXPECT_EQ(post(now.max_wr), now.max_wr - old_max);  // full again at the new size
    EXPECT_EQ(post(1), 0);
}

TEST_F(DatapathTest, FreshCqPollsNothingAndArms) {
    ibv_wc wc[4];
    EXPECT_EQ(ibv_poll_cq(cq_.get(), 4, wc), 0);
    EXPECT_EQ(ibv_req_notify_cq(cq_.get(), 0), 0);
    EXPECT_EQ(ibv_req_notify_cq(cq_.get(), 1), 0);
    EXPECT_EQ(ibv_poll_cq(cq_.get(), 4, wc), 0);
}

TEST_F(DatapathTest, EmptyExtendedCqStartsWithNoEntry) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 16;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cq_ex = ibv_create_cq_ex(context(), &attr);
    ASSERT_NE(cq_ex, nullptr) << strerror(errno);
    CqPtr cq(ibv_cq_ex_to_cq(cq_ex));
    ibv_poll_cq_attr poll{};
    EXPECT_EQ(ibv_start_poll(cq_ex, &poll), ENOENT);
    // ENOENT released the CQ: these would block otherwise.
    EXPECT_EQ(ibv_start_poll(cq_ex, &poll), ENOENT);
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(cq.get(), 1, &wc), 0);
}

TEST_F(DatapathTest, ResizedCqStillPolls) {
    ibv_wc wc[4];
    for (int cqe : {1000, 8, 100}) {
        SCOPED_TRACE(cqe);
        ASSERT_EQ(ibv_resize_cq(cq_.get(), cqe), 0) << strerror(errno);
        EXPECT_EQ(ibv_poll_cq(cq_.get(), 4, wc), 0);
        EXPECT_EQ(ibv_req_notify_cq(cq_.get(), 0), 0);
    }
}

// ibv_resize_cq(3) and rxe: a size below the completions waiting is EINVAL,
// even where the rounded ring would hold them.
TEST_F(DatapathTest, ResizeBelowTheWaitingCompletionsIsInvalid) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_RC, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_INIT);
    std::vector<ibv_recv_wr> wrs = chain<ibv_recv_wr>(8, [](size_t i) {
        return ibv_recv_wr{i, nullptr, nullptr, 0};
    });
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp.get(), wrs.data(), &bad), 0);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp.get(), &attr, IBV_QP_STATE), 0);  // 8 flushed receives
    // The flush puts all eight at once: once the first shows, 7 wait.
    ibv_wc wc[16];
    int got = 0;
    for (int i = 0; i < 10000 && got == 0; ++i) {
        got = ibv_poll_cq(cq_.get(), 1, wc);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ASSERT_EQ(got, 1);
    for (int cqe : {4, 6}) {
        SCOPED_TRACE(cqe);  // 4 rounds up to a ring that would hold 7
        EXPECT_EQ(ibv_resize_cq(cq_.get(), cqe), EINVAL);
        EXPECT_GE(cq_->cqe, 16);
    }
    ASSERT_EQ(ibv_resize_cq(cq_.get(), 7), 0) << strerror(errno);
    ASSERT_EQ(ibv_poll_cq(cq_.get(), 16, wc + 1), 7);
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
        EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    }
}

// ibv_resize_cq comes after the sends posted before it: their completions
// count among those the new size must hold, as with a kernel, where
// post_send has run by then (rdma-core's test_resize_cq posts and resizes
// at once). UD sends to the QP itself complete as they leave.
TEST_F(DatapathTest, ResizeCountsTheCompletionsOfSendsPostedBeforeIt) {
    ibv_qp_cap cap = kCap;
    QpPtr qp = create_qp(IBV_QPT_UD, cap);
    ASSERT_TRUE(qp);
    move_to(qp.get(), IBV_QPS_RTS);
    AhPtr ah = create_ah();
    ASSERT_TRUE(ah);
    for (int round = 0; round < 200; ++round) {
        SCOPED_TRACE(round);
        std::vector<ibv_send_wr> wrs = chain<ibv_send_wr>(4, [&](size_t i) {
            ibv_send_wr wr = send_wr(i);
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud = {ah.get(), qp->qp_num, 0x11111111};
            return wr;
        });
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), 0);
        EXPECT_EQ(ibv_resize_cq(cq_.get(), 1), EINVAL);
        ibv_wc wc[8];
        int got = 0;
        for (int spins = 0; spins < 100000 && got < 4; ++spins) {
            got += ibv_poll_cq(cq_.get(), 8 - got, wc + got);
        }
        ASSERT_EQ(got, 4);
    }
}

// Two QPs on one CQ with their flushed receives in it: 2 of qps_[1]
// (wr_id 10, 11), then 3 of qps_[0], each batch waited for through the
// channel so that all five are in the CQ.
class FlushedCqTest : public DatapathTest {
  protected:
    void SetUp() override {
        DatapathTest::SetUp();
        channel_.reset(ibv_create_comp_channel(context()));
        ASSERT_TRUE(channel_) << strerror(errno);
        flushed_cq_.reset(ibv_create_cq(context(), 16, nullptr, channel_.get(), 0));
        ASSERT_TRUE(flushed_cq_) << strerror(errno);
        for (int i = 0; i < 2; ++i) {
            ibv_qp_init_attr init{};
            init.send_cq = init.recv_cq = flushed_cq_.get();
            init.cap = kCap;
            init.qp_type = IBV_QPT_RC;
            qps_.emplace_back(ibv_create_qp(pd(), &init));
            ASSERT_TRUE(qps_.back()) << strerror(errno);
            move_to(qps_.back().get(), IBV_QPS_INIT);
        }
        for (int which : {1, 0}) {
            ASSERT_NO_FATAL_FAILURE(flush_receives(which, which ? 2 : 3));
        }
    }

    void TearDown() override {
        qps_.clear();
        flushed_cq_.reset();
        channel_.reset();
        DatapathTest::TearDown();
    }

    void flush_receives(int which, int count) {
        std::vector<ibv_recv_wr> wrs = chain<ibv_recv_wr>(count, [which](size_t i) {
            return ibv_recv_wr{which * 10 + i, nullptr, nullptr, 0};
        });
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(qps_[which].get(), wrs.data(), &bad), 0);
        ASSERT_EQ(ibv_req_notify_cq(flushed_cq_.get(), 0), 0);
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ASSERT_EQ(ibv_modify_qp(qps_[which].get(), &attr, IBV_QP_STATE), 0);
        ibv_cq* event_cq = nullptr;
        void* event_context = nullptr;
        ASSERT_EQ(ibv_get_cq_event(channel_.get(), &event_cq, &event_context), 0);
        ibv_ack_cq_events(flushed_cq_.get(), 1);
    }

    // What is left once qps_[0] has gone: qps_[1]'s two, in order, and
    // nothing of qps_[0] behind them.
    void expect_only_the_others_completions(uint32_t other_qpn) {
        ibv_wc wc[8];
        ASSERT_EQ(ibv_poll_cq(flushed_cq_.get(), 8, wc), 2);
        for (int i = 0; i < 2; ++i) {
            EXPECT_EQ(wc[i].qp_num, other_qpn);
            EXPECT_EQ(wc[i].wr_id, 10u + i);
        }
        EXPECT_EQ(ibv_poll_cq(flushed_cq_.get(), 8, wc), 0);
    }

    ChannelPtr channel_;
    CqPtr flushed_cq_;
    std::vector<QpPtr> qps_;
};

// Resetting a QP takes its completions out of its CQ, as mlx5 does
// (rdma-core's tests reset failed QPs and poll only new traffic);
// another QP's completions stay, in order.
TEST_F(FlushedCqTest, ResetForgetsTheQpsCompletionsAndKeepsOthers) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qps_[0].get(), &attr, IBV_QP_STATE), 0);
    expect_only_the_others_completions(qps_[1]->qp_num);
}

// So does destroying it, as mlx4 and mlx5 do: libfabric 1.17's rxm closes
// a connection's QP, then polls the shared CQ and reposts each receive it
// finds to the QP it came from.
TEST_F(FlushedCqTest, DestroyForgetsTheQpsCompletionsAndKeepsOthers) {
    qps_[0].reset();
    expect_only_the_others_completions(qps_[1]->qp_num);
}

// The page where the daemon says it sleeps and that completions wait is
// the daemon's alone; the doorbell bits after it are the clients' to set.
TEST_F(DatapathTest, DoorbellPageIsReadOnlyAndItsBitsWritable) {
    const std::vector<Mapping> pages = mappings_of("uroce-doorbell");
    ASSERT_EQ(pages.size(), 2u);
    for (const Mapping& page : pages) {
        if (page.size == queues::kDoorbellPageBytes) {
            EXPECT_EQ(page.perms, "r--s");
        } else {
            EXPECT_GE(page.size, sizeof(queues::DoorbellBits));
            EXPECT_EQ(page.perms, "rw-s");
        }
    }
}

// What post_send writes into the send ring, read back as the daemon would.
TEST_F(DatapathTest, SendWqesCarryTheWr) {
    ibv_qp_cap cap = kCap;
    UdSendQueue ud;
    ASSERT_NO_FATAL_FAILURE(open_ud_send_queue(cap, ud));
    auto& [qp, sq, ah, entry_size] = ud;
    ASSERT_EQ(entry_size, queues::send_wqe_size(cap.max_send_sge, cap.max_inline_data));

    const char text[] = "inline payload";
    ibv_sge sges[2] = {{reinterpret_cast<uintptr_t>(text), 6, 0x77},
                       {reinterpret_cast<uintptr_t>(text + 6), sizeof(text) - 6, 0x88}};
    std::vector<ibv_send_wr> wrs = chain<ibv_send_wr>(2, [&](size_t i) {
        ibv_send_wr wr = send_wr(100 + i, i ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND);
        wr.sg_list = sges;
        wr.num_sge = 2;
        wr.send_flags = i ? IBV_SEND_SIGNALED | IBV_SEND_SOLICITED : IBV_SEND_INLINE;
        wr.imm_data = htonl(0xabcd);
        wr.wr.ud = {ah.get(), 0x123456, 0x22222222};
        return wr;
    });
    const uint32_t start = sq.header().producer.value.load();
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp.get(), wrs.data(), &bad), 0) << strerror(errno);
    ASSERT_EQ(sq.header().producer.value.load() - start, 2u);

    queues::SendWqe wqe;
    memcpy(&wqe, sq.slot(start, entry_size), sizeof(wqe));
    EXPECT_EQ(wqe.wr_id, 100u);
    EXPECT_EQ(wqe.opcode, IBV_WR_SEND);
    EXPECT_EQ(wqe.send_flags, unsigned{IBV_SEND_INLINE});
    EXPECT_EQ(wqe.num_sge, 0u);
    EXPECT_EQ(wqe.inline_length, sizeof(text));
    EXPECT_EQ(wqe.ah, ah->handle);
    EXPECT_EQ(wqe.remote_qpn, 0x123456u);
    EXPECT_EQ(wqe.remote_qkey, 0x22222222u);
    EXPECT_EQ(memcmp(sq.slot(start, entry_size) + queues::kSendWqeFixed, text, sizeof(text)), 0);

    memcpy(&wqe, sq.slot(start + 1, entry_size), sizeof(wqe));
    EXPECT_EQ(wqe.wr_id, 101u);
    EXPECT_EQ(wqe.opcode, IBV_WR_SEND_WITH_IMM);
    EXPECT_EQ(wqe.send_flags, unsigned{IBV_SEND_SIGNALED | IBV_SEND_SOLICITED});
    EXPECT_EQ(wqe.imm_data, htonl(0xabcd));
    EXPECT_EQ(wqe.num_sge, 2u);
    EXPECT_EQ(wqe.inline_length, 0u);
    ibv_sge written[2];
    memcpy(written, sq.slot(start + 1, entry_size) + queues::kSendWqeFixed, sizeof(written));
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(written[i].addr, sges[i].addr);
        EXPECT_EQ(written[i].length, sges[i].length);
        EXPECT_EQ(written[i].lkey, sges[i].lkey);
    }
}

// A small message from memory this process registered is copied into its
// WQE after the gather list (the daemon then need not read it); anything
// else leaves the gather list alone.
TEST_F(DatapathTest, SmallSendsFromRegisteredMemoryAreCopiedWhenPosted) {
    ibv_qp_cap cap = kCap;
    cap.max_send_wr = 32;  // room for every WR below, however slowly the daemon takes them
    UdSendQueue ud;
    ASSERT_NO_FATAL_FAILURE(open_ud_send_queue(cap, ud));
    auto& [qp, sq, ah, entry_size] = ud;

    std::vector<uint8_t> memory(8192);
    for (size_t i = 0; i < memory.size(); ++i) {
        memory[i] = static_cast<uint8_t>(i * 7 + 1);
    }
    const auto at = [&](size_t offset) { return reinterpret_cast<uintptr_t>(&memory[offset]); };
    MrPtr mr(ibv_reg_mr(pd(), memory.data(), 4096, IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(mr) << strerror(errno);
    // Addressed from an iova of the same page offset.
    const uint64_t iova = 0x7000000000ull + (at(4096) & 4095);
    MrPtr by_iova(ibv_reg_mr_iova(pd(), &memory[4096], 4096, iova, IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(by_iova) << strerror(errno);
    const uint32_t lkey = mr->lkey;

    struct Case {
        const char* name;
        std::vector<ibv_sge> sges;
        std::vector<uint8_t> copied;  // empty: nothing copied
    };
    const auto bytes = [&](size_t offset, size_t length) {
        return std::vector<uint8_t>(memory.begin() + offset, memory.begin() + offset + length);
    };
    std::vector<uint8_t> two_pieces = bytes(100, 32);
    const std::vector<uint8_t> second = bytes(3000, 32);
    two_pieces.insert(two_pieces.end(), second.begin(), second.end());
    const uint32_t most = queues::kPrefetchBytes;
    const std::vector<Case> cases = {
        {"64 bytes", {{at(10), 64, lkey}}, bytes(10, 64)},
        {"two pieces, in order", {{at(100), 32, lkey}, {at(3000), 32, lkey}}, two_pieces},
        {"the most copied", {{at(0), most, lkey}}, bytes(0, most)},
        {"one byte more", {{at(0), most + 1, lkey}}, {}},
        {"by iova", {{iova + 8, 64, by_iova->lkey}}, bytes(4096 + 8, 64)},
        {"past the region's end", {{at(4096 - 32), 64, lkey}}, {}},
        {"an lkey not registered here", {{at(10), 64, lkey ^ 0x00a5a500}}, {}},
        {"one good piece, one bad", {{at(10), 32, lkey}, {at(50), 32, 0x77}}, {}},
    };
    for (const Case& c : cases) {
        ibv_send_wr wr = send_wr(1, IBV_WR_SEND);
        std::vector<ibv_sge> sges = c.sges;
        wr.sg_list = sges.data();
        wr.num_sge = static_cast<int>(sges.size());
        wr.wr.ud = {ah.get(), 0x123456, 0x22222222};
        const uint32_t index = sq.header().producer.value.load();
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qp.get(), &wr, &bad), 0) << c.name << ": " << strerror(errno);
        queues::SendWqe wqe;
        const std::byte* slot = sq.slot(index, entry_size);
        memcpy(&wqe, slot, sizeof(wqe));
        EXPECT_EQ(wqe.num_sge, sges.size()) << c.name;
        EXPECT_EQ(wqe.inline_length, c.copied.size()) << c.name;
        const auto* data = reinterpret_cast<const uint8_t*>(slot + queues::kSendWqeFixed +
                                                            sges.size() * sizeof(ibv_sge));
        EXPECT_EQ(std::vector<uint8_t>(data, data + c.copied.size()), c.copied) << c.name;
    }

    // What one 64-byte SEND from `sge` has copied.
    const auto copied_from = [&](ibv_sge sge) {
        ibv_send_wr wr = send_wr(2, IBV_WR_SEND);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.ud = {ah.get(), 0x123456, 0x22222222};
        const uint32_t index = sq.header().producer.value.load();
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), 0) << strerror(errno);
        queues::SendWqe wqe;
        const std::byte* slot = sq.slot(index, entry_size);
        memcpy(&wqe, slot, sizeof(wqe));
        const auto* data =
            reinterpret_cast<const uint8_t*>(slot + queues::kSendWqeFixed + sizeof(ibv_sge));
        return std::vector<uint8_t>(data, data + wqe.inline_length);
    };
    // A region moved by ibv_rereg_mr is copied from where it is now.
    ASSERT_EQ(
        ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, &memory[4096], 4096, 0), 0)
        << strerror(errno);
    EXPECT_EQ(copied_from({at(4096 + 200), 64, mr->lkey}), bytes(4096 + 200, 64));
    EXPECT_TRUE(copied_from({at(200), 64, mr->lkey}).empty());
    // A deregistered region is copied no more.
    const uint32_t gone = by_iova->lkey;
    by_iova.reset();
    EXPECT_TRUE(copied_from({iova, 64, gone}).empty());
}

TEST_F(DatapathTest, RdmaAndAtomicWqesCarryTheirRemoteSide) {
    ibv_qp_cap cap = kCap;
    QpPtr qp;
    const Mapping sq = new_mapping("uroce0-sq", [&] { qp = create_qp(IBV_QPT_RC, cap); });
    ASSERT_TRUE(qp && sq.start);
    move_to(qp.get(), IBV_QPS_RTS);
    const uint32_t entry_size = sq.header().entry_size;
    uint64_t local = 0;
    ibv_sge sge{reinterpret_cast<uintptr_t>(&local), sizeof(local), 0x99};
    ibv_send_wr write = send_wr(1, IBV_WR_RDMA_WRITE);
    write.wr.rdma = {0x1000, 0x42};
    ibv_send_wr atomic = send_wr(2, IBV_WR_ATOMIC_CMP_AND_SWP);
    atomic.sg_list = &sge;
    atomic.num_sge = 1;
    atomic.wr.atomic = {0x2000, 5, 6, 0x43};
    write.next = &atomic;
    const uint32_t start = sq.header().producer.value.load();
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp.get(), &write, &bad), 0) << strerror(errno);

    queues::SendWqe wqe;
    memcpy(&wqe, sq.slot(start, entry_size), sizeof(wqe));
    EXPECT_EQ(wqe.remote_addr, 0x1000u);
    EXPECT_EQ(wqe.rkey, 0x42u);
    memcpy(&wqe, sq.slot(start + 1, entry_size), sizeof(wqe));
    EXPECT_EQ(wqe.remote_addr, 0x2000u);
    EXPECT_EQ(wqe.compare_add, 5u);
    EXPECT_EQ(wqe.swap, 6u);
    EXPECT_EQ(wqe.rkey, 0x43u);
}

// A completion written where the daemon would write one comes out of
// ibv_poll_cq and of the extended polling functions.
TEST_F(DatapathTest, CompletionsComeOutOfBothPollingInterfaces) {
    ibv_cq_ex* cq_ex = nullptr;
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 300;  // a size no other CQ of this test has
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    const Mapping ring =
        new_mapping("uroce0-cq", [&] { cq_ex = ibv_create_cq_ex(context(), &attr); });
    ASSERT_TRUE(cq_ex && ring.start) << strerror(errno);
    CqPtr cq(ibv_cq_ex_to_cq(cq_ex));
    auto complete = [&](uint64_t wr_id) {
        queues::Cqe cqe{};
        cqe.wc = {wr_id,  IBV_WC_SUCCESS,  IBV_WC_RECV, 0, 77, htonl(5), 0x1234,
                  0x5678, IBV_WC_WITH_IMM, 0,           9, 3,  1};
        const uint32_t produced = ring.header().producer.value.load();
        memcpy(ring.slot(produced, queues::kCqeSize), &cqe, sizeof(cqe));
        ring.header().producer.value.store(produced + 1, std::memory_order_release);
    };
    complete(1);
    complete(2);
    ibv_wc wc[4];
    ASSERT_EQ(ibv_poll_cq(cq.get(), 1, wc), 1);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[0].byte_len, 77u);
    EXPECT_EQ(wc[0].qp_num, 0x1234u);
    EXPECT_EQ(ring.header().consumer.value.load(), 1u);

    complete(3);
    ibv_poll_cq_attr poll{};
    ASSERT_EQ(ibv_start_poll(cq_ex, &poll), 0);
    EXPECT_EQ(cq_ex->wr_id, 2u);
    EXPECT_EQ(cq_ex->status, IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_wc_read_opcode(cq_ex), IBV_WC_RECV);
    EXPECT_EQ(ibv_wc_read_byte_len(cq_ex), 77u);
    EXPECT_EQ(ibv_wc_read_imm_data(cq_ex), htonl(5));
    EXPECT_EQ(ibv_wc_read_qp_num(cq_ex), 0x1234u);
    EXPECT_EQ(ibv_wc_read_src_qp(cq_ex), 0x5678u);
    EXPECT_EQ(ibv_wc_read_wc_flags(cq_ex), unsigned{IBV_WC_WITH_IMM});
    EXPECT_EQ(ibv_wc_read_slid(cq_ex), 9u);
    EXPECT_EQ(ibv_wc_read_sl(cq_ex), 3u);
    EXPECT_EQ(ibv_wc_read_dlid_path_bits(cq_ex), 1u);
    EXPECT_EQ(ibv_wc_read_vendor_err(cq_ex), 0u);
    ASSERT_EQ(ibv_next_poll(cq_ex), 0);
    EXPECT_EQ(cq_ex->wr_id, 3u);
    EXPECT_EQ(ibv_next_poll(cq_ex), ENOENT);
    ibv_end_poll(cq_ex);
    EXPECT_EQ(ring.header().consumer.value.load(), 3u);
    EXPECT_EQ(ibv_poll_cq(cq.get(), 4, wc), 0);

    // A producer index claiming more than the ring holds breaks the CQ.
    ring.header().producer.value.store(3 + ring.header().entries + 1);
    EXPECT_LT(ibv_poll_cq(cq.get(), 4, wc), 0);
}

TEST_F(DatapathTest, ArmingWritesTheCqState) {
    CqPtr cq;
    const Mapping ring = new_mapping("uroce0-cq", [&] { cq = create_cq(300); });
    ASSERT_TRUE(cq && ring.start);
    std::atomic<uint32_t>& arm =
        reinterpret_cast<queues::CqState*>(ring.slot(0, queues::kCqeSize) +
                                           size_t{ring.header().entries} * queues::kCqeSize)
            ->arm;
    EXPECT_EQ(arm.load(), queues::kCqDisarmed);
    ASSERT_EQ(ibv_req_notify_cq(cq.get(), 1), 0);
    EXPECT_EQ(arm.load(), queues::kCqArmedSolicited);
    ASSERT_EQ(ibv_req_notify_cq(cq.get(), 0), 0);
    EXPECT_EQ(arm.load(), queues::kCqArmedAny);
    ASSERT_EQ(ibv_req_notify_cq(cq.get(), 1), 0);
    EXPECT_EQ(arm.load(), queues::kCqArmedAny);  // not narrowed
    arm.store(queues::kCqDisarmed);              // as the daemon does when it signals
    ASSERT_EQ(ibv_req_notify_cq(cq.get(), 1), 0);
    EXPECT_EQ(arm.load(), queues::kCqArmedSolicited);
}

// Two RC QPs on two devices of the daemon, connected to each other.
class RcPairTest : public DatapathTest {
  protected:
    void SetUp() override {
        DatapathTest::SetUp();
        peer_context_ = open_device("uroce1");
        ASSERT_TRUE(peer_context_);
        peer_pd_.reset(ibv_alloc_pd(peer_context_.get()));
        channel_.reset(ibv_create_comp_channel(peer_context_.get()));
        ASSERT_TRUE(peer_pd_ && channel_) << strerror(errno);
        ibv_cq_init_attr_ex cq_attr{};
        cq_attr.cqe = 16;
        cq_attr.channel = channel_.get();
        cq_attr.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                           IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
        peer_cq_ex_ = ibv_create_cq_ex(peer_context_.get(), &cq_attr);
        ASSERT_TRUE(peer_cq_ex_) << strerror(errno);
        peer_cq_.reset(ibv_cq_ex_to_cq(peer_cq_ex_));
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = peer_cq_.get();
        init.cap = kCap;
        init.qp_type = IBV_QPT_RC;
        peer_.reset(ibv_create_qp(peer_pd_.get(), &init));
        ASSERT_TRUE(peer_) << strerror(errno);
        ibv_qp_cap cap = kCap;
        qp_ = create_qp(IBV_QPT_RC, cap);
        ASSERT_TRUE(qp_);
        ibv_gid peer_gid;
        ASSERT_EQ(ibv_query_gid(peer_context_.get(), 1, 0, &peer_gid), 0);
        connect(qp_.get(), peer_gid, peer_->qp_num);
        connect(peer_.get(), gid_, qp_->qp_num);
    }

    void connect(ibv_qp* qp, const ibv_gid& dgid, uint32_t dest_qpn) const {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        ASSERT_EQ(
            ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
        attr.qp_state = IBV_QPS_RTR;
        attr.ah_attr = ah_attr();
        attr.ah_attr.grh.dgid = dgid;
        attr.path_mtu = IBV_MTU_1024;
        attr.dest_qp_num = dest_qpn;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 1;
        ASSERT_EQ(
            ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
        attr.qp_state = IBV_QPS_RTS;
        attr.timeout = 14;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.max_rd_atomic = 1;
        ASSERT_EQ(ibv_modify_qp(qp, &attr,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                  0);
    }

    // Polls `cq` for one completion, for up to 5 s.
    static ibv_wc wait_for(ibv_cq* cq) {
        ibv_wc wc{};
        for (int i = 0; i < 5000; ++i) {
            const int n = ibv_poll_cq(cq, 1, &wc);
            if (n) {
                EXPECT_EQ(n, 1);
                return wc;
            }
            usleep(1000);
        }
        ADD_FAILURE() << "no completion in 5 s";
        wc.status = IBV_WC_GENERAL_ERR;
        return wc;
    }

    void post_send(ibv_send_wr& wr) const {
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qp_.get(), &wr, &bad), 0) << strerror(errno);
    }
    void post_peer_recv(uint64_t wr_id, ibv_sge* sge) const {
        ibv_recv_wr wr{wr_id, nullptr, sge, sge ? 1 : 0};
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(peer_.get(), &wr, &bad), 0) << strerror(errno);
    }
    // Posts `wr` signaled and waits for its completion.
    void execute(ibv_send_wr& wr) const {
        wr.send_flags |= IBV_SEND_SIGNALED;
        post_send(wr);
        const ibv_wc wc = wait_for(cq_.get());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, wr.wr_id);
    }

    ContextPtr peer_context_;
    PdPtr peer_pd_;
    ChannelPtr channel_;
    CqPtr peer_cq_;
    ibv_cq_ex* peer_cq_ex_ = nullptr;  // peer_cq_ as created
    QpPtr peer_;
    QpPtr qp_;
};

TEST_F(RcPairTest, SendReachesThePeer) {
    char out[] = "hello over the shared rings";
    char in[64]{};
    MrPtr out_mr(ibv_reg_mr(pd(), out, sizeof(out), 0));
    MrPtr in_mr(ibv_reg_mr(peer_pd_.get(), in, sizeof(in), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(out_mr && in_mr) << strerror(errno);
    ibv_sge in_sge{reinterpret_cast<uintptr_t>(in), sizeof(in), in_mr->lkey};
    post_peer_recv(7, &in_sge);
    ibv_sge out_sge{reinterpret_cast<uintptr_t>(out), sizeof(out), out_mr->lkey};
    ibv_send_wr send = send_wr(8, IBV_WR_SEND_WITH_IMM);
    send.sg_list = &out_sge;
    send.num_sge = 1;
    send.imm_data = htonl(0x1234);
    execute(send);
    const ibv_wc received = wait_for(peer_cq_.get());
    EXPECT_EQ(received.status, IBV_WC_SUCCESS) << ibv_wc_status_str(received.status);
    EXPECT_EQ(received.wr_id, 7u);
    EXPECT_EQ(received.opcode, IBV_WC_RECV);
    EXPECT_EQ(received.byte_len, sizeof(out));
    EXPECT_TRUE(received.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(received.imm_data, htonl(0x1234));
    EXPECT_EQ(received.qp_num, peer_->qp_num);
    EXPECT_STREQ(in, out);
}

// Completions carry when they were added, on the device clock (ticking in
// ns at hca_core_clock = 1 GHz, read by ibv_query_rt_values_ex) and on the
// wall clock: each lies between the clocks read before the send and after
// its completion was polled, and a later completion is stamped later.
TEST_F(RcPairTest, CompletionsAreStampedByTheDeviceClockAndTheWallClock) {
    ibv_device_attr_ex caps{};
    ASSERT_EQ(ibv_query_device_ex(peer_context_.get(), nullptr, &caps), 0);
    EXPECT_EQ(caps.completion_timestamp_mask, UINT64_MAX);
    EXPECT_EQ(caps.hca_core_clock, 1000000u);  // kHz
    const auto device_clock = [&] {
        ibv_values_ex values{};
        values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
        EXPECT_EQ(ibv_query_rt_values_ex(peer_context_.get(), &values), 0);
        EXPECT_EQ(values.comp_mask, unsigned{IBV_VALUES_MASK_RAW_CLOCK});
        return uint64_t(values.raw_clock.tv_sec) * 1000000000u + uint64_t(values.raw_clock.tv_nsec);
    };
    const auto wall_clock = [] {
        timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        return uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
    };
    uint64_t previous = 0;
    for (uint64_t i = 0; i < 2; ++i) {
        post_peer_recv(i, nullptr);
        const uint64_t device_before = device_clock();
        const uint64_t wall_before = wall_clock();
        ibv_send_wr send = send_wr(i);
        execute(send);
        ibv_poll_cq_attr poll{};
        int ready = ENOENT;
        for (int tries = 0; tries < 5000 && ready == ENOENT; ++tries) {
            if ((ready = ibv_start_poll(peer_cq_ex_, &poll)) == ENOENT) {
                usleep(1000);
            }
        }
        ASSERT_EQ(ready, 0);
        const uint64_t stamp = ibv_wc_read_completion_ts(peer_cq_ex_);
        const uint64_t wall = ibv_wc_read_completion_wallclock_ns(peer_cq_ex_);
        EXPECT_EQ(peer_cq_ex_->wr_id, i);
        ibv_end_poll(peer_cq_ex_);
        EXPECT_GE(stamp, device_before);
        EXPECT_LE(stamp, device_clock());
        EXPECT_GE(wall, wall_before);
        EXPECT_LE(wall, wall_clock());
        EXPECT_GT(stamp, previous);
        previous = stamp;
    }
}

TEST_F(DatapathTest, RtValuesRefuseUnknownMaskBits) {
    ibv_values_ex values{};
    values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK << 1;
    EXPECT_EQ(ibv_query_rt_values_ex(context(), &values), EINVAL);
}

// More sends than any of the rings holds, each waited for: the indexes go
// round, and the daemon, asleep by the time of each post, is woken by the
// doorbell.
TEST_F(RcPairTest, ManyInlineSendsGoRoundTheRings) {
    uint64_t in = 0;
    MrPtr in_mr(ibv_reg_mr(peer_pd_.get(), &in, sizeof(in), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(in_mr) << strerror(errno);
    ibv_sge in_sge{reinterpret_cast<uintptr_t>(&in), sizeof(in), in_mr->lkey};
    for (uint64_t i = 0; i < 100; ++i) {
        post_peer_recv(i, &in_sge);
        uint64_t out = i * 3;  // inline: no MR, and free to change once posted
        ibv_sge out_sge{reinterpret_cast<uintptr_t>(&out), sizeof(out), 0};
        ibv_send_wr send = send_wr(i);
        send.sg_list = &out_sge;
        send.num_sge = 1;
        send.send_flags = IBV_SEND_INLINE;
        execute(send);
        out = 0;
        const ibv_wc received = wait_for(peer_cq_.get());
        ASSERT_EQ(received.status, IBV_WC_SUCCESS) << "send " << i;
        EXPECT_EQ(received.wr_id, i);
        EXPECT_EQ(in, i * 3);
    }
}

TEST_F(RcPairTest, RdmaWriteReadAndFetchAdd) {
    alignas(8) uint64_t remote[4] = {0, 0, 0, 100};
    uint64_t local[4] = {0x1111, 0x2222, 0x3333, 0};
    MrPtr remote_mr(ibv_reg_mr(peer_pd_.get(), remote, sizeof(remote),
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
    MrPtr local_mr(ibv_reg_mr(pd(), local, sizeof(local), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(remote_mr && local_mr) << strerror(errno);
    const uint64_t remote_addr = reinterpret_cast<uintptr_t>(remote);

    ibv_sge write_sge{reinterpret_cast<uintptr_t>(local), 3 * sizeof(uint64_t), local_mr->lkey};
    ibv_send_wr write = send_wr(1, IBV_WR_RDMA_WRITE);
    write.sg_list = &write_sge;
    write.num_sge = 1;
    write.wr.rdma = {remote_addr, remote_mr->rkey};
    execute(write);
    EXPECT_EQ(remote[0], 0x1111u);
    EXPECT_EQ(remote[2], 0x3333u);

    remote[1] = 0x4444;
    ibv_sge read_sge{reinterpret_cast<uintptr_t>(&local[1]), sizeof(uint64_t), local_mr->lkey};
    ibv_send_wr read = send_wr(2, IBV_WR_RDMA_READ);
    read.sg_list = &read_sge;
    read.num_sge = 1;
    read.wr.rdma = {remote_addr + sizeof(uint64_t), remote_mr->rkey};
    execute(read);
    EXPECT_EQ(local[1], 0x4444u);

    ibv_sge atomic_sge{reinterpret_cast<uintptr_t>(&local[3]), sizeof(uint64_t), local_mr->lkey};
    ibv_send_wr add = send_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD);
    add.sg_list = &atomic_sge;
    add.num_sge = 1;
    add.wr.atomic = {remote_addr + 3 * sizeof(uint64_t), 5, 0, remote_mr->rkey};
    execute(add);
    EXPECT_EQ(local[3], 100u);  // the value before
    EXPECT_EQ(remote[3], 105u);
}

// ibv_req_notify_cq(3) arms the CQ; the daemon's event arrives on the
// channel, and the completion comes out of the extended polling functions.
TEST_F(RcPairTest, ArmedCqSignalsItsChannel) {
    char in[16]{};
    MrPtr in_mr(ibv_reg_mr(peer_pd_.get(), in, sizeof(in), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(in_mr) << strerror(errno);
    ibv_sge in_sge{reinterpret_cast<uintptr_t>(in), sizeof(in), in_mr->lkey};
    post_peer_recv(21, &in_sge);
    ASSERT_EQ(ibv_req_notify_cq(peer_cq_.get(), 0), 0);
    char out[] = "event";
    ibv_sge out_sge{reinterpret_cast<uintptr_t>(out), sizeof(out), 0};
    ibv_send_wr send = send_wr(22, IBV_WR_SEND_WITH_IMM);
    send.sg_list = &out_sge;
    send.num_sge = 1;
    send.send_flags = IBV_SEND_INLINE;
    send.imm_data = htonl(99);
    execute(send);

    pollfd ready{channel_->fd, POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 5000), 1) << "no completion event in 5 s";
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel_.get(), &cq, &cq_context), 0);
    EXPECT_EQ(cq, peer_cq_.get());
    ibv_ack_cq_events(cq, 1);

    ibv_poll_cq_attr poll_attr{};
    ASSERT_EQ(ibv_start_poll(peer_cq_ex_, &poll_attr), 0);
    EXPECT_EQ(peer_cq_ex_->wr_id, 21u);
    EXPECT_EQ(peer_cq_ex_->status, IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_wc_read_opcode(peer_cq_ex_), IBV_WC_RECV);
    EXPECT_EQ(ibv_wc_read_byte_len(peer_cq_ex_), sizeof(out));
    EXPECT_EQ(ibv_wc_read_imm_data(peer_cq_ex_), htonl(99));
    EXPECT_EQ(ibv_wc_read_qp_num(peer_cq_ex_), peer_->qp_num);
    EXPECT_EQ(ibv_wc_read_src_qp(peer_cq_ex_), qp_->qp_num);
    EXPECT_TRUE(ibv_wc_read_wc_flags(peer_cq_ex_) & IBV_WC_WITH_IMM);
    EXPECT_EQ(ibv_next_poll(peer_cq_ex_), ENOENT);
    ibv_end_poll(peer_cq_ex_);
    EXPECT_STREQ(in, out);
}

}  // namespace
}  // namespace uroce::test
