// Forged, truncated and corrupted RoCEv2 packets fed straight into the
// daemon's receive path (Engine::receive_datagram): each is dropped and
// counted, or NAKed as IBA vol.1 chapter 9 says, and nothing outside a
// registered range is ever read or written. The setup is in receive_harness.h.
#include <gtest/gtest.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <set>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "receive_harness.h"
#include "wire/psn.h"
#include "wire/udp_port.h"

namespace uroce::test {
namespace {

using wire::AethType;
using wire::NakCode;
using wire::Operation;
using Bytes = std::vector<uint8_t>;
using Counters = std::map<std::string, uint64_t>;
using Lines = std::vector<std::string>;
using H = ReceiveHarness;

constexpr uint32_t kPsn = H::kRqPsn;
constexpr uint64_t kLastQword = ~uint64_t{0} - 7;  // 2^64 - 8

uint64_t value(const std::map<std::string, uint64_t>& c, const char* name) {
    auto it = c.find(name);
    return it == c.end() ? 0 : it->second;
}

bool has_event(const std::vector<uint32_t>& events, ibv_event_type event) {
    return std::find(events.begin(), events.end(), static_cast<uint32_t>(event)) != events.end();
}

Counters counters(const DeviceStats& s) {
    Counters c;
#define UROCE_TEST_COUNTER(name, text) c[#name] = s.name;
    UROCE_DEVICE_COUNTERS(UROCE_TEST_COUNTER)
#undef UROCE_TEST_COUNTER
    return c;
}

Bytes pattern(size_t n, uint8_t seed) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) {
        b[i] = static_cast<uint8_t>(seed + i * 7);
    }
    return b;
}

std::string aeth_text(const wire::Aeth& aeth) {
    switch (aeth.type()) {
        case AethType::kAck:
            return "ack";
        case AethType::kRnrNak:
            return "rnr-nak";
        case AethType::kReserved:
            return "reserved";
        case AethType::kNak:
            break;
    }
    switch (static_cast<NakCode>(aeth.value())) {
        case NakCode::kPsnSequenceError:
            return "nak-psn-sequence";
        case NakCode::kInvalidRequest:
            return "nak-invalid-request";
        case NakCode::kRemoteAccessError:
            return "nak-remote-access";
        case NakCode::kRemoteOperationalError:
            return "nak-remote-operational";
        case NakCode::kInvalidRdRequest:
            return "nak-invalid-rd-request";
    }
    return "nak-" + std::to_string(aeth.value());
}

// One line per answer, e.g. "RC_ACKNOWLEDGE 0x1000 nak-remote-access".
std::string describe(const Answer& a) {
    if (a.error != wire::ParseError::kOk) {
        return std::string("unparsable: ") + wire::parse_error_text(a.error);
    }
    const wire::ParsedPacket& p = a.packet;
    char line[160];
    snprintf(line, sizeof(line), "%s 0x%x", p.info->name, p.hdr.bth.psn);
    std::string text = line;
    if (p.hdr.bth.dest_qp != H::kForgerQpn) {
        text += " to-qp=" + std::to_string(p.hdr.bth.dest_qp);
    }
    if (p.info->has(wire::ExtHeader::kAeth)) {
        text += " " + aeth_text(p.hdr.aeth);
    }
    if (!p.payload.empty()) {
        text += " len=" + std::to_string(p.payload.size());
    }
    if (p.info->has(wire::ExtHeader::kAtomicAckEth)) {
        text += " original=" + std::to_string(p.hdr.atomic_ack_eth.original);
    }
    return text;
}

std::string hex_psn(const char* name, uint32_t psn, const char* rest = "") {
    char line[160];
    snprintf(line, sizeof(line), "%s 0x%x%s", name, psn, rest);
    return line;
}

class ReceivePathTest : public ::testing::Test {
  protected:
    ReceivePathTest() { mark(); }

    void TearDown() override { EXPECT_EQ(h.memory_outside_region_damage(), ""); }

    // Counters that moved since the last mark(), with how far.
    Counters moved() const {
        Counters delta;
        for (const auto& [name, value] : counters(h.stats())) {
            if (value != before_.at(name)) {
                delta[name] = value - before_.at(name);
            }
        }
        return delta;
    }
    void mark() { before_ = counters(h.stats()); }

    // Posts a signaled SEND of the region's first `length` bytes, and lets
    // the engine send it.
    void post_signaled_send(uint64_t wr_id, uint32_t length) {
        queues::SendWqe wqe{};
        wqe.wr_id = wr_id;
        wqe.opcode = IBV_WR_SEND;
        wqe.send_flags = IBV_SEND_SIGNALED;
        h.post_send(h.rts(), wqe, 0, length);
        h.settle();
    }

    Lines answers(int wait_ms = 20) {
        Lines lines;
        for (const Answer& a : h.answers(wait_ms)) {
            lines.push_back(describe(a));
        }
        return lines;
    }

    // Region bytes [offset, offset + n) still hold the harness's fill.
    bool region_untouched(size_t offset = 0, size_t n = H::kRegionBytes) {
        for (size_t i = offset; i < offset + n; ++i) {
            if (h.region()[i] != H::kRegionFill) {
                return false;
            }
        }
        return true;
    }

    Bytes region_bytes(size_t offset, size_t n) {
        return Bytes(h.region() + offset, h.region() + offset + n);
    }

    // Valid requests for the RTR QP at `psn`.
    Bytes write_only(uint32_t psn, uint64_t offset, const Bytes& data) {
        wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, h.rtr().qpn, psn);
        hdr.reth = {h.region_va() + offset, h.rkey(), static_cast<uint32_t>(data.size())};
        return h.build(hdr, data);
    }
    Bytes read_request(uint32_t psn, uint64_t offset, uint32_t length) {
        wire::PacketHeaders hdr = rc_request(Operation::kReadRequest, h.rtr().qpn, psn);
        hdr.reth = {h.region_va() + offset, h.rkey(), length};
        return h.build(hdr);
    }
    Bytes send_only(uint32_t psn, const Bytes& data) {
        return h.build(rc_request(Operation::kSendOnly, h.rtr().qpn, psn), data);
    }

    H h;
    Counters before_;
};

// ---- Packets that do not parse ----------------------------------------------

TEST_F(ReceivePathTest, EveryTruncationOfAValidRequestIsDroppedAndCounted) {
    h.post_recv(h.rtr(), 7, 0, 64);
    const Bytes send = send_only(kPsn, pattern(40, 1));
    const Bytes write = write_only(kPsn + 1, 512, pattern(64, 2));
    const Bytes read = read_request(kPsn + 2, 1024, 32);
    uint64_t injected = 0;
    for (const Bytes* packet : {&send, &write, &read}) {
        for (size_t length = 0; length < packet->size(); ++length) {
            h.inject(std::span(*packet).first(length));
            ++injected;
        }
    }
    // Truncated to a 4-byte multiple the layout may still parse; the ICRC
    // then fails. Nothing else may move.
    Counters delta = moved();
    EXPECT_EQ(value(delta, "rcvd_malformed") + value(delta, "rcvd_icrc_err"), injected);
    delta.erase("rcvd_malformed");
    delta.erase("rcvd_icrc_err");
    EXPECT_EQ(delta, (Counters{{"rcvd_pkts", injected}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_TRUE(region_untouched());
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_RTR);

    // The responder's state was not disturbed: the whole packets still work.
    h.inject(send);
    h.inject(write);
    h.inject(read);
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack"),
                                hex_psn("RC_RDMA_READ_RESPONSE_ONLY", kPsn + 2, " ack len=32")}));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[0].byte_len, 40u);
    EXPECT_EQ(region_bytes(0, 40), pattern(40, 1));
    EXPECT_EQ(region_bytes(512, 64), pattern(64, 2));
}

