// The QP snapshot (`uroce qp`, the console) against a real receive path:
// what it says of a QP must be what the QP did — the transitions it took,
// the PSNs it sent and expects, its queues, its timers, the NAKs it sent
// and received, and why it entered ERR.
#include "control/qp_snapshot.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "receive_harness.h"
#include "verbs/context.h"
#include "wire/opcode.h"

namespace uroce::test {
namespace {

using nlohmann::json;
using wire::NakCode;
using wire::Operation;
using H = ReceiveHarness;

class QpSnapshotTest : public ::testing::Test {
  protected:
    // The harness's client, as the server lists it.
    json snapshot(QpSelection selection = {}) {
        const ClientList clients = {{getpid(), &h.context()}};
        return qp_snapshot(clients, selection, std::chrono::steady_clock::now());
    }
    json of(const H::QueuePair& qp) {
        const json all = snapshot({"uroce1", qp.qpn});
        EXPECT_EQ(all["qps"].size(), 1u);
        return all["qps"].empty() ? json::object() : all["qps"][0];
    }

    H h;
};

TEST_F(QpSnapshotTest, ConnectedQpReportsItsPathAndTheTransitionsItTook) {
    const json qp = of(h.rts());
    EXPECT_EQ(qp["device"], "uroce1");
    EXPECT_EQ(qp["qpn"], h.rts().qpn);
    EXPECT_EQ(qp["type"], "RC");
    EXPECT_EQ(qp["state"], "RTS");
    EXPECT_EQ(qp["previous_state"], "RTR");
    EXPECT_EQ(qp["pid"], getpid());
    EXPECT_EQ(qp["peer"]["address"], "127.0.0.9");
    EXPECT_EQ(qp["peer"]["qpn"], H::kForgerQpn);
    EXPECT_EQ(qp["path_mtu"], H::kMtuBytes);
    EXPECT_EQ(qp["sq_psn"], H::kSqPsn);
    EXPECT_EQ(qp["expected_psn"], H::kRqPsn);
    EXPECT_EQ(qp["max_dest_rd_atomic"], H::kMaxDestRdAtomic);
    EXPECT_EQ(qp["unacked"]["count"], 0);
    EXPECT_TRUE(qp["timer"].is_null());
    EXPECT_TRUE(qp["last_nak"].is_null());
    EXPECT_TRUE(qp["last_error"].is_null());
    // The harness moves every QP to RESET before it connects it.
    ASSERT_EQ(qp["transitions"].size(), 4u);
    const std::pair<const char*, const char*> path[] = {
        {"RESET", "RESET"}, {"RESET", "INIT"}, {"INIT", "RTR"}, {"RTR", "RTS"}};
    for (size_t i = 0; i < 4; ++i) {
        const json& t = qp["transitions"][i];
        EXPECT_EQ(t["from"], path[i].first);
        EXPECT_EQ(t["to"], path[i].second);
        EXPECT_EQ(t["cause"], "ibv_modify_qp");
        EXPECT_LE(t["in_us"].get<int64_t>(), 0) << "a transition in the future";
    }
    EXPECT_NE(qp["transitions"][2]["attrs"].get<std::string>().find("IBV_QP_PATH_MTU"),
              std::string::npos);
    EXPECT_NE(qp["transitions"][3]["attrs"].get<std::string>().find("IBV_QP_SQ_PSN"),
              std::string::npos);
}

TEST_F(QpSnapshotTest, QpsNotYetConnectedHaveNoPeerAndNoTransportState) {
    const json reset = of(h.reset());
    EXPECT_EQ(reset["state"], "RESET");
    EXPECT_TRUE(reset["previous_state"].is_null());
    EXPECT_TRUE(reset["peer"].is_null());
    EXPECT_TRUE(reset["path_mtu"].is_null());
    EXPECT_FALSE(reset.contains("unacked"));
    EXPECT_TRUE(reset["transitions"].empty());
    const json init = of(h.init());
    EXPECT_EQ(init["state"], "INIT");
    EXPECT_EQ(init["previous_state"], "RESET");
}

TEST_F(QpSnapshotTest, SentMessageIsInFlightUnacknowledgedAndTimedUntilItsAck) {
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_SEND;
    wqe.send_flags = IBV_SEND_SIGNALED;
    h.post_send(h.rts(), wqe, 0, 3 * H::kMtuBytes);
    ASSERT_EQ(h.answers().size(), 3u);
    json qp = of(h.rts());
    EXPECT_EQ(qp["sq_psn"], H::kSqPsn + 3);
    EXPECT_EQ(qp["unacked"]["first"], H::kSqPsn);
    EXPECT_EQ(qp["unacked"]["count"], 3);
    EXPECT_EQ(qp["send_queue"]["in_flight"], 1);
    EXPECT_EQ(qp["send_queue"]["completed"], 0);
    ASSERT_FALSE(qp["timer"].is_null());
    EXPECT_EQ(qp["timer"]["for"].get<std::string>().rfind("retransmit", 0), 0u) << qp["timer"];
    EXPECT_GT(qp["timer"]["in_us"].get<int64_t>(), 0);

    wire::PacketHeaders ack = rc_request(Operation::kAck, h.rts().qpn, H::kSqPsn + 2);
    ack.aeth = wire::Aeth::ack(1);
    h.send(ack);
    qp = of(h.rts());
    EXPECT_EQ(qp["unacked"]["count"], 0);
    EXPECT_EQ(qp["send_queue"]["in_flight"], 0);
    EXPECT_EQ(qp["send_queue"]["completed"], 1);
    EXPECT_TRUE(qp["timer"].is_null());
    EXPECT_EQ(h.poll_cq().size(), 1u);
}

TEST_F(QpSnapshotTest, ReceivedRnrNakIsTheLastNakAndStartsTheRnrWait) {
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_SEND;
    h.post_send(h.rts(), wqe, 0, 16);
    ASSERT_EQ(h.answers().size(), 1u);
    wire::PacketHeaders nak = rc_request(Operation::kAck, h.rts().qpn, H::kSqPsn);
    nak.aeth = wire::Aeth::rnr_nak(0, 0);  // 655.36 ms, the longest
    h.send(nak);
    const json qp = of(h.rts());
    ASSERT_FALSE(qp["last_nak"].is_null());
    EXPECT_EQ(qp["last_nak"]["kind"], "RNR NAK");
    EXPECT_EQ(qp["last_nak"]["direction"], "received");
    EXPECT_EQ(qp["last_nak"]["psn"], H::kSqPsn);
    EXPECT_EQ(qp["last_nak"]["rnr_timer"], 0);
    ASSERT_FALSE(qp["timer"].is_null());
    EXPECT_EQ(qp["timer"]["for"].get<std::string>().rfind("RNR wait", 0), 0u) << qp["timer"];
    EXPECT_GT(qp["timer"]["in_us"].get<int64_t>(), 600000);
    EXPECT_LE(qp["timer"]["in_us"].get<int64_t>(), 655360);
    EXPECT_EQ(qp["state"], "RTS");
}

TEST_F(QpSnapshotTest, RemoteAccessErrorIsTheNakSentAndWhyTheQpIsInErr) {
    wire::PacketHeaders write = rc_request(Operation::kWriteOnly, h.rtr().qpn, H::kRqPsn);
    write.reth = {h.region_va(), h.read_only_rkey(), 16};
    h.send(write, std::vector<uint8_t>(16, 7));
    const json qp = of(h.rtr());
    EXPECT_EQ(qp["state"], "ERR");
    EXPECT_EQ(qp["previous_state"], "RTR");
    ASSERT_FALSE(qp["last_nak"].is_null());
    EXPECT_EQ(qp["last_nak"]["direction"], "sent");
    EXPECT_EQ(qp["last_nak"]["code"], "remote access error");
    EXPECT_EQ(qp["last_nak"]["psn"], H::kRqPsn);
    ASSERT_FALSE(qp["last_error"].is_null());
    EXPECT_EQ(qp["last_error"]["what"],
              "responder: NAK remote access error sent for PSN " + std::to_string(H::kRqPsn));
    const json& last = qp["transitions"].back();
    EXPECT_EQ(last["to"], "ERR");
    EXPECT_EQ(last["attr_mask"], 0) << "the device moved it, not ibv_modify_qp";
}

TEST_F(QpSnapshotTest, ReceivedNakFailsTheRequesterWithItsCompletionStatus) {
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_RDMA_WRITE;
    h.post_send(h.rts(), wqe, 0, 16);
    ASSERT_EQ(h.answers().size(), 1u);
    wire::PacketHeaders nak = rc_request(Operation::kAck, h.rts().qpn, H::kSqPsn);
    nak.aeth = wire::Aeth::nak(0, NakCode::kRemoteAccessError);
    h.send(nak);
    const json qp = of(h.rts());
    EXPECT_EQ(qp["state"], "ERR");
    EXPECT_EQ(qp["last_nak"]["direction"], "received");
    EXPECT_EQ(qp["last_nak"]["code"], "remote access error");
    EXPECT_EQ(qp["last_error"]["what"],
              std::string("requester: ") + ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(QpSnapshotTest, SelectionNamesADeviceAndAQpAndListsInQpnOrder) {
    const json all = snapshot();
    ASSERT_GE(all["qps"].size(), 7u);
    for (size_t i = 1; i < all["qps"].size(); ++i) {
        EXPECT_LT(all["qps"][i - 1]["qpn"], all["qps"][i]["qpn"]);
    }
    EXPECT_TRUE(snapshot({"uroce0", std::nullopt})["qps"].empty()) << "the QPs are uroce1's";
    EXPECT_TRUE(snapshot({"", 0xabcdef})["qps"].empty());
    const json ud = snapshot({"", h.ud().qpn});
    ASSERT_EQ(ud["qps"].size(), 1u);
    EXPECT_EQ(ud["qps"][0]["type"], "UD");
    EXPECT_TRUE(ud["qps"][0]["peer"].is_null()) << "a UD QP has no peer";
    EXPECT_TRUE(ud["qps"][0]["path_mtu"].is_null()) << "nor a path MTU";
    EXPECT_FALSE(ud["qps"][0].contains("unacked")) << "UD acknowledges nothing";
}

TEST_F(QpSnapshotTest, JournalKeepsTheNewestTransitionsAndCountsThemAll) {
    for (int i = 0; i < 10; ++i) {
        h.reconnect(h.reset(), IBV_QPS_RTS);  // RESET, INIT, RTR, RTS: 4 each
    }
    const json qp = of(h.reset());
    EXPECT_EQ(qp["transition_count"], 40);
    ASSERT_EQ(qp["transitions"].size(), transport::QpJournal::kMaxTransitions);
    EXPECT_EQ(qp["transitions"].back()["to"], "RTS");
}

}  // namespace
}  // namespace uroce::test
