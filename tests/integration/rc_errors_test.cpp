// Errors on the RC data path: the failing WR completes with the status the
// IBA and ibv_poll_cq(3) name, its QP moves to ERR and everything after it
// is flushed (IBV_WC_WR_FLUSH_ERR, signaled or not); a responder that NAKs
// reports an affiliated async event on its QP.
#include <algorithm>
#include <set>

#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr size_t kSize = 4096;

class RcErrorsTest : public RcTest {
  protected:
    // The receives `wr_ids` of b complete flushed, in order.
    void expect_receives_flushed(std::initializer_list<uint64_t> wr_ids) const {
        const std::vector<ibv_wc> wcs = b_.poll(wr_ids.size());
        ASSERT_EQ(wcs.size(), wr_ids.size());
        size_t i = 0;
        for (uint64_t wr_id : wr_ids) {
            EXPECT_EQ(wcs[i].wr_id, wr_id);
            EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wcs[i].status);
            EXPECT_EQ(wcs[i].qp_num, b_.qpn());
            ++i;
        }
        b_.expect_empty();
    }
    // b's QP reported `type` and is in ERR.
    void expect_responder_event(ibv_event_type type) const {
        const ibv_async_event event = b_.async_event();
        EXPECT_EQ(event.event_type, type) << ibv_event_type_str(event.event_type);
        EXPECT_EQ(event.element.qp, b_.qp());
        EXPECT_EQ(b_.state(), IBV_QPS_ERR);
    }
};

// What a remote access gets wrong.
enum class Fault { kBadRkey, kOutOfBounds, kNoPermission };

struct RemoteAccessCase {
    const char* name;
    ibv_wr_opcode opcode;
    Fault fault;
};

class RcRemoteAccessTest : public RcErrorsTest,
                           public ::testing::WithParamInterface<RemoteAccessCase> {};

TEST_P(RcRemoteAccessTest, FailsWithRemoteAccessError) {
    const RemoteAccessCase& c = GetParam();
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    const bool atomic =
        c.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || c.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    // Every access but the one the WR needs.
    const int needed = c.opcode == IBV_WR_RDMA_WRITE  ? IBV_ACCESS_REMOTE_WRITE
                       : c.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
                                                      : IBV_ACCESS_REMOTE_ATOMIC;
    Buffer& remote = b_.buffer(
        kSize, c.fault == Fault::kNoPermission ? kRemoteAccess & ~needed : kRemoteAccess, 1);
    Buffer& local = a_.buffer(kSize, kRemoteAccess, 2);
    const std::vector<uint8_t> remote_before = remote.copy();
    const std::vector<uint8_t> local_before = local.copy();
    const uint32_t length = atomic ? 8 : 256;
    ibv_sge sge = local.sge(0, length);
    ibv_send_wr wr = make_wr(1, c.opcode, std::span(&sge, 1));
    // Out of bounds: an atomic just past the end, other WRs across it.
    const uint64_t addr = c.fault != Fault::kOutOfBounds ? remote.addr(64)
                          : atomic                       ? remote.addr(kSize)
                                                         : remote.addr(kSize - length / 2);
    const uint32_t rkey = c.fault == Fault::kBadRkey ? remote.rkey() ^ 0x00a5a500 : remote.rkey();
    if (atomic) {
        wr.wr.atomic = {addr, 0, 1, rkey};
    } else {
        wr.wr.rdma = {addr, rkey};
    }
    b_.post_recv(10);
    b_.post_recv(11);
    post_with_followers(wr);
    expect_failed_then_flushed(1, IBV_WC_REM_ACCESS_ERR);
    expect_responder_event(IBV_EVENT_QP_ACCESS_ERR);
    expect_receives_flushed({10, 11});
    EXPECT_TRUE(same_bytes(remote.bytes(), remote_before)) << "remote";
    EXPECT_TRUE(same_bytes(local.bytes(), local_before)) << "local";
}