// Other senders (the kernel's rxe, NICs) put non-zero IDs in their IPv4
// headers, which the ICRC covers and a UDP socket does not show: the
// receive path solves for the ID, and a corrupted packet still fails.
TEST_F(ReceivePathTest, PacketsSentWithNonZeroIpIdsAreAccepted) {
    h.post_recv(h.rtr(), 7, 0, 64);
    h.post_recv(h.rtr(), 8, 64, 64);
    Bytes first = send_only(kPsn, pattern(40, 1));
    Bytes second = send_only(kPsn + 1, pattern(24, 2));
    h.seal(first, {}, 0x7964);
    h.seal(second, {}, 0xffff);
    Bytes corrupted = first;
    corrupted[20] ^= 0x10;
    h.inject(corrupted);
    h.inject(first);
    h.inject(second);
    EXPECT_EQ(
        moved(),
        (Counters{{"rcvd_pkts", 3}, {"rcvd_icrc_err", 1}, {"sent_pkts", 2}, {"rdma_recvs", 2}}));
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack")}));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(region_bytes(0, 40), pattern(40, 1));
    EXPECT_EQ(region_bytes(64, 24), pattern(24, 2));
}

TEST_F(ReceivePathTest, EveryCorruptedByteFailsTheIcrcOrTheParse) {
    const Bytes write = write_only(kPsn, 0, pattern(64, 3));
    // BTH byte 4 holds FECN, BECN and reserved bits, which the ICRC masks
    // because switches may set them.
    constexpr size_t kMaskedByte = 4;
    uint64_t injected = 0;
    for (size_t i = 0; i < write.size(); ++i) {
        if (i == kMaskedByte) {
            continue;
        }
        Bytes bad = write;
        bad[i] ^= 0xff;
        h.inject(bad);
        ++injected;
    }
    Counters delta = moved();
    EXPECT_EQ(value(delta, "rcvd_malformed") + value(delta, "rcvd_icrc_err"), injected);
    delta.erase("rcvd_malformed");
    delta.erase("rcvd_icrc_err");
    EXPECT_EQ(delta, (Counters{{"rcvd_pkts", injected}}));

    // Every single-bit error in the ICRC itself.
    mark();
    for (size_t bit = 0; bit < 32; ++bit) {
        Bytes bad = write;
        bad[write.size() - 4 + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        h.inject(bad);
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 32}, {"rcvd_icrc_err", 32}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());

    // The masked byte may change on the way: the packet is still good.
    Bytes congested = write;
    congested[kMaskedByte] ^= 0xff;
    h.inject(congested);
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack")});
    EXPECT_EQ(region_bytes(0, 64), pattern(64, 3));
}

// A datagram with `opcode` and room for any opcode's headers, sealed.
Bytes any_opcode(const H& h, uint8_t opcode, uint32_t qpn, uint32_t psn) {
    if (const wire::OpcodeInfo* info = wire::opcode_info(opcode)) {
        wire::PacketHeaders hdr = rc_request(Operation::kSendOnly, qpn, psn);
        hdr.bth.opcode = opcode;
        hdr.reth = {h.region_va(), h.rkey(), 8};
        hdr.atomic_eth = {h.region_va(), h.rkey(), 1, 0};
        const Bytes payload = info->payload ? pattern(8, opcode) : Bytes{};
        return h.build(hdr, payload);
    }
    Bytes bytes(wire::kBthBytes + 32 + wire::kIcrcBytes, 0);
    wire::Bth bth;
    bth.opcode = opcode;
    bth.dest_qp = qpn;
    bth.psn = psn;
    wire::encode(bth, std::span(bytes).first<wire::kBthBytes>());
    h.seal(bytes);
    return bytes;
}

TEST_F(ReceivePathTest, EveryOpcodeByteIsHandledAndUnknownOnesCountAsMalformed) {
    constexpr uint32_t kNoSuchQp = 0xabcdef;
    Counters expected{{"rcvd_pkts", 256}};
    for (int op = 0; op < 256; ++op) {
        const auto opcode = static_cast<uint8_t>(op);
        h.inject(any_opcode(h, opcode, kNoSuchQp, kPsn));
        const wire::OpcodeInfo* info = wire::opcode_info(opcode);
        // Only RC, UC, UD and XRC packets reach the QP lookup; every other
        // kind (CNPs) is refused.
        const bool routed =
            info &&
            (info->service() == wire::Service::kRc || info->service() == wire::Service::kUc ||
             info->service() == wire::Service::kUd || info->service() == wire::Service::kXrc);
        ++expected[routed ? "rcvd_unknown_qp" : "rcvd_malformed"];
    }
    EXPECT_EQ(moved(), expected);
    EXPECT_EQ(answers(), Lines{});

    // Now each at the expected PSN of a fresh RTR QP and of a fresh RTS QP:
    // whatever the answer, nothing may crash or touch memory outside the region.
    for (int op = 0; op < 256; ++op) {
        const auto opcode = static_cast<uint8_t>(op);
        h.reconnect(h.rtr(), IBV_QPS_RTR);
        h.reconnect(h.rts(), IBV_QPS_RTS);
        mark();
        h.inject(any_opcode(h, opcode, h.rtr().qpn, kPsn));
        h.inject(any_opcode(h, opcode, h.rts().qpn, H::kSqPsn));
        if (!wire::opcode_info(opcode)) {
            EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"rcvd_malformed", 2}})) << op;
        }
        h.answers(0);
        h.poll_cq();
        h.async_events();
        ASSERT_EQ(h.memory_outside_region_damage(), "") << "opcode " << op;
    }
}

TEST_F(ReceivePathTest, OnlyTransportVersionZeroIsAccepted) {
    for (uint8_t tver = 1; tver < 16; ++tver) {
        wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, h.rtr().qpn, kPsn);
        hdr.reth = {h.region_va(), h.rkey(), 16};
        hdr.bth.tver = tver;
        h.inject(h.build(hdr, pattern(16, 4)));
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 15}, {"rcvd_malformed", 15}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
}

TEST_F(ReceivePathTest, PadThatDisagreesWithTheLengthIsMalformed) {
    // A pad of 3 with no payload at all.
    Bytes empty = send_only(kPsn, {});
    empty[1] |= 3 << 4;  // BTH byte 1: SE, M, PadCnt, TVer
    h.seal(empty);
    h.inject(empty);
    // Payload and pad not a multiple of 4: one byte more than the builder wrote.
    Bytes odd = send_only(kPsn, pattern(8, 5));
    odd.insert(odd.end() - wire::kIcrcBytes, 0);
    h.seal(odd);
    h.inject(odd);
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"rcvd_malformed", 2}}));
    EXPECT_EQ(answers(), Lines{});
}

TEST_F(ReceivePathTest, PayloadOnAnOpcodeWithoutPayloadIsMalformed) {
    for (Operation op : {Operation::kReadRequest, Operation::kAck, Operation::kCompareSwap,
                         Operation::kFetchAdd, Operation::kAtomicAck}) {
        wire::PacketHeaders hdr = rc_request(op, h.rtr().qpn, kPsn);
        hdr.reth = {h.region_va(), h.rkey(), 16};
        hdr.atomic_eth = {h.region_va(), h.rkey(), 1, 0};
        Bytes bytes = h.build(hdr);
        bytes.insert(bytes.end() - wire::kIcrcBytes, 4, 0xee);
        h.seal(bytes);
        h.inject(bytes);
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 5}, {"rcvd_malformed", 5}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
}

// ---- Packets that parse but are not for a QP that takes them ---------------

TEST_F(ReceivePathTest, UnknownDestinationQpnIsCountedAndDropped) {
    for (uint32_t qpn : {0u, 1u, 0xffffffu, h.rtr().qpn + 1000}) {
        wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, qpn, kPsn);
        hdr.reth = {h.region_va(), h.rkey(), 16};
        h.inject(h.build(hdr, pattern(16, 6)));
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 4}, {"rcvd_unknown_qp", 4}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
}

