#include "wire/packet.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace uroce::wire {
namespace {

using Bytes = std::vector<uint8_t>;

const IcrcAddresses kAddr = IcrcAddresses::v4({10, 1, 2, 3}, {10, 1, 2, 4}, 0xd00d);

std::vector<uint8_t> known_opcodes() {
    std::vector<uint8_t> ops;
    for (int op = 0; op < 256; ++op) {
        if (opcode_info(static_cast<uint8_t>(op)) != nullptr) {
            ops.push_back(static_cast<uint8_t>(op));
        }
    }
    return ops;
}

size_t expected_pad(size_t payload) {
    return payload % 4 == 0 ? 0 : 4 - payload % 4;
}

PacketHeaders random_headers(uint8_t opcode, std::mt19937_64& rng) {
    auto u32 = [&] { return static_cast<uint32_t>(rng()); };
    auto u24 = [&] { return static_cast<uint32_t>(rng() & 0xffffff); };
    auto bit = [&] { return (rng() & 1) != 0; };
    PacketHeaders h;
    h.bth.opcode = opcode;
    h.bth.solicited = bit();
    h.bth.migreq = bit();
    h.bth.pad = static_cast<uint8_t>(rng() & 3);  // the builder replaces it
    h.bth.pkey = static_cast<uint16_t>(rng());
    h.bth.fecn = bit();
    h.bth.becn = bit();
    h.bth.dest_qp = u24();
    h.bth.ack_req = bit();
    h.bth.psn = u24();
    h.deth = {u32(), u24()};
    h.xrceth = {u24()};
    h.reth = {rng(), u32(), u32()};
    h.feth = {static_cast<uint8_t>(rng() & 0xf), static_cast<uint8_t>(rng() & 3)};
    h.atomic_eth = {rng(), u32(), rng(), rng()};
    h.aeth = {static_cast<uint8_t>(rng()), u24()};
    h.atomic_ack_eth = {rng()};
    h.immdt = {u32()};
    h.ieth = {u32()};
    return h;
}

void expect_header_equal(ExtHeader h, const PacketHeaders& a, const PacketHeaders& b) {
    SCOPED_TRACE(ext_header_name(h));
    switch (h) {
        case ExtHeader::kDeth:
            EXPECT_EQ(a.deth, b.deth);
            break;
        case ExtHeader::kXrceth:
            EXPECT_EQ(a.xrceth, b.xrceth);
            break;
        case ExtHeader::kReth:
            EXPECT_EQ(a.reth, b.reth);
            break;
        case ExtHeader::kFeth:
            EXPECT_EQ(a.feth, b.feth);
            break;
        case ExtHeader::kAtomicEth:
            EXPECT_EQ(a.atomic_eth, b.atomic_eth);
            break;
        case ExtHeader::kAeth:
            EXPECT_EQ(a.aeth, b.aeth);
            break;
        case ExtHeader::kAtomicAckEth:
            EXPECT_EQ(a.atomic_ack_eth, b.atomic_ack_eth);
            break;
        case ExtHeader::kImmDt:
            EXPECT_EQ(a.immdt, b.immdt);
            break;
        case ExtHeader::kIeth:
            EXPECT_EQ(a.ieth, b.ieth);
            break;
        case ExtHeader::kCnpReserved:
            break;
    }
}

Bytes random_payload(size_t n, std::mt19937_64& rng) {
    Bytes p(n);
    for (uint8_t& b : p) {
        b = static_cast<uint8_t>(rng());
    }
    return p;
}

// Builds a valid packet into a vector of exactly its size.
Bytes build(const PacketHeaders& h, const Bytes& payload, const IcrcAddresses& addr = kAddr) {
    Bytes buf(70000);
    const BuildResult r = build_packet(h, payload, addr, buf);
    EXPECT_EQ(r.error, BuildError::kOk) << build_error_text(r.error);
    buf.resize(r.size);
    return buf;
}

TEST(wirePacket, RoundTripEveryOpcodeAndPayloadSize) {
    std::mt19937_64 rng(42);
    const std::vector<uint8_t> ops = known_opcodes();
    ASSERT_EQ(ops.size(), 63u);
    for (uint8_t op : ops) {
        const OpcodeInfo& info = *opcode_info(op);
        for (size_t n : {0, 1, 2, 3, 4, 5, 255, 256, 1024}) {
            SCOPED_TRACE(std::string(info.name) + " payload " + std::to_string(n));
            const PacketHeaders h = random_headers(op, rng);
            const Bytes payload = random_payload(n, rng);
            Bytes buf(2000, 0xee);
            const BuildResult r = build_packet(h, payload, kAddr, buf);
            if (!info.payload && n > 0) {
                EXPECT_EQ(r.error, BuildError::kUnexpectedPayload);
                continue;
            }
            ASSERT_EQ(r.error, BuildError::kOk);
            const size_t pad = expected_pad(n);
            ASSERT_EQ(r.size, info.header_bytes + n + pad + 4);
            EXPECT_EQ(r.size, packet_size(info, n));
            EXPECT_EQ(r.size % 4, 0u);
            EXPECT_EQ(buf[r.size], 0xee) << "wrote past the packet";
            EXPECT_EQ((buf[1] >> 4) & 3, static_cast<int>(pad));
            for (size_t i = 0; i < pad; ++i) {
                EXPECT_EQ(buf[info.header_bytes + n + i], 0) << "pad byte " << i;
            }

            const Bytes wire(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(r.size));
            ParsedPacket p;
            ASSERT_EQ(parse_packet(wire, kAddr, p), ParseError::kOk);
            EXPECT_EQ(p.info, &info);
            Bth expected_bth = h.bth;
            expected_bth.pad = static_cast<uint8_t>(pad);
            EXPECT_EQ(p.hdr.bth, expected_bth);
            for (size_t i = 0; i < info.header_count; ++i) {
                expect_header_equal(info.headers[i], h, p.hdr);
            }
            EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), payload);
            EXPECT_EQ(p.payload.data(), wire.data() + info.header_bytes);
        }
    }
}