INSTANTIATE_TEST_SUITE_P(
    Errors, RcRemoteAccessTest,
    ::testing::Values(
        RemoteAccessCase{"WriteBadRkey", IBV_WR_RDMA_WRITE, Fault::kBadRkey},
        RemoteAccessCase{"WriteOutOfBounds", IBV_WR_RDMA_WRITE, Fault::kOutOfBounds},
        RemoteAccessCase{"WriteWithoutRemoteWrite", IBV_WR_RDMA_WRITE, Fault::kNoPermission},
        RemoteAccessCase{"ReadBadRkey", IBV_WR_RDMA_READ, Fault::kBadRkey},
        RemoteAccessCase{"ReadOutOfBounds", IBV_WR_RDMA_READ, Fault::kOutOfBounds},
        RemoteAccessCase{"ReadWithoutRemoteRead", IBV_WR_RDMA_READ, Fault::kNoPermission},
        RemoteAccessCase{"FetchAddBadRkey", IBV_WR_ATOMIC_FETCH_AND_ADD, Fault::kBadRkey},
        RemoteAccessCase{"FetchAddOutOfBounds", IBV_WR_ATOMIC_FETCH_AND_ADD, Fault::kOutOfBounds},
        RemoteAccessCase{"CompareSwapWithoutRemoteAtomic", IBV_WR_ATOMIC_CMP_AND_SWP,
                         Fault::kNoPermission}),
    [](const auto& test) { return test.param.name; });

// A SEND larger than the receive: the receive fails with a local length
// error, the sender with a remote invalid request; one packet or several.
class RcReceiveTooSmallTest : public RcErrorsTest,
                              public ::testing::WithParamInterface<uint32_t> {};