TEST_F(ReceivePathTest, PacketsFromAnAddressThatIsNotThePeerAreDropped) {
    wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, h.rtr().qpn, kPsn);
    hdr.reth = {h.region_va(), h.rkey(), 16};
    // Another host, and the daemon's own other device: ICRCs valid for them.
    for (uint8_t host : {10, 1}) {
        h.inject(h.build(hdr, pattern(16, 7), loopback(host)), loopback(host));
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"rcvd_dropped", 2}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
    EXPECT_TRUE(h.async_events().empty());  // not even communication established
}

TEST_F(ReceivePathTest, QpsInResetOrInitTakeNoPackets) {
    for (H::QueuePair* qp : {&h.reset(), &h.init()}) {
        wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, qp->qpn, kPsn);
        hdr.reth = {h.region_va(), h.rkey(), 16};
        h.inject(h.build(hdr, pattern(16, 8)));
        h.inject(h.build(rc_request(Operation::kAck, qp->qpn, kPsn)));
    }
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 4}, {"rcvd_dropped", 4}}));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
    EXPECT_EQ(h.state(h.reset()), IBV_QPS_RESET);
    EXPECT_EQ(h.state(h.init()), IBV_QPS_INIT);
}

// ---- PSN checks ---------------------------------------------------------------

TEST_F(ReceivePathTest, RequestsAheadOfTheExpectedPsnAreNakedOnceThenIgnored) {
    h.inject(write_only(kPsn + 5, 0, pattern(16, 9)));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " nak-psn-sequence")});
    h.inject(write_only(kPsn + 6, 0, pattern(16, 9)));
    // The farthest PSN that still counts as ahead.
    h.inject(write_only(wire::psn_add(kPsn, wire::kPsnHalfRange), 0, pattern(16, 9)));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 3}, {"out_of_seq_request", 3}, {"sent_pkts", 1}}));
    EXPECT_TRUE(region_untouched());
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_RTR);

    // The expected PSN is executed, and the next gap is NAKed again.
    h.inject(write_only(kPsn, 0, pattern(16, 10)));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack")});
    EXPECT_EQ(region_bytes(0, 16), pattern(16, 10));
    h.inject(write_only(kPsn + 3, 0, pattern(16, 11)));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " nak-psn-sequence")});
    EXPECT_EQ(region_bytes(0, 16), pattern(16, 10));
}

TEST_F(ReceivePathTest, DuplicateWriteIsAcknowledgedAgainNotExecutedAgain) {
    h.inject(write_only(kPsn, 0, pattern(16, 12)));
    h.inject(write_only(kPsn + 1, 16, pattern(16, 13)));
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack")}));
    memset(h.region(), H::kRegionFill, 32);
    mark();
    // An old PSN, and the farthest PSN that still counts as behind.
    h.inject(write_only(kPsn, 0, pattern(16, 14)));
    h.inject(write_only(wire::psn_add(kPsn + 2, wire::kPsnHalfRange + 1), 0, pattern(16, 14)));
    // A duplicate is answered with the newest PSN the responder completed.
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack")}));
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"duplicate_request", 2}, {"sent_pkts", 2}}));
    EXPECT_TRUE(region_untouched());
}

TEST_F(ReceivePathTest, DuplicateAtomicIsAnsweredFromItsResultNotExecutedAgain) {
    const uint64_t start = 100;
    memcpy(h.region() + 64, &start, sizeof(start));
    wire::PacketHeaders add = rc_request(Operation::kFetchAdd, h.rtr().qpn, kPsn);
    add.atomic_eth = {h.region_va() + 64, h.rkey(), 5, 0};
    wire::PacketHeaders swap = rc_request(Operation::kCompareSwap, h.rtr().qpn, kPsn + 1);
    swap.atomic_eth = {h.region_va() + 64, h.rkey(), 1000, 105};
    h.send(add);
    h.send(swap);
    h.send(add);   // both again, in order
    h.send(swap);  // and once more
    h.send(add);
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ATOMIC_ACKNOWLEDGE", kPsn, " ack original=100"),
                                hex_psn("RC_ATOMIC_ACKNOWLEDGE", kPsn + 1, " ack original=105"),
                                hex_psn("RC_ATOMIC_ACKNOWLEDGE", kPsn, " ack original=100"),
                                hex_psn("RC_ATOMIC_ACKNOWLEDGE", kPsn + 1, " ack original=105"),
                                hex_psn("RC_ATOMIC_ACKNOWLEDGE", kPsn, " ack original=100")}));
    uint64_t now;
    memcpy(&now, h.region() + 64, sizeof(now));
    EXPECT_EQ(now, 1000u);
    EXPECT_EQ(moved().at("duplicate_request"), 3u);
    EXPECT_TRUE(region_untouched(0, 64));
    EXPECT_TRUE(region_untouched(72, H::kRegionBytes - 72));
}

// A duplicate READ may ask for part of what the original asked (IBA vol.1
// 9.7.5; rxe's duplicate_request() replays it with the new length): it is answered
// with that much, in as many packets as that length needs.
TEST_F(ReceivePathTest, DuplicateReadAskingForLessIsAnsweredWithLess) {
    memcpy(h.region(), pattern(4 * H::kMtuBytes, 15).data(), 4 * H::kMtuBytes);
    h.inject(read_request(kPsn, 0, 4 * H::kMtuBytes));
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_RDMA_READ_RESPONSE_FIRST", kPsn, " ack len=256"),
                                hex_psn("RC_RDMA_READ_RESPONSE_MIDDLE", kPsn + 1, " len=256"),
                                hex_psn("RC_RDMA_READ_RESPONSE_MIDDLE", kPsn + 2, " len=256"),
                                hex_psn("RC_RDMA_READ_RESPONSE_LAST", kPsn + 3, " ack len=256")}));
    h.inject(read_request(kPsn, 0, 16));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_RDMA_READ_RESPONSE_ONLY", kPsn, " ack len=16")});
}

// A READ's responses leave a burst at a time; requests that arrive meanwhile
// wait behind them (up to a bound; beyond it they are dropped and counted,
// for the requester to send again) and are answered after the last response.
TEST_F(ReceivePathTest, RequestsArrivingDuringAReadResponseWaitForIt) {
    constexpr uint32_t kResponses = H::kRegionBytes / H::kMtuBytes;
    constexpr uint32_t kWaiting = 512;
    constexpr uint32_t kBeyond = 3;
    memcpy(h.region(), pattern(H::kRegionBytes, 17).data(), H::kRegionBytes);
    const Bytes original = region_bytes(0, H::kRegionBytes);
    h.arrive(read_request(kPsn, 0, H::kRegionBytes));
    // WRITEs of 4 bytes each at the end of the region; only the last that
    // fits asks for an acknowledgement.
    for (uint32_t i = 0; i < kWaiting + kBeyond; ++i) {
        wire::PacketHeaders hdr =
            rc_request(Operation::kWriteOnly, h.rtr().qpn, kPsn + kResponses + i);
        hdr.bth.ack_req = i + 1 == kWaiting;
        hdr.reth = {h.region_va() + H::kRegionBytes - 4, h.rkey(), 4};
        h.arrive(h.build(hdr, pattern(4, static_cast<uint8_t>(i))));
    }
    Lines expected;
    for (uint32_t i = 0; i < kResponses; ++i) {
        const char* name = i == 0                ? "RC_RDMA_READ_RESPONSE_FIRST"
                           : i + 1 == kResponses ? "RC_RDMA_READ_RESPONSE_LAST"
                                                 : "RC_RDMA_READ_RESPONSE_MIDDLE";
        const bool aeth = i == 0 || i + 1 == kResponses;
        expected.push_back(hex_psn(name, kPsn + i, aeth ? " ack len=256" : " len=256"));
    }
    expected.push_back(hex_psn("RC_ACKNOWLEDGE", kPsn + kResponses + kWaiting - 1, " ack"));
    Lines got;
    Bytes read_data;
    for (const Answer& a : h.answers()) {
        got.push_back(describe(a));
        if (a.packet.info->family == wire::Family::kReadResponse) {
            read_data.insert(read_data.end(), a.packet.payload.begin(), a.packet.payload.end());
        }
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(value(moved(), "rcvd_backlog_full"), kBeyond);
    // The READ read memory as it was before the WRITEs; the last WRITE that
    // waited is the one that stays.
    EXPECT_EQ(read_data, original);
    EXPECT_EQ(region_bytes(H::kRegionBytes - 4, 4), pattern(4, static_cast<uint8_t>(kWaiting - 1)));
    EXPECT_EQ(region_bytes(0, H::kRegionBytes - 4), Bytes(original.begin(), original.end() - 4));
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_RTR);
}