TEST(wirePacket, HandCheckedBytes) {
    PacketHeaders h;
    h.bth.opcode = 0x0b;  // RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
    h.bth.solicited = true;
    h.bth.dest_qp = 0x12;
    h.bth.ack_req = true;
    h.bth.psn = 0x100;
    h.reth = {0x1000, 0x42, 3};
    h.immdt = {0x01020304};
    const Bytes wire = build(h, {'a', 'b', 'c'});
    const Bytes expected_headers_and_data = {
        0x0b, 0x90, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x01, 0x00,  // BTH, pad 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,                          // RETH va
        0x00, 0x00, 0x00, 0x42, 0x00, 0x00, 0x00, 0x03,                          // rkey, length
        0x01, 0x02, 0x03, 0x04,                                                  // ImmDt
        'a',  'b',  'c',  0x00};
    ASSERT_EQ(wire.size(), expected_headers_and_data.size() + 4);
    EXPECT_EQ(Bytes(wire.begin(), wire.end() - 4), expected_headers_and_data);
}

TEST(wirePacket, TruncatedAtEveryLength) {
    std::mt19937_64 rng(3);
    for (uint8_t op : known_opcodes()) {
        const OpcodeInfo& info = *opcode_info(op);
        const size_t n = info.payload ? 5 : 0;  // pad 3 when there is data
        const Bytes full = build(random_headers(op, rng), random_payload(n, rng));
        for (size_t len = 0; len < full.size(); ++len) {
            SCOPED_TRACE(std::string(info.name) + " truncated to " + std::to_string(len));
            // An exact-size copy, so that a sanitizer build catches over-reads.
            const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
            ParseError expected;
            if (len < 12) {
                expected = ParseError::kTooShortForBth;
            } else if (len < info.header_bytes + 4u) {
                expected = ParseError::kTooShortForHeaders;
            } else {
                const size_t data_and_pad = len - info.header_bytes - 4;
                expected = (data_and_pad % 4 != 0 || data_and_pad < 3)
                               ? ParseError::kPadInconsistent
                               : ParseError::kIcrcMismatch;  // the last 4 bytes are not the ICRC
            }
            ParsedPacket p;
            EXPECT_EQ(parse_packet(cut, kAddr, p), expected);
            if (expected != ParseError::kIcrcMismatch) {
                EXPECT_EQ(parse_headers(cut, p), expected);
            }
        }
    }
}

