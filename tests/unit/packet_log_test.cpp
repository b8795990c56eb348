// The console's packet log: nothing recorded while disabled, records kept in
// order with the packet decoded, and a reader that falls behind the ring
// told exactly how many it missed.
#include "net/packet_log.h"

#include <gtest/gtest.h>

#include "wire/packet.h"

namespace uroce {
namespace {

std::vector<uint8_t> ack_packet(uint32_t psn) {
    wire::PacketHeaders hdr{};
    hdr.bth.opcode = wire::make_opcode(wire::Service::kRc, wire::Operation::kAck);
    hdr.bth.dest_qp = 0x11;
    hdr.bth.psn = psn;
    hdr.aeth = wire::Aeth::ack(0);
    std::vector<uint8_t> bytes(64);
    const auto built = wire::build_packet(hdr, {}, nullptr, bytes);
    bytes.resize(built.size);
    return bytes;
}

void record(PacketLog& log, uint32_t psn) {
    log.record(0, wire::IpAddress::v4(1), wire::IpAddress::v4(2), 4791, 0x12,
               PacketLog::Fate::kSent, 0, ack_packet(psn));
}

TEST(PacketLog, RecordsNothingWhileDisabled) {
    PacketLog log;
    record(log, 1);
    uint64_t missed = 99;
    EXPECT_TRUE(log.since(0, missed).empty());
    EXPECT_EQ(missed, 0u);
    EXPECT_EQ(log.last_seq(), 0u);
}

TEST(PacketLog, KeepsRecordsInOrderWithTheirHeadersDecoded) {
    PacketLog log;
    log.enable();
    for (uint32_t psn = 100; psn < 105; ++psn) {
        record(log, psn);
    }
    uint64_t missed = 0;
    const auto records = log.since(2, missed);
    EXPECT_EQ(missed, 0u);
    ASSERT_EQ(records.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(records[i]->seq, 3 + i);
        EXPECT_EQ(records[i]->error, wire::ParseError::kOk);
        EXPECT_EQ(records[i]->headers.bth.psn, 102 + i);
        EXPECT_EQ(records[i]->src_qpn, 0x12u);
    }
    EXPECT_TRUE(log.since(5, missed).empty());
}

TEST(PacketLog, KeepsTheFirstBytesOfALongPacketAndDecodesAllOfIt) {
    PacketLog log;
    log.enable();
    wire::PacketHeaders hdr{};
    hdr.bth.opcode = wire::make_opcode(wire::Service::kRc, wire::Operation::kSendOnly);
    std::vector<uint8_t> payload(1024, 7);
    std::vector<uint8_t> bytes(2048);
    bytes.resize(wire::build_packet(hdr, payload, nullptr, bytes).size);
    log.record(0, wire::IpAddress::v4(1), wire::IpAddress::v4(2), 4791, 0x12,
               PacketLog::Fate::kHeld, 3, bytes);
    uint64_t missed = 0;
    const auto records = log.since(0, missed);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]->captured, PacketLog::kMaxBytes);
    EXPECT_EQ(records[0]->total, bytes.size());
    EXPECT_EQ(records[0]->payload_bytes, 1024u);
    EXPECT_EQ(records[0]->step_id, 3u);
}

TEST(PacketLog, ReaderBehindTheRingIsToldWhatItMissed) {
    PacketLog log;
    log.enable();
    const uint64_t total = PacketLog::kCapacity + 100;
    for (uint64_t i = 0; i < total; ++i) {
        record(log, static_cast<uint32_t>(i));
    }
    uint64_t missed = 0;
    const auto records = log.since(10, missed);
    EXPECT_EQ(missed, 90u);  // 11..100 were overwritten
    ASSERT_EQ(records.size(), PacketLog::kCapacity);
    EXPECT_EQ(records.front()->seq, 101u);
    EXPECT_EQ(records.back()->seq, total);
    log.disable();
    EXPECT_FALSE(log.enabled());
    EXPECT_TRUE(log.since(0, missed).empty());

    // Enabled again: only what was recorded since, and nothing counted as missed.
    log.enable();
    record(log, 7);
    const auto again = log.since(0, missed);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0]->headers.bth.psn, 7u);
    EXPECT_EQ(missed, 0u) << "the earlier recording's packets were never this reader's";
}

}  // namespace
}  // namespace uroce
