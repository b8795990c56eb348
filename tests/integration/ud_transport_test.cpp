// UD between the two devices: datagrams through address handles, with the
// GRH, source QP and immediate a receiver relies on, Q_Key checks, the MTU
// rule, and the ways a datagram is lost without harming the QP.
#include <arpa/inet.h>
#include <netinet/ip.h>
#include <poll.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr size_t kGrh = 40;
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMtu = 4096;  // the port's active MTU

RcOptions ud_options() {
    RcOptions options;
    options.qp_type = IBV_QPT_UD;
    options.qkey = kQkey;
    return options;
}

// An address handle on `pd` for `dgid` (a peer's GID, or a multicast group).
AhPtr address(ibv_pd* pd, const ibv_gid& dgid) {
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = 1;
    attr.grh.dgid = dgid;
    attr.grh.hop_limit = 64;
    AhPtr ah(ibv_create_ah(pd, &attr));
    EXPECT_TRUE(ah) << "ibv_create_ah: " << strerror(errno);
    return ah;
}

class UdTransportTest : public RcTest {
  protected:
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(connect_pair(ud_options())); }

    // Sends `length` bytes of `buffer` from a to b's QP with `qkey`.
    void send(Buffer& buffer, uint32_t length, ibv_ah* ah, uint32_t qkey, uint64_t wr_id = 1,
              ibv_wr_opcode opcode = IBV_WR_SEND, uint32_t imm = 0) {
        ibv_sge sge = buffer.sge(0, length);
        ibv_send_wr wr = make_wr(wr_id, opcode, std::span(&sge, 1));
        wr.imm_data = htonl(imm);
        wr.wr.ud = {ah, b_.qpn(), qkey};
        a_.post_send(wr);
    }

    void expect_sent(uint64_t wr_id) {
        const ibv_wc wc = a_.poll_one();
        EXPECT_EQ(wc.wr_id, wr_id);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    }
};

TEST_F(UdTransportTest, DatagramArrivesAfterAGrhWithSourceQpAndImmediate) {
    Buffer& out = a_.buffer(1000, IBV_ACCESS_LOCAL_WRITE, 7);
    Buffer& in = b_.buffer(kGrh + 1000 + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(9, in.sge(0, static_cast<uint32_t>(in.size()))));
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 1000, ah.get(), kQkey, 1, IBV_WR_SEND_WITH_IMM, 0xabcdef01));
    expect_sent(1);

    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, kGrh + 1000);
    EXPECT_EQ(wc.qp_num, b_.qpn());
    EXPECT_EQ(wc.src_qp, a_.qpn());
    EXPECT_EQ(wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM), unsigned{IBV_WC_GRH | IBV_WC_WITH_IMM});
    EXPECT_EQ(ntohl(wc.imm_data), 0xabcdef01u);
    EXPECT_TRUE(same_bytes(in.bytes().subspan(kGrh, 1000), out.bytes().first(1000)));
    // The GRH of RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header with
    // the sender's and the receiver's addresses. The completion says so in
    // its SL, as mlx5's does (2: IPv4), for readers such as UCX's ud_verbs.
    EXPECT_EQ(wc.sl, 2);
    EXPECT_TRUE(same_bytes(in.bytes().first(20), std::vector<uint8_t>(20, 0)));
    iphdr ip;
    memcpy(&ip, in.data() + 20, sizeof(ip));
    EXPECT_EQ(ip.version, 4);
    EXPECT_EQ(ip.ihl, 5);
    EXPECT_EQ(ip.protocol, IPPROTO_UDP);
    EXPECT_EQ(memcmp(&ip.saddr, &a_.gid().raw[12], 4), 0);
    EXPECT_EQ(memcmp(&ip.daddr, &b_.gid().raw[12], 4), 0);
    // Nothing after the message is touched.
    const std::vector<uint8_t> untouched = pattern(0, in.size());
    EXPECT_TRUE(
        same_bytes(in.bytes().subspan(kGrh + 1000), std::span(untouched).subspan(kGrh + 1000)));
}