Bytes send_only(size_t payload_bytes) {
    PacketHeaders h;
    h.bth.opcode = 0x04;  // RC_SEND_ONLY
    return build(h, Bytes(payload_bytes, 0x5a));
}

// Rewrites the ICRC after a deliberate change, so only the change is wrong.
void reseal(Bytes& wire) {
    const std::span<uint8_t> s(wire);
    store_icrc(icrc(kAddr, s.first(s.size() - 4)), s.last<4>());
}

TEST(wirePacket, UnknownOpcode) {
    for (uint8_t op : {0x15, 0x40, 0x4c, 0x80, 0xb5, 0xc0, 0xff}) {
        Bytes wire = send_only(8);
        wire[0] = op;
        reseal(wire);
        ParsedPacket p;
        EXPECT_EQ(parse_packet(wire, kAddr, p), ParseError::kUnknownOpcode) << int{op};
    }
    const Bytes bth_only = {0x15, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0};
    ParsedPacket p;
    EXPECT_EQ(parse_headers(bth_only, p), ParseError::kUnknownOpcode);
}

TEST(wirePacket, BadTransportVersion) {
    for (uint8_t tver = 1; tver < 16; ++tver) {
        Bytes wire = send_only(8);
        wire[1] |= tver;
        reseal(wire);
        ParsedPacket p;
        EXPECT_EQ(parse_packet(wire, kAddr, p), ParseError::kBadTransportVersion) << int{tver};
    }
}

TEST(wirePacket, PadInconsistent) {
    ParsedPacket p;
    for (uint8_t pad = 1; pad < 4; ++pad) {
        Bytes wire = send_only(0);  // pad larger than an empty payload
        wire[1] = static_cast<uint8_t>(pad << 4);
        reseal(wire);
        EXPECT_EQ(parse_packet(wire, kAddr, p), ParseError::kPadInconsistent) << int{pad};
    }
    for (size_t extra = 1; extra < 4; ++extra) {
        Bytes wire = send_only(4);  // payload plus pad no longer a multiple of 4
        wire.insert(wire.end() - 4, extra, 0);
        reseal(wire);
        EXPECT_EQ(parse_packet(wire, kAddr, p), ParseError::kPadInconsistent) << extra;
    }
    Bytes wire = send_only(4);
    wire[1] = 3 << 4;  // legal: a 1-byte payload and 3 pad bytes
    reseal(wire);
    ASSERT_EQ(parse_packet(wire, kAddr, p), ParseError::kOk);
    EXPECT_EQ(p.payload.size(), 1u);
}

TEST(wirePacket, PayloadOnAnOpcodeWithoutPayload) {
    for (uint8_t op : {0x11, 0x12, 0x13, 0x0c, 0x1c, 0x81}) {
        PacketHeaders h;
        h.bth.opcode = op;
        for (size_t extra : {1, 4, 8}) {
            Bytes wire = build(h, {});
            wire.insert(wire.end() - 4, extra, 0);
            reseal(wire);
            ParsedPacket p;
            EXPECT_EQ(parse_packet(wire, kAddr, p), ParseError::kUnexpectedPayload)
                << int{op} << " + " << extra;
        }
    }
}

