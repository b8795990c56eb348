// UC between the two devices: multi-packet SENDs and RDMA WRITEs (with
// immediate) arrive whole and unacknowledged; a lost message costs only
// itself.
#include <arpa/inet.h>

#include <thread>

#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr uint32_t kMtu = 1024;  // RcOptions' path MTU

RcOptions uc_options() {
    RcOptions options;
    options.qp_type = IBV_QPT_UC;
    options.qp_access = IBV_ACCESS_REMOTE_WRITE;
    return options;
}

class UcTransportTest : public RcTest {
  protected:
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(connect_pair(uc_options())); }
};

TEST_F(UcTransportTest, MultiPacketSendArrivesWholeAndNothingAnswers) {
    constexpr uint32_t kLength = 3 * kMtu + 100;
    Buffer& out = a_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE, 5);
    Buffer& in = b_.buffer(kLength + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(7, in.sge(0, static_cast<uint32_t>(in.size()))));
    const uint64_t answers = counter("uroce1", "sent_pkts");
    ibv_sge sge = out.sge(0, kLength);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND_WITH_IMM, std::span(&sge, 1));
    wr.imm_data = htonl(42);
    a_.post_send(wr);
    const ibv_wc sent = a_.poll_one();
    EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent.status);
    EXPECT_EQ(sent.opcode, IBV_WC_SEND);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, kLength);
    EXPECT_EQ(wc.wc_flags & IBV_WC_GRH, 0u);
    EXPECT_EQ(ntohl(wc.imm_data), 42u);
    EXPECT_TRUE(same_bytes(in.bytes().first(kLength), out.bytes()));
    const std::vector<uint8_t> untouched = pattern(0, in.size());
    EXPECT_TRUE(same_bytes(in.bytes().subspan(kLength), std::span(untouched).subspan(kLength)));
    EXPECT_EQ(counter("uroce1", "sent_pkts"), answers);  // UC has no ACKs
}

TEST_F(UcTransportTest, WriteWithImmediatePlacesDataAndConsumesAReceive) {
    constexpr uint32_t kLength = 2 * kMtu + 1;
    Buffer& out = a_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE, 9);
    Buffer& target = b_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(3));
    ibv_sge sge = out.sge(0, kLength);
    ibv_send_wr writes[2] = {make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1)),
                             make_wr(2, IBV_WR_RDMA_WRITE_WITH_IMM, std::span(&sge, 1))};
    for (ibv_send_wr& wr : writes) {
        wr.wr.rdma = {target.addr(), target.rkey()};
    }
    writes[1].imm_data = htonl(77);
    link(writes);
    a_.post_send(writes[0]);
    EXPECT_EQ(a_.poll(2).size(), 2u);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 77u);
    EXPECT_TRUE(same_bytes(target.bytes(), out.bytes()));
    b_.expect_empty();
}

// The responder has no RNR NAK for UC: a send with no receive posted is
// lost, and the next message is received as if it had not been.
TEST_F(UcTransportTest, SendWithoutAReceiveIsLostAndTheNextArrives) {
    Buffer& out = a_.buffer(2 * kMtu, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& in = b_.buffer(2 * kMtu, IBV_ACCESS_LOCAL_WRITE, 0);
    const uint64_t before = counter("uroce1", "rcvd_msg_dropped");
    ibv_sge sge = out.sge(0, 2 * kMtu);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(wr);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(counter_after("uroce1", "rcvd_msg_dropped", before), before + 1);
    ASSERT_NO_FATAL_FAILURE(b_.post_recv(2, in.sge(0, 2 * kMtu)));
    sge = out.sge(kMtu, kMtu);
    wr = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(wr);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const ibv_wc wc = b_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.byte_len, kMtu);
    EXPECT_TRUE(same_bytes(in.bytes().first(kMtu), out.bytes().subspan(kMtu)));
}

// A write the target's key does not allow is dropped (IBA class E for UC):
// no NAK, no error on either QP.
TEST_F(UcTransportTest, WriteWithABadKeyIsDroppedAndBothQpsGoOn) {
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 2);
    Buffer& target = b_.buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0);
    ibv_sge sge = out.sge(0, 64);
    ibv_send_wr writes[2] = {make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1)),
                             make_wr(2, IBV_WR_RDMA_WRITE, std::span(&sge, 1))};
    writes[0].wr.rdma = {target.addr(), target.rkey() + 1};
    writes[1].wr.rdma = {target.addr(), target.rkey()};
    link(writes);
    a_.post_send(writes[0]);
    const std::vector<ibv_wc> wcs = a_.poll(2);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (target.copy() != out.copy() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(same_bytes(target.bytes(), out.bytes()));
    EXPECT_EQ(a_.state(), IBV_QPS_RTS);
    EXPECT_EQ(b_.state(), IBV_QPS_RTS);
}

TEST_F(UcTransportTest, ReadsAndAtomicsCannotBePosted) {
    Buffer& out = a_.buffer(8, IBV_ACCESS_LOCAL_WRITE, 1);
    for (ibv_wr_opcode opcode :
         {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
        ibv_sge sge = out.sge(0, 8);
        ibv_send_wr wr = make_wr(1, opcode, std::span(&sge, 1));
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(a_.qp(), &wr, &bad), EINVAL) << opcode;
        EXPECT_EQ(bad, &wr);
    }
    a_.expect_empty();
}

}  // namespace
}  // namespace uroce::test