// What ibv_ud_pingpong's server does: answer whoever sent, through an AH
// made from the completion and its GRH.
TEST_F(UdTransportTest, ReplyGoesThroughAnAddressMadeFromTheCompletion) {
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 3);
    Buffer& in = b_.buffer(kGrh + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    Buffer& back = a_.buffer(kGrh + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + 64)));
    ASSERT_NO_FATAL_FAILURE(a_.post_recv(2, back.sge(0, kGrh + 64)));
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 64, ah.get(), kQkey));
    expect_sent(1);
    ibv_wc wc = b_.poll_one();
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);

    ibv_ah_attr attr{};
    ASSERT_EQ(
        ibv_init_ah_from_wc(b_.context(), 1, &wc, reinterpret_cast<ibv_grh*>(in.data()), &attr), 0)
        << strerror(errno);
    EXPECT_EQ(attr.is_global, 1);
    EXPECT_EQ(memcmp(attr.grh.dgid.raw, a_.gid().raw, 16), 0);
    EXPECT_EQ(attr.grh.sgid_index, 0);
    AhPtr reply(ibv_create_ah_from_wc(b_.pd(), &wc, reinterpret_cast<ibv_grh*>(in.data()), 1));
    ASSERT_TRUE(reply) << strerror(errno);

    ibv_sge sge = in.sge(kGrh, 64);
    ibv_send_wr wr = make_wr(5, IBV_WR_SEND, std::span(&sge, 1));
    wr.wr.ud = {reply.get(), wc.src_qp, kQkey};
    b_.post_send(wr);
    // b's send completion and a's receive share no CQ: a's comes first here.
    const ibv_wc got = a_.poll_one();
    EXPECT_EQ(got.status, IBV_WC_SUCCESS) << ibv_wc_status_str(got.status);
    EXPECT_EQ(got.wr_id, 2u);
    EXPECT_EQ(got.src_qp, b_.qpn());
    EXPECT_TRUE(same_bytes(back.bytes().subspan(kGrh, 64), out.bytes()));
    EXPECT_EQ(b_.poll_one().wr_id, 5u);
}

TEST_F(UdTransportTest, WrongQkeyIsDroppedAndCounted) {
    Buffer& out = a_.buffer(32, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(2 * (kGrh + 32), IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + 32)));
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(2, in.sge(kGrh + 32, kGrh + 32)));
    const uint64_t before = counter("uroce1", "rcvd_qkey_err");
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 32, ah.get(), kQkey + 1, 1));
    ASSERT_NO_FATAL_FAILURE(send(out, 16, ah.get(), kQkey, 2));
    expect_sent(1);
    expect_sent(2);
    // The first receive takes the second datagram: the first never arrived.
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.byte_len, kGrh + 16);
    EXPECT_EQ(counter("uroce1", "rcvd_qkey_err"), before + 1);
    b_.expect_empty();
}

// A Q_Key with the high bit set in the work request means "the QP's own".
TEST_F(UdTransportTest, HighBitQkeyInTheRequestSendsTheQpsQkey) {
    Buffer& out = a_.buffer(32, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(kGrh + 32, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + 32)));
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 32, ah.get(), 0x80000000u | 0x1234, 1));
    expect_sent(1);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_TRUE(same_bytes(in.bytes().subspan(kGrh, 32), out.bytes()));
}

// IBA C10-93.1.1: a UD message longer than the MTU sends nothing and is
// not an error.
TEST_F(UdTransportTest, MessageLongerThanTheMtuCompletesWithoutBeingSent) {
    Buffer& out = a_.buffer(kMtu + 1, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(kGrh + kMtu + 1, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + kMtu + 1)));
    const uint64_t before = counter("uroce0", "ud_oversize");
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, kMtu + 1, ah.get(), kQkey, 1));
    ASSERT_NO_FATAL_FAILURE(send(out, kMtu, ah.get(), kQkey, 2));
    expect_sent(1);
    expect_sent(2);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.byte_len, kGrh + kMtu);
    EXPECT_EQ(counter("uroce0", "ud_oversize"), before + 1);
}

TEST_F(UdTransportTest, TooSmallReceiveFailsAloneAndTheQpGoesOn) {
    Buffer& out = a_.buffer(100, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(kGrh + 100, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + 99)));
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(2, in.sge(0, kGrh + 100)));
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 100, ah.get(), kQkey, 1));
    ASSERT_NO_FATAL_FAILURE(send(out, 100, ah.get(), kQkey, 2));
    expect_sent(1);
    expect_sent(2);
    const std::vector<ibv_wc> wcs = b_.poll(2);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(wcs[0].status);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[1].status);
    EXPECT_TRUE(same_bytes(in.bytes().subspan(kGrh, 100), out.bytes()));
    EXPECT_EQ(b_.state(), IBV_QPS_RTS);
}