// ---- Memory access checks -------------------------------------------------------

// An RDMA request that names memory it may not touch.
struct AccessCase {
    const char* name;
    uint32_t (H::*key)() const;
    int64_t offset;   // from the region's start
    uint32_t length;  // the RETH's DMA length
};

std::string case_name(const ::testing::TestParamInfo<AccessCase>& info) {
    return info.param.name;
}

uint64_t address(const H& h, const AccessCase& c) {
    return h.region_va() + static_cast<uint64_t>(c.offset);
}

uint32_t key_of(const H& h, const AccessCase& c) {
    return c.key ? (h.*c.key)() : 0;
}

class RemoteAccessTest : public ReceivePathTest, public ::testing::WithParamInterface<AccessCase> {
  protected:
    // The request is NAKed with a remote access error, the QP goes to ERR
    // with an access error event, and memory stays as it was.
    void expect_refused(NakCode code = NakCode::kRemoteAccessError,
                        ibv_event_type event = IBV_EVENT_QP_ACCESS_ERR) {
        wire::Aeth nak = wire::Aeth::nak(0, code);
        EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, "") + " " + aeth_text(nak)});
        EXPECT_EQ(h.state(h.rtr()), IBV_QPS_ERR);
        EXPECT_TRUE(has_event(h.async_events(), event));
        EXPECT_TRUE(region_untouched());
        // In ERR the QP takes nothing more.
        mark();
        h.inject(write_only(kPsn, 0, pattern(16, 16)));
        EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 1}, {"rcvd_dropped", 1}}));
        EXPECT_TRUE(region_untouched());
    }
};

constexpr uint32_t (H::*kRkey)() const = &H::rkey;

const AccessCase kWriteCases[] = {
    {"StaleKeyVariant", nullptr, 0, 16},  // rkey ^ 1, set by reth_for()
    {"UnknownKeyIndex", nullptr, 0, 16},  // 0xfffff00, set by reth_for()
    {"ZeroKey", nullptr, 0, 16},
    {"KeyOfAnotherPd", &H::other_pd_rkey, 0, 16},
    {"KeyWithoutTheRight", &H::read_only_rkey, 0, 16},
    {"Before", kRkey, -16, 32},
    {"OneByteBefore", kRkey, -1, 16},
    {"After", kRkey, H::kRegionBytes, 16},
    {"StraddlingTheEnd", kRkey, H::kRegionBytes - 8, 16},
    {"WrapsAround2To64", kRkey, 0, 0xffffffff},  // va = 2^64 - 8, set by reth_for()
    {"LengthBeyondTheEnd", kRkey, 8, 0xffffffff},
    {"Near2To64", kRkey, 0, 16},  // va = 2^64 - 8, set by reth_for()
};

// Keys and addresses the table cannot say as members and offsets.
wire::Reth reth_for(H& h, const AccessCase& c) {
    wire::Reth reth{address(h, c), key_of(h, c), c.length};
    const std::string name = c.name;
    if (name == "StaleKeyVariant") {
        reth.rkey = h.rkey() ^ 1;
    } else if (name == "UnknownKeyIndex") {
        reth.rkey = 0xfffff00;
    } else if (name == "Near2To64" || name == "WrapsAround2To64") {
        reth.va = kLastQword;
    }
    return reth;
}

class WriteAccessTest : public RemoteAccessTest {};

TEST_P(WriteAccessTest, IsNakedWithARemoteAccessError) {
    wire::PacketHeaders hdr = rc_request(Operation::kWriteOnly, h.rtr().qpn, kPsn);
    hdr.reth = reth_for(h, GetParam());
    h.send(hdr, pattern(16, 17));
    expect_refused();
}

INSTANTIATE_TEST_SUITE_P(Cases, WriteAccessTest, ::testing::ValuesIn(kWriteCases), case_name);

// Also when the first packet was fine: a later packet may not write past the
// RETH's length.
TEST_F(ReceivePathTest, WriteMiddleBeyondTheFirstPacketsLengthIsRefused) {
    wire::PacketHeaders first = rc_request(Operation::kWriteFirst, h.rtr().qpn, kPsn);
    first.reth = {h.region_va() + H::kRegionBytes - 2 * H::kMtuBytes, h.rkey(), 2 * H::kMtuBytes};
    h.send(first, pattern(H::kMtuBytes, 18));
    h.send(rc_request(Operation::kWriteMiddle, h.rtr().qpn, kPsn + 1), pattern(H::kMtuBytes, 19));
    h.send(rc_request(Operation::kWriteLast, h.rtr().qpn, kPsn + 2), pattern(16, 20));
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 2, " nak-invalid-request")}));
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_ERR);
}

const AccessCase kReadCases[] = {
    {"StaleKeyVariant", nullptr, 0, 16},
    {"UnknownKeyIndex", nullptr, 0, 16},
    {"ZeroKey", nullptr, 0, 16},
    {"KeyOfAnotherPd", &H::other_pd_rkey, 0, 16},
    {"KeyWithoutTheRight", &H::write_only_rkey, 0, 16},
    {"Before", kRkey, -16, 32},
    {"OneByteBefore", kRkey, -1, 16},
    {"After", kRkey, H::kRegionBytes, 16},
    {"StraddlingTheEnd", kRkey, H::kRegionBytes - 8, 16},
    {"WrapsAround2To64", kRkey, 0, 0xffffffff},
    {"LengthBeyondTheEnd", kRkey, 8, 0xffffffff},
    {"Near2To64", kRkey, 0, 16},
};

class ReadAccessTest : public RemoteAccessTest {};

TEST_P(ReadAccessTest, IsNakedWithARemoteAccessErrorAndNothingIsRead) {
    wire::PacketHeaders hdr = rc_request(Operation::kReadRequest, h.rtr().qpn, kPsn);
    hdr.reth = reth_for(h, GetParam());
    h.send(hdr);
    expect_refused();  // in particular: no READ response carries any byte
}

INSTANTIATE_TEST_SUITE_P(Cases, ReadAccessTest, ::testing::ValuesIn(kReadCases), case_name);

const AccessCase kAtomicCases[] = {
    {"StaleKeyVariant", nullptr, 0, 8},
    {"KeyOfAnotherPd", &H::other_pd_rkey, 0, 8},
    {"KeyWithoutTheRight", &H::write_only_rkey, 0, 8},
    {"Before", kRkey, -8, 8},
    {"After", kRkey, H::kRegionBytes, 8},
    {"Near2To64", kRkey, 0, 8},
};

class AtomicAccessTest : public RemoteAccessTest {};

TEST_P(AtomicAccessTest, IsNakedWithARemoteAccessError) {
    wire::PacketHeaders hdr = rc_request(Operation::kFetchAdd, h.rtr().qpn, kPsn);
    const wire::Reth reth = reth_for(h, GetParam());
    hdr.atomic_eth = {reth.va, reth.rkey, 1, 0};
    h.send(hdr);
    expect_refused();
}

INSTANTIATE_TEST_SUITE_P(Cases, AtomicAccessTest, ::testing::ValuesIn(kAtomicCases), case_name);