TEST(wirePacket, AnySingleBitFlipIsRejectedExceptInTheMaskedByte) {
    std::mt19937_64 rng(5);
    for (uint8_t op : known_opcodes()) {
        const OpcodeInfo& info = *opcode_info(op);
        const Bytes good =
            build(random_headers(op, rng), random_payload(info.payload ? 7 : 0, rng));
        for (size_t bit = 0; bit < good.size() * 8; ++bit) {
            Bytes bad = good;
            bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
            ParsedPacket p;
            const ParseError e = parse_packet(bad, kAddr, p);
            if (bit / 8 == 4) {
                // FECN, BECN and resv6a: routers may change them.
                EXPECT_EQ(e, ParseError::kOk) << info.name << " bit " << bit;
            } else if (parse_headers(bad, p) == ParseError::kOk) {
                EXPECT_EQ(e, ParseError::kIcrcMismatch) << info.name << " bit " << bit;
            } else {
                EXPECT_NE(e, ParseError::kOk) << info.name << " bit " << bit;
            }
        }
    }
}

TEST(wirePacket, WrongAddressesFailTheIcrc) {
    const Bytes wire = send_only(16);
    ParsedPacket p;
    ASSERT_EQ(parse_packet(wire, kAddr, p), ParseError::kOk);
    IcrcAddresses other = kAddr;
    other.src_port ^= 0x100;
    EXPECT_EQ(parse_packet(wire, other, p), ParseError::kIcrcMismatch);
    EXPECT_EQ(parse_headers(wire, p), ParseError::kOk);  // the layout alone is fine
}

TEST(wirePacket, BuildErrors) {
    std::vector<uint8_t> buf(100);
    PacketHeaders h;
    h.bth.opcode = 0x15;
    EXPECT_EQ(build_packet(h, {}, kAddr, buf).error, BuildError::kUnknownOpcode);

    h.bth.opcode = 0x11;  // RC_ACKNOWLEDGE
    const Bytes one = {1};
    EXPECT_EQ(build_packet(h, one, kAddr, buf).error, BuildError::kUnexpectedPayload);

    h.bth.opcode = 0x04;  // RC_SEND_ONLY: 12 + 5 + 3 + 4 = 24 bytes
    const Bytes five(5, 9);
    EXPECT_EQ(build_packet(h, five, kAddr, std::span(buf).first(23)).error,
              BuildError::kBufferTooSmall);
    const BuildResult exact = build_packet(h, five, kAddr, std::span(buf).first(24));
    EXPECT_EQ(exact.error, BuildError::kOk);
    EXPECT_EQ(exact.size, 24u);

    // An IPv4 UDP datagram holds at most 65507 bytes and packets are 4-byte
    // multiples, so 65504 bytes (a 65488-byte payload) is the largest.
    std::vector<uint8_t> big_buf(70000);
    const BuildResult largest = build_packet(h, Bytes(65488, 0), kAddr, big_buf);
    EXPECT_EQ(largest.error, BuildError::kOk);
    EXPECT_EQ(largest.size, 65504u);
    EXPECT_EQ(build_packet(h, Bytes(65489, 0), kAddr, big_buf).error, BuildError::kTooLarge);
}

TEST(wirePacket, ErrorTextsAreDistinct) {
    std::set<std::string> parse_texts;
    for (ParseError e : {ParseError::kOk, ParseError::kTooShortForBth, ParseError::kUnknownOpcode,
                         ParseError::kBadTransportVersion, ParseError::kTooShortForHeaders,
                         ParseError::kPadInconsistent, ParseError::kUnexpectedPayload,
                         ParseError::kIcrcMismatch}) {
        EXPECT_TRUE(parse_texts.insert(parse_error_text(e)).second) << parse_error_text(e);
    }
    std::set<std::string> build_texts;
    for (BuildError e :
         {BuildError::kOk, BuildError::kUnknownOpcode, BuildError::kUnexpectedPayload,
          BuildError::kTooLarge, BuildError::kBufferTooSmall}) {
        EXPECT_TRUE(build_texts.insert(build_error_text(e)).second) << build_error_text(e);
    }
}

}  // namespace
}  // namespace uroce::wire
