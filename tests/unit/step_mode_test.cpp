// Step mode: the gate's bookkeeping on its own, then a paused device in a
// real engine — its packets held in order and none on the wire, released
// one at a time, dropped and duplicated ones counted as faults, and all of
// them in order when the wire runs again.
#include "net/step_gate.h"

#include <gtest/gtest.h>

#include "control/packet_json.h"
#include "receive_harness.h"

namespace uroce::test {
namespace {

using H = ReceiveHarness;

std::vector<uint8_t> packet_bytes(uint8_t tag) {
    return std::vector<uint8_t>(16, tag);
}

std::vector<uint8_t> tags(const std::deque<StepGate::Packet>& packets) {
    std::vector<uint8_t> out;
    for (const auto& p : packets) {
        out.push_back(p.bytes.at(0));
    }
    return out;
}

TEST(StepGate, HoldsOnlyWhilePausedAndReleasesInOrder) {
    StepGate gate;
    EXPECT_FALSE(gate.paused());
    gate.pause();
    for (uint8_t tag = 1; tag <= 4; ++tag) {
        ASSERT_NE(0u, gate.hold({.bytes = packet_bytes(tag)}));
    }
    EXPECT_EQ(tags(gate.held()), (std::vector<uint8_t>{1, 2, 3, 4}));
    EXPECT_EQ(gate.held().front().id, 1u);
    EXPECT_FALSE(gate.has_outgoing());

    EXPECT_EQ(gate.release(), 1u) << "the oldest goes first";
    EXPECT_EQ(tags(gate.take_outgoing()), (std::vector<uint8_t>{1}));
    EXPECT_EQ(gate.release(3), 3u) << "a packet named by id";
    EXPECT_EQ(tags(gate.take_outgoing()), (std::vector<uint8_t>{3}));
    EXPECT_EQ(gate.release(3), 0u) << "gone already";
    EXPECT_EQ(gate.release(99), 0u);

    EXPECT_EQ(gate.duplicate(), 2u);
    EXPECT_EQ(tags(gate.take_outgoing()), (std::vector<uint8_t>{2}));
    EXPECT_EQ(tags(gate.held()), (std::vector<uint8_t>{2, 4})) << "a duplicated packet stays";

    EXPECT_EQ(gate.drop(), 2u);
    EXPECT_FALSE(gate.has_outgoing()) << "a dropped packet goes nowhere";
    EXPECT_EQ(tags(gate.held()), (std::vector<uint8_t>{4}));

    ASSERT_NE(0u, gate.hold({.bytes = packet_bytes(5)}));
    EXPECT_EQ(gate.held().back().id, 5u) << "ids are never reused";
    gate.run();
    EXPECT_FALSE(gate.paused());
    EXPECT_TRUE(gate.held().empty());
    EXPECT_EQ(tags(gate.take_outgoing()), (std::vector<uint8_t>{4, 5}));
    EXPECT_EQ(gate.release(), 0u) << "nothing is held";
    EXPECT_EQ(gate.find(), nullptr);
}

TEST(StepGate, RefusesPacketsBeyondItsBound) {
    StepGate gate;
    gate.pause();
    for (size_t i = 0; i < StepGate::kMaxHeld; ++i) {
        ASSERT_NE(0u, gate.hold({.bytes = packet_bytes(1)}));
    }
    EXPECT_EQ(gate.hold({.bytes = packet_bytes(2)}), 0u);
    EXPECT_EQ(gate.held().size(), StepGate::kMaxHeld);
}

class StepModeTest : public ::testing::Test {
  protected:
    // A 4-packet SEND from the RTS QP to the forger.
    void post_send() {
        queues::SendWqe wqe{};
        wqe.opcode = IBV_WR_SEND;
        h.post_send(h.rts(), wqe, 0, 4 * H::kMtuBytes);
        h.settle();
    }
    std::vector<uint32_t> psns(const std::vector<Answer>& answers) {
        std::vector<uint32_t> out;
        for (const Answer& a : answers) {
            out.push_back(a.psn());
        }
        return out;
    }
    StepGate& gate() { return h.device().step_gate(); }