// UD has no RNR NAK: with no receive posted the datagram is lost.
TEST_F(UdTransportTest, DatagramWithoutAReceiveIsLost) {
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(kGrh + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    const uint64_t before = counter("uroce1", "rcvd_msg_dropped");
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_NO_FATAL_FAILURE(send(out, 64, ah.get(), kQkey, 1));
    expect_sent(1);
    // The drop is counted once the datagram has arrived.
    EXPECT_EQ(counter_after("uroce1", "rcvd_msg_dropped", before), before + 1);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(1, in.sge(0, kGrh + 64)));
    ASSERT_NO_FATAL_FAILURE(send(out, 8, ah.get(), kQkey, 2));
    expect_sent(2);
    EXPECT_EQ(b_.poll_one().byte_len, kGrh + 8);
}

// What mckey's sender does: post unsignaled datagrams, then destroy their
// address handle and the QP at once. Here the daemon is stopped while they
// are posted and the destroys are asked for, so that it finds them all
// together: every datagram still arrives.
TEST_F(UdTransportTest, DatagramsPostedBeforeTheirAhAndQpAreDestroyedAreSent) {
    constexpr uint32_t kCount = 50;
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(kCount * (kGrh + 64), IBV_ACCESS_LOCAL_WRITE, 0);
    for (uint32_t i = 0; i < kCount; ++i) {
        ASSERT_NO_FATAL_FAILURE(b_.post_recv(i, in.sge(i * (kGrh + 64), kGrh + 64)));
    }
    AhPtr ah = address(a_.pd(), b_.gid());
    std::thread destroy;
    {
        DaemonPause pause;
        for (uint32_t i = 0; i < kCount; ++i) {
            ibv_sge sge = out.sge(0, 64);
            ibv_send_wr wr = make_wr(i, IBV_WR_SEND, std::span(&sge, 1), 0);
            wr.wr.ud = {ah.get(), b_.qpn(), kQkey};
            a_.post_send(wr);
        }
        destroy = std::thread([this, &ah] {
            ah.reset();
            a_.destroy_qp();
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the request waits
    }
    destroy.join();
    EXPECT_EQ(b_.poll(kCount).size(), kCount);
}

TEST_F(UdTransportTest, AddressHandleOfAnotherPdFailsTheWorkRequest) {
    Buffer& out = a_.buffer(8, IBV_ACCESS_LOCAL_WRITE, 1);
    PdPtr other(ibv_alloc_pd(a_.context()));
    ASSERT_TRUE(other);
    AhPtr ah = address(other.get(), b_.gid());
    ASSERT_TRUE(ah);
    ASSERT_NO_FATAL_FAILURE(send(out, 8, ah.get(), kQkey, 1));
    const ibv_wc wc = a_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(a_.state(), IBV_QPS_ERR);
}

// The emulated fabric delivers a datagram sent to a multicast group to every
// UD QP attached to it, on every device, the sender's own included.
TEST_F(UdTransportTest, MulticastReachesEveryAttachedQpUntilItDetaches) {
    ibv_gid group{};
    group.raw[10] = group.raw[11] = 0xff;
    const uint8_t group_ip[4] = {239, 1, 2, 3};
    memcpy(&group.raw[12], group_ip, 4);
    ASSERT_EQ(ibv_attach_mcast(a_.qp(), &group, 0), 0) << strerror(errno);
    ASSERT_EQ(ibv_attach_mcast(b_.qp(), &group, 0), 0) << strerror(errno);
    Buffer& out = a_.buffer(48, IBV_ACCESS_LOCAL_WRITE, 4);
    Buffer& in_a = a_.buffer(2 * (kGrh + 48), IBV_ACCESS_LOCAL_WRITE, 0);
    Buffer& in_b = b_.buffer(kGrh + 48, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(a_.post_recv(11, in_a.sge(0, kGrh + 48)));
    ASSERT_NO_FATAL_FAILURE(a_.post_recv(12, in_a.sge(kGrh + 48, kGrh + 48)));
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(21, in_b.sge(0, kGrh + 48)));
    AhPtr ah = address(a_.pd(), group);
    ASSERT_TRUE(ah);
    ibv_sge sge = out.sge(0, 48);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    wr.wr.ud = {ah.get(), 0xffffff, kQkey};
    a_.post_send(wr);

    const ibv_wc got_b = b_.poll_one();
    EXPECT_EQ(got_b.status, IBV_WC_SUCCESS) << ibv_wc_status_str(got_b.status);
    EXPECT_EQ(got_b.wr_id, 21u);
    EXPECT_EQ(got_b.src_qp, a_.qpn());
    EXPECT_TRUE(same_bytes(in_b.bytes().subspan(kGrh, 48), out.bytes()));
    iphdr ip;
    memcpy(&ip, in_b.data() + 20, sizeof(ip));
    EXPECT_EQ(memcmp(&ip.daddr, group_ip, 4), 0);  // the group's address
    std::vector<ibv_wc> got_a = a_.poll(2);        // the send and the copy
    ASSERT_EQ(got_a.size(), 2u);
    std::sort(got_a.begin(), got_a.end(),
              [](const ibv_wc& x, const ibv_wc& y) { return x.wr_id < y.wr_id; });
    EXPECT_EQ(got_a[0].wr_id, 1u);
    EXPECT_EQ(got_a[1].wr_id, 11u);
    EXPECT_EQ(got_a[1].status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(in_a.bytes().subspan(kGrh, 48), out.bytes()));

    ASSERT_EQ(ibv_detach_mcast(b_.qp(), &group, 0), 0) << strerror(errno);
    wr.wr_id = 2;
    a_.post_send(wr);
    got_a = a_.poll(2);
    ASSERT_EQ(got_a.size(), 2u);
    b_.expect_empty();
    // A QP still attached cannot be destroyed (EBUSY, as the kernel says).
    EXPECT_EQ(ibv_detach_mcast(a_.qp(), &group, 0), 0) << strerror(errno);
}

TEST_F(UdTransportTest, OnlySendsMayBePosted) {
    Buffer& out = a_.buffer(8, IBV_ACCESS_LOCAL_WRITE, 1);
    AhPtr ah = address(a_.pd(), b_.gid());
    for (ibv_wr_opcode opcode :
         {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
        ibv_sge sge = out.sge(0, 8);
        ibv_send_wr wr = make_wr(1, opcode, std::span(&sge, 1));
        wr.wr.ud = {ah.get(), b_.qpn(), kQkey};
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(a_.qp(), &wr, &bad), EINVAL) << opcode;
        EXPECT_EQ(bad, &wr);
    }
    a_.expect_empty();
}

class UdSrqTest : public RcTest {};

// The SRQ's limit fires once when its posted WQEs fall below it, and is
// then disarmed.
TEST_F(UdSrqTest, DatagramsThroughAnSrqFireItsLimitOnce) {
    RcOptions options = ud_options();
    options.srq_wr = 16;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Buffer& out = a_.buffer(16, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(8 * (kGrh + 16), IBV_ACCESS_LOCAL_WRITE, 0);
    for (uint32_t i = 0; i < 8; ++i) {
        ASSERT_NO_FATAL_FAILURE(b_.post_srq_recv(i, in.sge(i * (kGrh + 16), kGrh + 16)));
    }
    ibv_srq_attr limit{};
    limit.srq_limit = 6;
    ASSERT_EQ(ibv_modify_srq(b_.srq(), &limit, IBV_SRQ_LIMIT), 0) << strerror(errno);
    ibv_sge sge = out.sge(0, 16);
    AhPtr ah = address(a_.pd(), b_.gid());
    ASSERT_TRUE(ah);
    for (uint64_t i = 0; i < 2; ++i) {
        ibv_send_wr wr = make_wr(i, IBV_WR_SEND, std::span(&sge, 1));
        wr.wr.ud = {ah.get(), b_.qpn(), kQkey};
        a_.post_send(wr);
    }
    EXPECT_EQ(b_.poll(2).size(), 2u);
    // 6 left: not below the limit yet.
    pollfd async{b_.context()->async_fd, POLLIN, 0};
    EXPECT_EQ(::poll(&async, 1, 0), 0);
    ibv_send_wr wr = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    wr.wr.ud = {ah.get(), b_.qpn(), kQkey};
    a_.post_send(wr);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 2u);
    const ibv_async_event event = b_.async_event();
    EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(event.element.srq, b_.srq());
    ibv_srq_attr now{};
    ASSERT_EQ(ibv_query_srq(b_.srq(), &now), 0);
    EXPECT_EQ(now.srq_limit, 0u);
    a_.poll(3);
}

}  // namespace
}  // namespace uroce::test