TEST_F(ReceivePathTest, MisalignedAtomicIsNakedAsAnInvalidRequest) {
    for (Operation op : {Operation::kFetchAdd, Operation::kCompareSwap}) {
        h.reconnect(h.rtr(), IBV_QPS_RTR);
        h.async_events();
        wire::PacketHeaders hdr = rc_request(op, h.rtr().qpn, kPsn);
        hdr.atomic_eth = {h.region_va() + 4, h.rkey(), 1, 0};
        h.send(hdr);
        EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " nak-invalid-request")});
        EXPECT_EQ(h.state(h.rtr()), IBV_QPS_ERR);
        EXPECT_TRUE(has_event(h.async_events(), IBV_EVENT_QP_REQ_ERR));
        EXPECT_TRUE(region_untouched());
    }
}

// The QP's own remote access flags (ibv_modify_qp qp_access_flags) gate
// RDMA and atomics before any key is looked at; rxe's check_qp_attr_access()
// answers an operation the QP does not enable with an Invalid Request NAK.
TEST_F(ReceivePathTest, QpWithoutRemoteAccessRightsRefusesRdmaAndAtomics) {
    for (Operation op : {Operation::kWriteOnly, Operation::kReadRequest, Operation::kFetchAdd}) {
        h.reconnect(h.no_access(), IBV_QPS_RTR, 0);
        wire::PacketHeaders hdr = rc_request(op, h.no_access().qpn, kPsn);
        hdr.reth = {h.region_va(), h.rkey(), 16};
        hdr.atomic_eth = {h.region_va(), h.rkey(), 1, 0};
        h.send(hdr, op == Operation::kWriteOnly ? pattern(16, 21) : Bytes{});
        EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " nak-invalid-request")})
            << "operation " << static_cast<int>(op);
        EXPECT_EQ(h.state(h.no_access()), IBV_QPS_ERR);
        EXPECT_TRUE(region_untouched());
    }
}

// ---- Message sequence and receive buffer checks ------------------------------

TEST_F(ReceivePathTest, SendLargerThanTheReceiveBufferIsNakedAndCompletesWithALengthError) {
    h.post_recv(h.rtr(), 41, 512, 16);
    h.inject(send_only(kPsn, pattern(32, 22)));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " nak-invalid-request")});
    const auto wcs = h.poll_cq();
    ASSERT_FALSE(wcs.empty());
    EXPECT_EQ(wcs[0].wr_id, 41u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_ERR);
    EXPECT_TRUE(has_event(h.async_events(), IBV_EVENT_QP_REQ_ERR));
    EXPECT_TRUE(region_untouched(0, 512));
    EXPECT_TRUE(region_untouched(528, H::kRegionBytes - 528));
}

TEST_F(ReceivePathTest, MultiPacketSendOverflowingTheReceiveBufferStopsAtItsEnd) {
    h.post_recv(h.rtr(), 42, 1024, 300);
    const uint32_t qpn = h.rtr().qpn;
    h.send(rc_request(Operation::kSendFirst, qpn, kPsn), pattern(H::kMtuBytes, 23));
    h.send(rc_request(Operation::kSendLast, qpn, kPsn + 1), pattern(H::kMtuBytes, 24));
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " ack"),
                                hex_psn("RC_ACKNOWLEDGE", kPsn + 1, " nak-invalid-request")}));
    const auto wcs = h.poll_cq();
    ASSERT_FALSE(wcs.empty());
    EXPECT_EQ(wcs[0].wr_id, 42u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
    EXPECT_TRUE(region_untouched(0, 1024));
    EXPECT_TRUE(region_untouched(1324, H::kRegionBytes - 1324));
}

class WithoutFirstTest : public ReceivePathTest, public ::testing::WithParamInterface<Operation> {};

TEST_P(WithoutFirstTest, IsNakedAsAnInvalidRequest) {
    h.post_recv(h.rtr(), 43, 0, 256);
    wire::PacketHeaders hdr = rc_request(GetParam(), h.rtr().qpn, kPsn);
    h.send(hdr, pattern(16, 25));
    EXPECT_EQ(answers(), Lines{hex_psn("RC_ACKNOWLEDGE", kPsn, " nak-invalid-request")});
    EXPECT_EQ(h.state(h.rtr()), IBV_QPS_ERR);
    EXPECT_TRUE(has_event(h.async_events(), IBV_EVENT_QP_REQ_ERR));
    EXPECT_TRUE(region_untouched());
}

std::string operation_name(const ::testing::TestParamInfo<Operation>& param) {
    std::string name = wire::opcode_info(static_cast<uint8_t>(param.param))->name;
    name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
    return name;
}

INSTANTIATE_TEST_SUITE_P(Operations, WithoutFirstTest,
                         ::testing::Values(Operation::kSendMiddle, Operation::kSendLast,
                                           Operation::kSendLastImm, Operation::kSendLastInv,
                                           Operation::kWriteMiddle, Operation::kWriteLast,
                                           Operation::kWriteLastImm),
                         operation_name);

// ---- UDP source ports -----------------------------------------------------------

// Each QP's packets leave from a source port of its own (as rxe's), which the
// ICRC covers: the answers of two QPs come from the ports their numbers
// choose, and verify against them.
TEST_F(ReceivePathTest, EachQpSendsFromItsOwnSourcePort) {
    h.post_recv(h.rtr(), 7, 0, 64);
    h.inject(send_only(kPsn, pattern(40, 1)));
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_SEND;
    h.post_send(h.rts(), wqe, 0, 16);
    const auto sent = h.answers();
    ASSERT_EQ(sent.size(), 2u);
    for (const Answer& a : sent) {
        EXPECT_EQ(a.error, wire::ParseError::kOk);
        EXPECT_GE(a.src_port, wire::kSourcePortBase);
        EXPECT_LT(a.src_port, wire::kSourcePortBase + wire::kSourcePorts);
    }
    const uint16_t ack_port = wire::roce_source_port(h.rtr().qpn);
    const uint16_t send_port = wire::roce_source_port(h.rts().qpn);
    EXPECT_EQ(sent[0].operation() == Operation::kAck ? sent[0].src_port : sent[1].src_port,
              ack_port);
    EXPECT_EQ(sent[0].operation() == Operation::kAck ? sent[1].src_port : sent[0].src_port,
              send_port);
}

// ---- Messages carried in their completion --------------------------------------

// A one-packet SEND that fits in a CQE reaches the receive buffer through
// its completion: the daemon writes nothing into the process, the poller
// copies it (as the provider does) before reporting the completion. A
// larger one, or one split over the receive's gather list, is written.
TEST_F(ReceivePathTest, SmallSendsTravelInTheirCompletion) {
    const size_t most = queues::kCqeDataBytes;
    h.post_recv(h.rtr(), 1, 0, 512);
    h.inject(send_only(kPsn, pattern(most, 1)));
    EXPECT_TRUE(region_untouched()) << "written before the completion was polled";
    auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[0].byte_len, most);
    EXPECT_EQ(region_bytes(0, most), pattern(most, 1));
    EXPECT_TRUE(region_untouched(most, H::kRegionBytes - most));

    h.post_recv(h.rtr(), 2, 1024, 512);
    h.inject(send_only(kPsn + 1, pattern(most + 1, 2)));
    EXPECT_EQ(region_bytes(1024, most + 1), pattern(most + 1, 2)) << "one byte more: written";
    ASSERT_EQ(h.poll_cq().size(), 1u);
}

// ---- Messages the provider copied when posting --------------------------------

// A small message copied after the gather list is what the request carries.
TEST_F(ReceivePathTest, PrefetchedMessagesAreSent) {
    const std::vector<uint8_t> copied = pattern(16, 31);  // not the region's bytes
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_SEND;
    wqe.send_flags = IBV_SEND_SIGNALED;
    wqe.inline_length = 16;
    h.post_send(h.rts(), wqe, 0, 16, copied);
    h.settle();
    const auto sent = h.answers();
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].operation(), Operation::kSendOnly);
    EXPECT_EQ(std::vector<uint8_t>(sent[0].packet.payload.begin(), sent[0].packet.payload.end()),
              copied);
}