TEST_P(RcReceiveTooSmallTest, FailsBothSides) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    const uint32_t size = GetParam();
    const uint32_t room = size / 2;
    Buffer& source = a_.buffer(size, kRemoteAccess, 3);
    Buffer& target = b_.buffer(size, kRemoteAccess, 4);
    b_.post_recv(10, target.sge(0, room));
    b_.post_recv(11, target.sge(room, size - room));
    ibv_sge sge = source.sge(0, size);
    post_with_followers(make_wr(1, IBV_WR_SEND, std::span(&sge, 1)));
    expect_failed_then_flushed(1, IBV_WC_REM_INV_REQ_ERR);
    const std::vector<ibv_wc> received = b_.poll(2);
    ASSERT_EQ(received.size(), 2u);
    EXPECT_EQ(received[0].wr_id, 10u);
    EXPECT_EQ(received[0].status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(received[0].status);
    EXPECT_EQ(received[0].qp_num, b_.qpn());
    EXPECT_EQ(received[1].wr_id, 11u);
    EXPECT_EQ(received[1].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(received[1].status);
    expect_responder_event(IBV_EVENT_QP_REQ_ERR);
    // Nothing past the receive's room.
    const std::vector<uint8_t> before = pattern(4, size);
    EXPECT_TRUE(same_bytes(target.bytes().subspan(room), std::span(before).subspan(room)));
}

INSTANTIATE_TEST_SUITE_P(Errors, RcReceiveTooSmallTest, ::testing::Values(100, 5000),
                         [](const auto& test) { return "Send" + std::to_string(test.param); });

// A sender whose path MTU (4096) is larger than the receiver's (1024): its
// one packet of 3000 bytes is refused as rxe's check_length refuses it. The
// requester fails with a remote invalid request, a SEND's receive with the
// same status, the responder's QP goes to ERR, and the device counts it.
class RcPathMtuTest : public RcErrorsTest, public ::testing::WithParamInterface<ibv_wr_opcode> {};

TEST_P(RcPathMtuTest, PacketAboveTheReceiversPathMtuIsRefused) {
    RcOptions options;
    options.path_mtu = IBV_MTU_4096;
    options.b_path_mtu = IBV_MTU_1024;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    constexpr uint32_t kMessage = 3000;
    Buffer& source = a_.buffer(kSize, kRemoteAccess, 5);
    Buffer& target = b_.buffer(kSize, kRemoteAccess, 6);
    const bool send = GetParam() == IBV_WR_SEND;
    if (send) {
        b_.post_recv(30, target.sge(0, kSize));
        b_.post_recv(31, target.sge(0, kSize));
    }
    const uint64_t refused = counter("uroce1", "rcvd_length_err");
    ibv_sge sge = source.sge(0, kMessage);
    ibv_send_wr wr = make_wr(1, GetParam(), std::span(&sge, 1));
    wr.wr.rdma = {target.addr(), target.rkey()};
    post_with_followers(wr);
    expect_failed_then_flushed(1, IBV_WC_REM_INV_REQ_ERR);
    if (send) {
        const std::vector<ibv_wc> received = b_.poll(2);
        ASSERT_EQ(received.size(), 2u);
        EXPECT_EQ(received[0].wr_id, 30u);
        EXPECT_EQ(received[0].status, IBV_WC_REM_INV_REQ_ERR)
            << ibv_wc_status_str(received[0].status);
        EXPECT_EQ(received[1].wr_id, 31u);
        EXPECT_EQ(received[1].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(received[1].status);
    }
    expect_responder_event(IBV_EVENT_QP_REQ_ERR);
    EXPECT_EQ(counter("uroce1", "rcvd_length_err"), refused + 1);
    const std::vector<uint8_t> before = pattern(6, kSize);
    EXPECT_TRUE(same_bytes(target.bytes(), before)) << "nothing written";
}

INSTANTIATE_TEST_SUITE_P(Errors, RcPathMtuTest, ::testing::Values(IBV_WR_SEND, IBV_WR_RDMA_WRITE),
                         [](const auto& test) {
                             return test.param == IBV_WR_SEND ? "Send" : "Write";
                         });

// A receiver that does not poll its CQ of 8 entries (7 usable) while 16
// SENDs arrive: the completion that finds it full is lost, and it is not
// lost in silence. The CQ reports IBV_EVENT_CQ_ERR, the QP whose completion
// it was goes to ERR with IBV_EVENT_QP_FATAL (as rxe and mlx5), and the
// device counts it; what the CQ did take is there, in order.
TEST_F(RcErrorsTest, CompletionThatFindsItsCqFullMovesItsQpToErr) {
    RcOptions options;
    options.b_cqe = 7;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    constexpr int kSends = 16;
    Buffer& source = a_.buffer(kSize, kRemoteAccess, 8);
    Buffer& target = b_.buffer(kSize * kSends, kRemoteAccess, 9);
    for (int i = 0; i < kSends; ++i) {
        b_.post_recv(40 + i, target.sge(kSize * i, kSize));
    }
    const uint64_t lost = counter("uroce1", "completions_lost");
    for (int i = 0; i < kSends; ++i) {
        ibv_sge sge = source.sge(0, 64);
        ibv_send_wr wr = make_wr(60 + i, IBV_WR_SEND, std::span(&sge, 1), 0);
        a_.post_send(wr);
    }
    std::set<ibv_event_type> events;
    for (int i = 0; i < 2; ++i) {
        const ibv_async_event event = b_.async_event();
        events.insert(event.event_type);
        if (event.event_type == IBV_EVENT_QP_FATAL) {
            EXPECT_EQ(event.element.qp, b_.qp());
        } else {
            EXPECT_EQ(event.element.cq, b_.cq());
        }
    }
    EXPECT_EQ(events, (std::set<ibv_event_type>{IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL}));
    EXPECT_EQ(b_.state(), IBV_QPS_ERR);
    EXPECT_GT(counter_after("uroce1", "completions_lost", lost), lost);
    const std::vector<ibv_wc> taken = b_.poll(b_.cq()->cqe);
    ASSERT_EQ(taken.size(), static_cast<size_t>(b_.cq()->cqe));
    for (size_t i = 0; i < taken.size(); ++i) {
        EXPECT_EQ(taken[i].wr_id, 40 + i);
        EXPECT_EQ(taken[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(taken[i].status);
    }
}

// A local SGE the requester may not use: a local protection error on the
// requester alone; the responder sees nothing.
struct LocalCase {
    const char* name;
    ibv_wr_opcode opcode;
    bool bad_lkey;  // else an MR without LOCAL_WRITE for a READ's target
};

class RcLocalProtectionTest : public RcErrorsTest,
                              public ::testing::WithParamInterface<LocalCase> {};

TEST_P(RcLocalProtectionTest, FailsWithLocalProtectionError) {
    const LocalCase& c = GetParam();
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& local = a_.buffer(kSize, c.bad_lkey ? kRemoteAccess : 0, 5);
    Buffer& remote = b_.buffer(kSize, kRemoteAccess, 6);
    const std::vector<uint8_t> local_before = local.copy();
    const std::vector<uint8_t> remote_before = remote.copy();
    ibv_sge sge = local.sge(0, 512);
    if (c.bad_lkey) {
        sge.lkey ^= 0x00a5a500;
    }
    ibv_send_wr wr = make_wr(1, c.opcode, std::span(&sge, 1));
    wr.wr.rdma = {remote.addr(), remote.rkey()};
    b_.post_recv(10, remote.sge(0, kSize));
    post_with_followers(wr);
    expect_failed_then_flushed(1, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(b_.state(), IBV_QPS_RTS);
    b_.expect_empty();
    EXPECT_TRUE(same_bytes(local.bytes(), local_before)) << "local";
    EXPECT_TRUE(same_bytes(remote.bytes(), remote_before)) << "remote";
}

INSTANTIATE_TEST_SUITE_P(Errors, RcLocalProtectionTest,
                         ::testing::Values(LocalCase{"SendBadLkey", IBV_WR_SEND, true},
                                           LocalCase{"WriteBadLkey", IBV_WR_RDMA_WRITE, true},
                                           LocalCase{"ReadBadLkey", IBV_WR_RDMA_READ, true},
                                           LocalCase{"ReadIntoMrWithoutLocalWrite",
                                                     IBV_WR_RDMA_READ, false}),
                         [](const auto& test) { return test.param.name; });

// A small SEND is copied when posted (queues::kPrefetchBytes), from any
// memory this process registered; the daemon still checks its lkey against
// the QP's PD: memory of another PD fails as any bad lkey does.
TEST_F(RcErrorsTest, SmallSendFromAnotherPdsMemoryFailsLocally) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    PdPtr other(ibv_alloc_pd(a_.context()));
    ASSERT_TRUE(other) << strerror(errno);
    Buffer foreign(other.get(), kSize, kRemoteAccess, 5);
    Buffer& remote = b_.buffer(kSize, kRemoteAccess, 6);
    const std::vector<uint8_t> remote_before = remote.copy();
    b_.post_recv(10, remote.sge(0, kSize));
    ibv_sge sge = foreign.sge(0, 64);
    post_with_followers(make_wr(1, IBV_WR_SEND, std::span(&sge, 1)));
    expect_failed_then_flushed(1, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(b_.state(), IBV_QPS_RTS);
    b_.expect_empty();
    EXPECT_TRUE(same_bytes(remote.bytes(), remote_before));
}

// ibv_rereg_mr moving an MR: a small SEND carries the new memory's bytes,
// and the old range under the new lkey is refused.
TEST_F(RcErrorsTest, SmallSendAfterReregCarriesTheNewMemory) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& moved = a_.buffer(kSize, kRemoteAccess, 7);
    Buffer& spare = a_.buffer(kSize, kRemoteAccess, 8);  // its bytes are the new memory's
    std::vector<uint8_t> target(kSize);
    ASSERT_EQ(
        ibv_rereg_mr(moved.mr(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, spare.data(), kSize, 0),
        0)
        << strerror(errno);
    Buffer& received = b_.buffer(kSize, kRemoteAccess, 9);
    b_.post_recv(10, received.sge(0, 64));
    ibv_sge sge{spare.addr(128), 64, moved.mr()->lkey};
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(wr);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(b_.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(received.bytes().first(64), spare.bytes().subspan(128, 64)));

    b_.post_recv(11, received.sge(0, 64));
    sge = {moved.addr(128), 64, moved.mr()->lkey};
    post_with_followers(make_wr(2, IBV_WR_SEND, std::span(&sge, 1)));
    expect_failed_then_flushed(2, IBV_WC_LOC_PROT_ERR);
}

// Posting to a QP in ERR is allowed, and everything posted is flushed.
TEST_F(RcErrorsTest, PostingToQpInErrIsFlushed) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    ASSERT_NO_FATAL_FAILURE(a_.modify_state(IBV_QPS_ERR));
    post_with_followers(make_wr(1, IBV_WR_SEND, {}, IBV_SEND_SIGNALED));
    expect_failed_then_flushed(1, IBV_WC_WR_FLUSH_ERR);
    a_.post_recv(7);
    const ibv_wc wc = a_.poll_one();
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.qp_num, a_.qpn());
}

// ibv_modify_qp(3) to ERR flushes the receives already posted, in order.
TEST_F(RcErrorsTest, ModifyToErrFlushesPostedReceives) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& target = b_.buffer(kSize, kRemoteAccess, 7);
    for (uint64_t wr_id : {20, 21, 22}) {
        b_.post_recv(wr_id, target.sge(0, kSize));
    }
    ASSERT_NO_FATAL_FAILURE(b_.modify_state(IBV_QPS_ERR));
    expect_receives_flushed({20, 21, 22});
}

}  // namespace
}  // namespace uroce::test