    H h;
};

TEST_F(StepModeTest, PausedDeviceHoldsItsPacketsInOrderAndSendsNone) {
    gate().pause();
    post_send();
    EXPECT_TRUE(h.answers().empty()) << "a packet crossed a paused wire";
    ASSERT_GE(gate().held().size(), 4u);  // a slow run may have held a retransmission too
    for (uint32_t i = 0; i < 4; ++i) {
        const nlohmann::json packet = packet_json(gate().held()[i].bytes);
        EXPECT_EQ(packet["psn"], H::kSqPsn + i);
        EXPECT_EQ(packet["dest_qp"], H::kForgerQpn);
    }
    EXPECT_EQ(h.stats().sent_pkts, 4u) << "held packets were sent by the QP";
}

TEST_F(StepModeTest, NextReleasesExactlyOnePacketEachTime) {
    gate().pause();
    post_send();
    for (uint32_t i = 0; i < 4; ++i) {
        ASSERT_NE(gate().release(), 0u);
        EXPECT_EQ(psns(h.answers()), (std::vector<uint32_t>{H::kSqPsn + i}));
        // More when a slow run let the retransmission timer fire: its
        // copies are held behind.
        EXPECT_GE(gate().held().size(), 3u - i);
    }
    EXPECT_EQ(h.stats().fault_dropped, 0u);
}

TEST_F(StepModeTest, DroppedPacketNeverLeavesAndADuplicateLeavesTwice) {
    // (The server's step() counts them as faults: tests/system/test_lab.py.)
    gate().pause();
    post_send();
    ASSERT_EQ(gate().drop(), 1u);
    ASSERT_EQ(gate().duplicate(), 2u);
    ASSERT_EQ(gate().release(), 2u);
    EXPECT_EQ(psns(h.answers()), (std::vector<uint32_t>{H::kSqPsn + 1, H::kSqPsn + 1}));
    gate().run();
    const std::vector<uint32_t> rest = psns(h.answers());
    ASSERT_GE(rest.size(), 2u);
    EXPECT_EQ(std::vector<uint32_t>(rest.begin(), rest.begin() + 2),
              (std::vector<uint32_t>{H::kSqPsn + 2, H::kSqPsn + 3}))
        << "the held packets leave in order (retransmissions, if any, behind them)";
    EXPECT_FALSE(gate().paused());
    post_send();  // running again: straight onto the wire, nothing held
    EXPECT_GE(h.answers().size(), 4u);
    EXPECT_TRUE(gate().held().empty());
}

TEST_F(StepModeTest, FullGateDropsAndCountsWhatItCannotHold) {
    gate().pause();
    for (size_t i = 0; i < StepGate::kMaxHeld; ++i) {
        ASSERT_NE(0u, gate().hold({.bytes = packet_bytes(1)}));
    }
    post_send();
    EXPECT_EQ(gate().held().size(), StepGate::kMaxHeld);
    EXPECT_EQ(h.stats().fault_dropped, 4u);
    EXPECT_TRUE(h.answers().empty());
}

TEST(PacketJson, DecodesEveryHeaderOfTheOpcode) {
    std::vector<uint8_t> bytes(64);
    wire::PacketHeaders hdr{};
    hdr.bth.opcode = wire::make_opcode(wire::Service::kRc, wire::Operation::kAck);
    hdr.bth.dest_qp = 0x12;
    hdr.bth.psn = 0x345;
    hdr.aeth = wire::Aeth::nak(7, wire::NakCode::kRemoteAccessError);
    const auto built = wire::build_packet(hdr, {}, nullptr, bytes);
    ASSERT_EQ(built.error, wire::BuildError::kOk);
    bytes.resize(built.size);
    const nlohmann::json packet = packet_json(bytes);
    EXPECT_EQ(packet["opcode"], "RC_ACKNOWLEDGE");
    EXPECT_EQ(packet["headers"]["BTH"]["psn"], 0x345);
    EXPECT_EQ(packet["headers"]["AETH"]["kind"], "NAK");
    EXPECT_EQ(packet["headers"]["AETH"]["code"], "remote access error");
    EXPECT_EQ(packet["headers"]["AETH"]["msn"], 7);
    EXPECT_EQ(packet["bytes_total"], built.size);
    EXPECT_EQ(packet_summary(packet),
              "RC_ACKNOWLEDGE psn 837 to qp 18, NAK (remote access "
              "error) msn 7");
    EXPECT_EQ(packet_json(std::span(bytes).first(5))["error"],
              wire::parse_error_text(wire::ParseError::kTooShortForBth));
}

}  // namespace
}  // namespace uroce::test