// A copy the provider could not have made fails the WQE locally; nothing is sent.
class ForgedPrefetchTest : public ReceivePathTest,
                           public ::testing::WithParamInterface<std::pair<uint32_t, uint32_t>> {};

TEST_P(ForgedPrefetchTest, FailsLocally) {
    const auto [copied, length] = GetParam();
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_SEND;
    wqe.inline_length = copied;
    h.post_send(h.rts(), wqe, 0, length, pattern(copied, 32));
    h.settle();
    EXPECT_TRUE(h.answers().empty());
    const std::vector<ibv_wc> wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_QP_OP_ERR) << ibv_wc_status_str(wcs[0].status);
}

INSTANTIATE_TEST_SUITE_P(Copies, ForgedPrefetchTest,
                         ::testing::Values(std::pair{8u, 16u},  // less than the message
                                           std::pair{uint32_t{queues::kPrefetchBytes} + 1,
                                                     uint32_t{queues::kPrefetchBytes} +
                                                         1}),  // more than allowed
                         [](const auto& test) {
                             return "Copied" + std::to_string(test.param.first) + "Of" +
                                    std::to_string(test.param.second);
                         });

TEST(wireSourcePort, SpreadsQpNumbersOverItsPorts) {
    std::set<uint16_t> ports;
    for (uint32_t qpn = 0x11; qpn < 0x11 + 64; ++qpn) {
        const uint16_t port = wire::roce_source_port(qpn);
        EXPECT_GE(port, 0xC000) << "RoCE's recommended range";
        EXPECT_GE(port, 61000) << "above Linux's ephemeral ports";
        ports.insert(port);
    }
    EXPECT_GE(ports.size(), 48u) << "64 consecutive QPs share few ports";
}

// ---- Responses the requester never asked for ----------------------------------

TEST_F(ReceivePathTest, ResponsesForPsnsNeverSentAreIgnoredAndCounted) {
    const uint32_t qpn = h.rts().qpn;
    const uint32_t next = H::kSqPsn;  // nothing sent yet: every PSN from here is unsent
    wire::PacketHeaders ack = rc_request(Operation::kAck, qpn, next + 3);
    ack.aeth = wire::Aeth::ack(0);
    h.send(ack);
    ack.bth.psn = next;
    h.send(ack);
    wire::PacketHeaders read = rc_request(Operation::kReadResponseOnly, qpn, next);
    read.aeth = wire::Aeth::ack(0);
    h.send(read, pattern(16, 26));
    wire::PacketHeaders atomic = rc_request(Operation::kAtomicAck, qpn, next + 1);
    atomic.aeth = wire::Aeth::ack(0);
    atomic.atomic_ack_eth.original = 77;
    h.send(atomic);
    wire::PacketHeaders nak = rc_request(Operation::kAck, qpn, next + 100);
    nak.aeth = wire::Aeth::nak(0, NakCode::kRemoteAccessError);
    h.send(nak);
    nak.aeth = wire::Aeth::rnr_nak(0, 1);
    nak.bth.psn = next + 7;
    h.send(nak);
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 6}, {"rcvd_unsent_psn", 6}}));
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_RTS);
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(answers(), Lines{});
    EXPECT_TRUE(region_untouched());
}

// The requester assigns a message's PSNs when it starts it, but its packets
// leave only as the 128-PSN window opens. An ACK for a PSN that has not
// left cannot come from the responder: it must not complete data that was
// never sent (a forged "ghost" ACK from the peer's address).
TEST_F(ReceivePathTest, AcknowledgementOfPsnsNotYetSentCompletesNothing) {
    constexpr uint32_t kFirst = H::kSqPsn;
    queues::SendWqe wqe{};
    wqe.opcode = IBV_WR_RDMA_WRITE;
    wqe.send_flags = IBV_SEND_SIGNALED;
    wqe.remote_addr = 0x10000;
    wqe.rkey = 0x1234;
    // 32, 64 and 64 packets: the third message starts at PSN 96 and only
    // 96..127 leave before the window closes.
    const uint32_t lengths[] = {32 * H::kMtuBytes, 64 * H::kMtuBytes, 64 * H::kMtuBytes};
    for (uint64_t i = 0; i < 3; ++i) {
        wqe.wr_id = i + 1;
        h.post_send(h.rts(), wqe, 0, lengths[i]);
    }
    h.settle();
    const auto sent = h.answers();
    ASSERT_EQ(sent.size(), 128u);
    EXPECT_EQ(sent.back().psn(), kFirst + 127);
    mark();

    wire::PacketHeaders ack = rc_request(Operation::kAck, h.rts().qpn, kFirst + 159);
    ack.aeth = wire::Aeth::ack(3);
    h.send(ack);  // the third message's last PSN
    ack.bth.psn = kFirst + 128;
    h.send(ack);  // the first PSN not yet sent
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(answers(), Lines{}) << "the window did not move";
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"rcvd_unsent_psn", 2}}));
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_RTS);

    // The real acknowledgement of what left completes the first two, and
    // the rest of the third goes out.
    ack.bth.psn = kFirst + 127;
    h.send(ack);
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    const auto rest = h.answers();
    ASSERT_EQ(rest.size(), 32u);
    EXPECT_EQ(rest.front().psn(), kFirst + 128);
    EXPECT_EQ(rest.back().psn(), kFirst + 159);
    ack.bth.psn = kFirst + 159;
    h.send(ack);
    const auto last = h.poll_cq();
    ASSERT_EQ(last.size(), 1u);
    EXPECT_EQ(last[0].wr_id, 3u);
    EXPECT_EQ(last[0].status, IBV_WC_SUCCESS);
}

// A NAK whose PSN the requester has already seen acknowledged (here: the one
// before the first it ever sent) is stale and must not fail the QP (IBA
// vol.1 9.7: responses outside the outstanding PSN range are ignored; rxe's
// completer drops any response while no WQE is outstanding).
TEST_F(ReceivePathTest, StaleNakBeforeTheOutstandingRangeIsIgnored) {
    wire::PacketHeaders nak =
        rc_request(Operation::kAck, h.rts().qpn, wire::psn_add(H::kSqPsn, wire::kPsnMask));
    nak.aeth = wire::Aeth::nak(0, NakCode::kRemoteAccessError);
    h.send(nak);
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_RTS);
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 1}, {"duplicate_response", 1}}));
}

// ---- Responses to requests the RTS QP did send --------------------------------

// A PSN sequence NAK acknowledges every packet before its PSN (IBA vol.1
// 9.7.5.1.2). Each NAK that moves past what was acknowledged is progress: it
// sends the requester back at once, even while an earlier retransmission is
// under way, and renews the retry budget (retry_cnt is 3 here; four NAKs
// and a timeout's worth of silence would otherwise exhaust it).
TEST_F(ReceivePathTest, SequenceNaksThatAdvanceEachSendTheRequesterBackAtOnce) {
    constexpr uint32_t kFirst = H::kSqPsn;
    post_signaled_send(5, 5 * H::kMtuBytes);
    const auto sent_from = [](uint32_t psn) {
        Lines lines;
        for (uint32_t p = psn; p <= kFirst + 4; ++p) {
            const char* name = p == kFirst       ? "RC_SEND_FIRST"
                               : p == kFirst + 4 ? "RC_SEND_LAST"
                                                 : "RC_SEND_MIDDLE";
            lines.push_back(hex_psn(name, p, " len=256"));
        }
        return lines;
    };
    ASSERT_EQ(answers(), sent_from(kFirst));
    for (uint32_t psn = kFirst + 1; psn <= kFirst + 4; ++psn) {
        wire::PacketHeaders nak = rc_request(Operation::kAck, h.rts().qpn, psn);
        nak.aeth = wire::Aeth::nak(0, NakCode::kPsnSequenceError);
        h.send(nak);
        EXPECT_EQ(answers(), sent_from(psn)) << "after the NAK at " << psn - kFirst;
    }
    wire::PacketHeaders ack = rc_request(Operation::kAck, h.rts().qpn, kFirst + 4);
    ack.aeth = wire::Aeth::ack(1);
    h.send(ack);
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 5u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_RTS);
}

class OutstandingTest : public ReceivePathTest {
  protected:
    static constexpr uint32_t kFirst = H::kSqPsn;

    // Posts a READ (or fetch-and-add) into region [offset, offset + length)
    // and checks that its request went out.
    void post(uint64_t wr_id, ibv_wr_opcode opcode, size_t offset, uint32_t length) {
        queues::SendWqe wqe{};
        wqe.wr_id = wr_id;
        wqe.opcode = opcode;
        wqe.send_flags = IBV_SEND_SIGNALED;
        wqe.remote_addr = 0x10000;
        wqe.rkey = 0x1234;
        wqe.compare_add = 1;
        h.post_send(h.rts(), wqe, offset, length);
        h.settle();
        const char* request = opcode == IBV_WR_RDMA_READ ? "RC_RDMA_READ_REQUEST" : "RC_FETCH_ADD";
        ASSERT_EQ(answers(), Lines{hex_psn(request, kFirst)});
        mark();
    }

    void respond(Operation op, uint32_t psn, const Bytes& payload, uint64_t original = 0) {
        wire::PacketHeaders hdr = rc_request(op, h.rts().qpn, psn);
        hdr.aeth = wire::Aeth::ack(1);
        hdr.atomic_ack_eth.original = original;
        h.send(hdr, payload);
    }

    // No completion of wr_id succeeded.
    bool no_success(uint64_t wr_id) {
        for (const ibv_wc& wc : h.poll_cq()) {
            if (wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS) {
                return false;
            }
        }
        return true;
    }
};

// The acknowledgement a timer waits for may sit in the socket behind many
// other packets when the timer comes due: the engine reads them all before
// it lets the timer retransmit, so that a slow turn of its loop does not
// send again what was acknowledged.
TEST_F(ReceivePathTest, AcknowledgementsWaitingInTheSocketAreReadBeforeTimersFire) {
    constexpr uint32_t kFirst = H::kSqPsn;
    constexpr int kStale = UdpNetwork::kMaxReceivesPerPoll;
    post_signaled_send(9, 16);
    ASSERT_EQ(answers(), Lines{hex_psn("RC_SEND_ONLY", kFirst, " len=16")});
    mark();
    // timeout 14: 4.096 us * 2^14 = 67 ms; the timer is overdue after this.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    wire::PacketHeaders stale = rc_request(Operation::kAck, h.rts().qpn, kFirst - 1);
    stale.aeth = wire::Aeth::ack(0);
    for (int i = 0; i < kStale; ++i) {
        h.send_udp(h.build(stale));
    }
    wire::PacketHeaders ack = rc_request(Operation::kAck, h.rts().qpn, kFirst);
    ack.aeth = wire::Aeth::ack(1);
    h.send_udp(h.build(ack));
    // The kernel completes the engine's receives as this thread leaves it.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    h.settle();
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 9u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(answers(), Lines{}) << "nothing was sent again";
    EXPECT_EQ(
        moved(),
        (Counters{{"rcvd_pkts", kStale + 1}, {"duplicate_response", kStale}, {"completions", 1}}));
}

TEST_F(OutstandingTest, ReadResponsesOutsideTheReadsPsnsAreIgnored) {
    post(1, IBV_WR_RDMA_READ, 2048, 100);
    respond(Operation::kReadResponseOnly, kFirst + 1, pattern(100, 27));
    respond(Operation::kReadResponseOnly, wire::psn_add(kFirst, wire::kPsnMask), pattern(100, 27));
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_TRUE(region_untouched());
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_RTS);
    // The real response still completes the READ.
    respond(Operation::kReadResponseOnly, kFirst, pattern(100, 28));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(region_bytes(2048, 100), pattern(100, 28));
    EXPECT_TRUE(region_untouched(0, 2048));
    EXPECT_TRUE(region_untouched(2148, H::kRegionBytes - 2148));
}

// Every READ response but the last carries a full MTU and the last ends the
// message: a short one (forged, since the responder sends what was asked)
// neither completes the READ nor moves it on.
TEST_F(OutstandingTest, ShortReadResponsesAreIgnored) {
    post(1, IBV_WR_RDMA_READ, 2048, 2 * H::kMtuBytes + 10);
    respond(Operation::kReadResponseOnly, kFirst, pattern(10, 30));
    respond(Operation::kReadResponseFirst, kFirst, pattern(100, 30));
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 2}, {"rcvd_malformed", 2}}));
    respond(Operation::kReadResponseFirst, kFirst, pattern(H::kMtuBytes, 31));
    respond(Operation::kReadResponseMiddle, kFirst + 1, pattern(H::kMtuBytes, 32));
    respond(Operation::kReadResponseLast, kFirst + 2, pattern(9, 33));
    EXPECT_TRUE(h.poll_cq().empty()) << "one byte short";
    respond(Operation::kReadResponseLast, kFirst + 2, pattern(10, 33));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(region_bytes(2048 + 2 * H::kMtuBytes, 10), pattern(10, 33));
}

// An acknowledgement coalesced past a READ says its response was lost (the
// responder executed it): the READ is asked for again, and nothing behind it
// completes before it is answered (IBA 9.7.5.1.5).
TEST_F(OutstandingTest, AcknowledgementPastAnUnansweredReadAsksForItAgain) {
    post(1, IBV_WR_RDMA_READ, 2048, 100);
    post_signaled_send(2, 16);
    ASSERT_EQ(answers(), Lines{hex_psn("RC_SEND_ONLY", kFirst + 1, " len=16")});
    mark();
    wire::PacketHeaders ack = rc_request(Operation::kAck, h.rts().qpn, kFirst + 1);
    ack.aeth = wire::Aeth::ack(1);
    h.send(ack);
    EXPECT_TRUE(h.poll_cq().empty()) << "the SEND completes after the READ";
    // Go back N: from the READ on.
    EXPECT_EQ(answers(), (Lines{hex_psn("RC_RDMA_READ_REQUEST", kFirst),
                                hex_psn("RC_SEND_ONLY", kFirst + 1, " len=16")}));
    respond(Operation::kReadResponseOnly, kFirst, pattern(100, 40));
    auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(region_bytes(2048, 100), pattern(100, 40));
    h.send(ack);
    wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 2u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

TEST_F(OutstandingTest, ReadResponseLongerThanTheReadWritesNothingPastItsBuffer) {
    post(1, IBV_WR_RDMA_READ, 2048, 100);
    respond(Operation::kReadResponseOnly, kFirst, pattern(200, 29));
    EXPECT_TRUE(region_untouched(0, 2048));
    EXPECT_TRUE(region_untouched(2148, H::kRegionBytes - 2148));
    const auto wcs = h.poll_cq();
    ASSERT_FALSE(wcs.empty());
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(h.state(h.rts()), IBV_QPS_ERR);
}

// A response must be of the kind its request asks for (an unexpected opcode
// is an invalid response; rxe's check_ack() fails the WQE):
// an atomic acknowledgement cannot complete a READ, nor READ data an atomic.
TEST_F(OutstandingTest, AtomicAcknowledgementDoesNotAnswerARead) {
    post(1, IBV_WR_RDMA_READ, 2048, 8);  // as long as an atomic's result
    respond(Operation::kAtomicAck, kFirst, {}, 0x4141414141414141);
    EXPECT_TRUE(region_untouched());
    EXPECT_TRUE(no_success(1));
}

TEST_F(OutstandingTest, ReadResponseDoesNotAnswerAnAtomic) {
    post(2, IBV_WR_ATOMIC_FETCH_AND_ADD, 3072, 8);
    respond(Operation::kReadResponseOnly, kFirst, pattern(8, 30));
    EXPECT_TRUE(region_untouched());
    EXPECT_TRUE(no_success(2));
}

// ---- UC: no answers, and a gap loses only the message it falls in ---------

wire::PacketHeaders uc_request(Operation op, uint32_t qpn, uint32_t psn) {
    wire::PacketHeaders hdr = rc_request(op, qpn, psn);
    hdr.bth.opcode = wire::make_opcode(wire::Service::kUc, op);
    return hdr;
}

TEST_F(ReceivePathTest, UcGapDropsTheRestOfTheMessageAndTheNextOneReusesItsReceive) {
    const uint32_t qpn = h.uc().qpn;
    h.post_recv(h.uc(), 5, 0, 1024);
    h.send(uc_request(Operation::kSendFirst, qpn, kPsn), pattern(H::kMtuBytes, 1));
    h.send(uc_request(Operation::kSendMiddle, qpn, kPsn + 2), pattern(H::kMtuBytes, 2));
    h.send(uc_request(Operation::kSendLast, qpn, kPsn + 3), pattern(10, 3));
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(moved(),
              (Counters{{"rcvd_pkts", 3}, {"out_of_seq_request", 1}, {"rcvd_msg_dropped", 1}}));
    // The next message starts wherever the sender has got to, and fills the
    // receive WQE the lost one had taken.
    h.send(uc_request(Operation::kSendOnly, qpn, kPsn + 9), pattern(20, 4));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 5u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[0].byte_len, 20u);
    EXPECT_EQ(region_bytes(0, 20), pattern(20, 4));
    EXPECT_EQ(answers(), Lines{});  // UC acknowledges nothing, even when asked
}

TEST_F(ReceivePathTest, UcMessageWhoseLastPacketIsLostGivesWayToTheNextFirst) {
    const uint32_t qpn = h.uc().qpn;
    wire::PacketHeaders first = uc_request(Operation::kWriteFirst, qpn, kPsn);
    first.reth = {h.region_va(), h.rkey(), 2 * H::kMtuBytes};
    h.send(first, pattern(H::kMtuBytes, 5));
    wire::PacketHeaders only = uc_request(Operation::kWriteOnly, qpn, kPsn + 2);
    only.reth = {h.region_va() + 4096, h.rkey(), 16};
    h.send(only, pattern(16, 6));
    EXPECT_EQ(region_bytes(4096, 16), pattern(16, 6));
    EXPECT_EQ(value(moved(), "rcvd_msg_dropped"), 1u);
    EXPECT_EQ(answers(), Lines{});
    EXPECT_EQ(h.state(h.uc()), IBV_QPS_RTR);
}

TEST_F(ReceivePathTest, UcSendWithoutAReceiveIsDroppedNotNaked) {
    const uint32_t qpn = h.uc().qpn;
    h.send(uc_request(Operation::kSendFirst, qpn, kPsn), pattern(H::kMtuBytes, 1));
    h.send(uc_request(Operation::kSendLast, qpn, kPsn + 1), pattern(8, 1));
    EXPECT_EQ(answers(), Lines{});
    EXPECT_EQ(value(moved(), "rcvd_msg_dropped"), 1u);
    h.post_recv(h.uc(), 6, 0, 64);
    h.send(uc_request(Operation::kSendOnly, qpn, kPsn + 2), pattern(8, 2));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 6u);
    EXPECT_EQ(wcs[0].byte_len, 8u);
}

// ---- UD: Q_Key, GRH, and a receive that is too small ------------------------

wire::PacketHeaders ud_send(uint32_t qpn, uint32_t qkey) {
    wire::PacketHeaders hdr{};
    hdr.bth.opcode = wire::make_opcode(wire::Service::kUd, Operation::kSendOnly);
    hdr.bth.dest_qp = qpn;
    hdr.deth = {qkey, H::kForgerQpn};
    return hdr;
}

TEST_F(ReceivePathTest, UdDatagramIsPlacedAfterAGrhThatNamesTheSender) {
    h.post_recv(h.ud(), 8, 0, 40 + 64);
    h.send(ud_send(h.ud().qpn, H::kQkey), pattern(64, 7));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[0].byte_len, 40u + 64);
    EXPECT_EQ(wcs[0].src_qp, H::kForgerQpn);
    EXPECT_EQ(wcs[0].wc_flags, unsigned{IBV_WC_GRH});
    EXPECT_EQ(region_bytes(40, 64), pattern(64, 7));
    const uint32_t forger = loopback(H::kForgerHost);
    EXPECT_EQ(memcmp(h.region() + 20 + 12, &forger, 4), 0);  // the IPv4 source
    EXPECT_EQ(answers(), Lines{});
}

TEST_F(ReceivePathTest, UdDatagramsTravelInTheirCompletionWithTheirGrh) {
    h.post_recv(h.ud(), 8, 0, 40 + 64);
    h.send(ud_send(h.ud().qpn, H::kQkey), pattern(64, 7));
    EXPECT_TRUE(region_untouched()) << "written before the completion was polled";
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].byte_len, 40u + 64);
    EXPECT_EQ(region_bytes(40, 64), pattern(64, 7));
    const uint32_t forger = loopback(H::kForgerHost);
    EXPECT_EQ(memcmp(h.region() + 20 + 12, &forger, 4), 0);  // the IPv4 source
}

TEST_F(ReceivePathTest, UdWrongQkeyIsDroppedBeforeItTakesAReceive) {
    h.post_recv(h.ud(), 8, 0, 40 + 64);
    h.send(ud_send(h.ud().qpn, H::kQkey ^ 1), pattern(64, 7));
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 1}, {"rcvd_qkey_err", 1}}));
    EXPECT_TRUE(region_untouched());
    h.send(ud_send(h.ud().qpn, H::kQkey), pattern(8, 7));
    EXPECT_EQ(h.poll_cq().size(), 1u);
}

// rxe's check_keys: a P_Key outside the default partition is dropped, on
// every QP and on QP1, and counted (in the port's bad_pkey_cntr too); a
// datagram to QP1 without the GSI Q_Key is a Q_Key violation.
TEST_F(ReceivePathTest, KeysAreCheckedOnEveryQpAndOnQp1) {
    h.post_recv(h.ud(), 8, 0, 40 + 64);
    for (uint16_t pkey : {uint16_t{0x8001}, uint16_t{0x1234}, uint16_t{0}}) {
        wire::PacketHeaders ud = ud_send(h.ud().qpn, H::kQkey);
        ud.bth.pkey = pkey;
        h.send(ud, pattern(8, 7));
        wire::PacketHeaders gsi = ud_send(wire::kGsiQpn, wire::kGsiQkey);
        gsi.bth.pkey = pkey;
        h.send(gsi, Bytes(256, 0));
    }
    EXPECT_TRUE(h.poll_cq().empty());
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 6}, {"rcvd_pkey_err", 6}}));
    mark();
    h.send(ud_send(wire::kGsiQpn, wire::kGsiQkey ^ 1), Bytes(256, 0));
    EXPECT_EQ(moved(), (Counters{{"rcvd_pkts", 1}, {"rcvd_qkey_err", 1}}));
    const ibv_port_attr& port = h.device().port_attr();
    EXPECT_EQ(port.bad_pkey_cntr, 6);
    EXPECT_EQ(port.qkey_viol_cntr, 1);
    // A limited member of the default partition (0x7fff) is one of it.
    wire::PacketHeaders limited = ud_send(h.ud().qpn, H::kQkey);
    limited.bth.pkey = 0x7fff;
    h.send(limited, pattern(8, 7));
    EXPECT_EQ(h.poll_cq().size(), 1u);
}

TEST_F(ReceivePathTest, UdReceiveTooSmallForGrhAndPayloadFailsWithoutWriting) {
    h.post_recv(h.ud(), 8, 0, 40 + 63);
    h.send(ud_send(h.ud().qpn, H::kQkey), pattern(64, 7));
    const auto wcs = h.poll_cq();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
    EXPECT_TRUE(region_untouched());
    EXPECT_EQ(h.state(h.ud()), IBV_QPS_RTR);
}

}  // namespace
}  // namespace uroce::test
