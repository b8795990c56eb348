#include "wire/icrc.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

#include "wire/crc32.h"
#include "wire/packet.h"

namespace uroce::wire {
namespace {

using Bytes = std::vector<uint8_t>;

// CRC-32 one bit at a time, straight from the reflected polynomial.
uint32_t reference_crc32(const Bytes& data) {
    uint32_t c = 0xffffffff;
    for (uint8_t b : data) {
        c ^= b;
        for (int i = 0; i < 8; ++i) {
            c = (c & 1) ? (c >> 1) ^ 0xedb88320 : c >> 1;
        }
    }
    return ~c;
}

Bytes text(std::string_view s) {
    return Bytes(s.begin(), s.end());
}

Bytes concat(std::initializer_list<Bytes> parts) {
    Bytes out;
    for (const Bytes& p : parts) {
        out.insert(out.end(), p.begin(), p.end());
    }
    return out;
}

Bytes wire_order(uint32_t icrc) {
    std::array<uint8_t, 4> out;
    store_icrc(icrc, out);
    return Bytes(out.begin(), out.end());
}

TEST(wireCrc32, KnownStrings) {
    // The CRC-32 check value and two common test strings.
    EXPECT_EQ(crc32(text("123456789")), 0xcbf43926u);
    EXPECT_EQ(crc32(text("")), 0x00000000u);
    EXPECT_EQ(crc32(text("The quick brown fox jumps over the lazy dog")), 0x414fa339u);
    EXPECT_EQ(reference_crc32(text("123456789")), 0xcbf43926u);
}

TEST(wireCrc32, TableDrivenMatchesBitwiseAtEveryLengthAndOffset) {
    std::mt19937 rng(1);
    Bytes buf(300);
    for (uint8_t& b : buf) {
        b = static_cast<uint8_t>(rng());
    }
    for (size_t start = 0; start < 8; ++start) {
        for (size_t len = 0; start + len <= buf.size(); len += 7) {
            const Bytes piece(buf.begin() + start, buf.begin() + start + len);
            ASSERT_EQ(crc32(piece), reference_crc32(piece)) << start << "+" << len;
        }
    }
}

TEST(wireCrc32, UnshiftUndoesZeroBytes) {
    std::mt19937 rng(3);
    for (size_t n : {0, 1, 2, 7, 8, 100, 1500, 4096, 9000, 65535}) {
        const uint32_t state = static_cast<uint32_t>(rng());
        EXPECT_EQ(crc32_unshift(crc32_update(state, Bytes(n, 0)), n), state) << n;
    }
}

TEST(wireCrc32, ShiftIsUpdatingOverZeroBytes) {
    std::mt19937 rng(4);
    for (size_t n : {0, 1, 2, 7, 8, 100, 1500, 4096, 9000, 65535}) {
        const uint32_t state = static_cast<uint32_t>(rng());
        EXPECT_EQ(crc32_shift(state, n), crc32_update(state, Bytes(n, 0))) << n;
        EXPECT_EQ(crc32_unshift(crc32_shift(state, n), n), state) << n;
    }
}

TEST(wireCrc32, TwoBytesAreFoundFromTheirContribution) {
    int reached = 0;
    for (uint32_t v = 0; v < 0x10000; ++v) {
        const Bytes b = {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
        const auto found = crc32_two_bytes_giving(crc32_update(0, b));
        ASSERT_TRUE(found) << v;
        EXPECT_EQ((*found)[0], b[0]);
        EXPECT_EQ((*found)[1], b[1]);
    }
    // Other values are refused: about one in 2^16 is reached by chance.
    std::mt19937 rng(5);
    for (int i = 0; i < 100000; ++i) {
        reached += crc32_two_bytes_giving(static_cast<uint32_t>(rng())).has_value();
    }
    EXPECT_LE(reached, 10);
}

TEST(wireCrc32, UpdatesChain) {
    const Bytes all = text("RoCEv2 carries InfiniBand transport packets over UDP");
    for (size_t cut = 0; cut <= all.size(); ++cut) {
        const std::span<const uint8_t> s(all);
        EXPECT_EQ(~crc32_update(crc32_update(~0u, s.first(cut)), s.subspan(cut)), crc32(all));
    }
}

TEST(wireIcrc, SeedIsTheCrcOfAMaskedLrh) {
    EXPECT_EQ(crc32_update(~0u, Bytes(8, 0xff)), kIcrcSeed);
    EXPECT_EQ(kIcrcSeed, 0xdebb20e3u);
}

// RC SEND ONLY from 192.168.1.10:0xc001 to 192.168.1.20:4791, FECN set,
// payload "hello" plus 3 pad bytes.
const Bytes kSendOnlyBth = {0x04, 0x30, 0xff, 0xff, 0x80, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2a};
const Bytes kHelloPadded = {'h', 'e', 'l', 'l', 'o', 0, 0, 0};

TEST(wireIcrc, HandAssembledIpv4Packet) {
    // The pseudo packet of Annex A17.4.1, written out: masked LRH, IPv4
    // header (TOS, TTL, checksum all ones; length 20+8+20+4; ID 0; DF), UDP
    // header (length 32, checksum all ones), BTH with byte 4 all ones, data.
    const Bytes pseudo = concat({
        Bytes(8, 0xff),
        {0x45, 0xff, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0xff, 0x11,
         0xff, 0xff, 192,  168,  1,    10,   192,  168,  1,    20},
        {0xc0, 0x01, 0x12, 0xb7, 0x00, 0x20, 0xff, 0xff},
        {0x04, 0x30, 0xff, 0xff, 0xff, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2a},
        kHelloPadded,
    });
    const uint32_t expected = reference_crc32(pseudo);

    const IcrcAddresses addr = IcrcAddresses::v4({192, 168, 1, 10}, {192, 168, 1, 20}, 0xc001);
    const Bytes udp_payload = concat({kSendOnlyBth, kHelloPadded});
    EXPECT_EQ(icrc(addr, udp_payload), expected);
}

TEST(wireIcrc, HandAssembledIpv6Packet) {
    const Bytes src = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
    const Bytes dst = {0xfe, 0x80, 0,    0,    0,    0,    0,    0,
                       0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
    // Version 6 then traffic class and flow label all ones, payload length
    // 32, next header UDP, hop limit all ones.
    const Bytes pseudo = concat({
        Bytes(8, 0xff),
        {0x6f, 0xff, 0xff, 0xff, 0x00, 0x20, 0x11, 0xff},
        src,
        dst,
        {0xc0, 0x01, 0x12, 0xb7, 0x00, 0x20, 0xff, 0xff},
        {0x04, 0x30, 0xff, 0xff, 0xff, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2a},
        kHelloPadded,
    });
    std::array<uint8_t, 16> s, d;
    std::copy(src.begin(), src.end(), s.begin());
    std::copy(dst.begin(), dst.end(), d.begin());
    const IcrcAddresses addr = IcrcAddresses::v6(s, d, 0xc001);
    EXPECT_EQ(icrc(addr, concat({kSendOnlyBth, kHelloPadded})), reference_crc32(pseudo));
}

// A CNP captured from a ConnectX-4 Lx, from scapy's test/contrib/roce.uts:
//   IPv4 45c2 003c 718c 4000 4011 9161 0a001101 0a001201
//   UDP  0000 12b7 0028 0000
//   BTH  8100ffff 40000118 00000000, 16 reserved zero bytes, ICRC 82fd002a
// It was sent with TOS 0xc2, TTL 64 and a real IP ID.
const Bytes kCnpUdpPayload = concat({
    {0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00},
    Bytes(16, 0),
    {0x82, 0xfd, 0x00, 0x2a},
});

IcrcAddresses cnp_addresses() {
    IcrcAddresses a = IcrcAddresses::v4({10, 0, 17, 1}, {10, 0, 18, 1}, 0);
    a.ipv4_id = 0x718c;
    return a;
}

TEST(wireIcrc, MatchesAConnectXCapture) {
    const std::span<const uint8_t> p(kCnpUdpPayload);
    const uint32_t value = icrc(cnp_addresses(), p.first(p.size() - 4));
    EXPECT_EQ(wire_order(value), (Bytes{0x82, 0xfd, 0x00, 0x2a}));
    // TOS, TTL and the IP checksum are not inputs at all, yet the hardware's
    // value comes out: the masking matches.

    ParsedPacket parsed;
    ASSERT_EQ(parse_packet(kCnpUdpPayload, cnp_addresses(), parsed), ParseError::kOk);
    EXPECT_EQ(parsed.info->name, std::string_view("CNP"));
    EXPECT_TRUE(parsed.hdr.bth.becn);
    EXPECT_EQ(parsed.hdr.bth.dest_qp, 0x118u);
    EXPECT_TRUE(parsed.payload.empty());
}

TEST(wireIcrc, TheIpIdIsCoveredAndRecovered) {
    // Under the IP ID 0 uroce assumes, the ICRC differs; verify_icrc()
    // solves for the ID the hardware really sent.
    IcrcAddresses a = cnp_addresses();
    a.ipv4_id = 0;
    const std::span<const uint8_t> p(kCnpUdpPayload);
    EXPECT_NE(wire_order(icrc(a, p.first(p.size() - 4))), (Bytes{0x82, 0xfd, 0x00, 0x2a}));
    EXPECT_EQ(verify_icrc(a, p.first(p.size() - 4), load_icrc(p.last<4>())), 0x718c);
    ParsedPacket parsed;
    EXPECT_EQ(parse_packet(kCnpUdpPayload, a, parsed), ParseError::kOk);
}

TEST(wireIcrc, RecoversEveryIpIdAtEveryLength) {
    std::mt19937 rng(7);
    for (size_t payload = 0; payload <= 4096; payload += 4 * (1 + rng() % 97)) {
        Bytes p = kSendOnlyBth;
        for (size_t i = 0; i < payload; ++i) {
            p.push_back(static_cast<uint8_t>(rng()));
        }
        for (int trial = 0; trial < 64; ++trial) {
            IcrcAddresses sent =
                IcrcAddresses::v4({10, 0, 0, 1}, {10, 0, 0, 2}, 0xc000 | (rng() & 0x3fff));
            sent.ipv4_id = static_cast<uint16_t>(rng());
            IcrcAddresses assumed = sent;
            assumed.ipv4_id = 0;
            ASSERT_EQ(verify_icrc(assumed, p, icrc(sent, p)), sent.ipv4_id) << payload;
        }
    }
}

// A packet of a segmented send leaves under the IP ID of its place in the
// train: its ICRC is moved from the one built for ID 0 to that ID's.
TEST(wireIcrc, TheIcrcMovesToAnotherIpId) {
    std::mt19937 rng(9);
    for (size_t payload : {0, 4, 64, 1024, 4096, 9000}) {
        Bytes p = kSendOnlyBth;
        for (size_t i = 0; i < payload; ++i) {
            p.push_back(static_cast<uint8_t>(rng()));
        }
        IcrcAddresses at_zero = IcrcAddresses::v4({127, 0, 0, 1}, {127, 0, 0, 2}, 0xf123);
        for (uint16_t id : {1, 2, 63, 0x1234, 0xffff}) {
            IcrcAddresses at_id = at_zero;
            at_id.ipv4_id = id;
            EXPECT_EQ(icrc_with_ipv4_id(icrc(at_zero, p), 0, id, p.size()), icrc(at_id, p))
                << payload << " " << id;
            EXPECT_EQ(icrc_with_ipv4_id(icrc(at_id, p), id, 0, p.size()), icrc(at_zero, p));
        }
    }
}

TEST(wireIcrc, CorruptionIsStillDetected) {
    // Every single-bit error and every byte error in a packet is caught,
    // whatever ID the sender used: the 16 check bits left are enough.
    Bytes p = concat({kSendOnlyBth, kHelloPadded, Bytes(64, 0x5a)});
    IcrcAddresses sent = IcrcAddresses::v4({192, 168, 1, 10}, {192, 168, 1, 20}, 0xc001);
    sent.ipv4_id = 0x1234;
    const uint32_t carried = icrc(sent, p);
    IcrcAddresses assumed = sent;
    assumed.ipv4_id = 0;
    for (size_t byte = 0; byte < p.size(); ++byte) {
        if (byte == 4) {
            continue;  // FECN, BECN, resv6a are not covered
        }
        for (int bit = 0; bit < 8; ++bit) {
            p[byte] ^= static_cast<uint8_t>(1 << bit);
            EXPECT_FALSE(verify_icrc(assumed, p, carried)) << byte << "." << bit;
            p[byte] ^= static_cast<uint8_t>(1 << bit);
        }
    }
    for (int bit = 0; bit < 32; ++bit) {
        EXPECT_FALSE(verify_icrc(assumed, p, carried ^ (1u << bit))) << bit;
    }
    // A wrong source address is not mistaken for another ID either.
    IcrcAddresses other = assumed;
    other.src[3] ^= 1;
    EXPECT_FALSE(verify_icrc(other, p, carried));
}

TEST(wireIcrc, Ipv6HasNoIdToSolveFor) {
    const Bytes p = concat({kSendOnlyBth, kHelloPadded});
    IcrcAddresses v6 = IcrcAddresses::v4({192, 168, 1, 10}, {192, 168, 1, 20}, 0xc001);
    v6.ipv6 = true;
    const uint32_t carried = icrc(v6, p);
    EXPECT_TRUE(verify_icrc(v6, p, carried));
    EXPECT_FALSE(verify_icrc(v6, p, carried ^ 1));
}

TEST(wireIcrc, MatchesScapysUcSendOnlyExample) {
    // scapy's roce.uts UC example (Mellanox MACs): 192.168.0.7 to itself, IP
    // ID 1144, DF, TOS 1, TTL 64, UDP 49152 -> 4791, UC_SEND_ONLY, MigReq,
    // pad 2, QP 211, PSN 13571856 (0xcf1710); scapy asserts ICRC 78f353f3.
    const Bytes udp_payload = concat({
        {0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10},
        {'F',  '0', 0x81, 0x8b, 0xe2, 0x89, '5', 0xd9, 0x0e, 0x9a,
         0x95, 'P', 'T',  0x01, 0xbe, 0x88, '^', 'P',  0x00, 0x00},
        {0x78, 0xf3, 0x53, 0xf3},
    });
    IcrcAddresses a = IcrcAddresses::v4({192, 168, 0, 7}, {192, 168, 0, 7}, 49152);
    a.ipv4_id = 1144;
    ParsedPacket parsed;
    ASSERT_EQ(parse_packet(udp_payload, a, parsed), ParseError::kOk);
    a.ipv4_id = 0;  // as a receiver that cannot see the IP header
    const std::span<const uint8_t> covered(udp_payload.data(), udp_payload.size() - 4);
    EXPECT_EQ(verify_icrc(a, covered, load_icrc(std::span(udp_payload).last<4>())), 1144);
    EXPECT_EQ(parsed.payload.size(), 18u);
    EXPECT_TRUE(parsed.hdr.bth.migreq);
    EXPECT_EQ(parsed.hdr.bth.pad, 2);
    EXPECT_EQ(parsed.hdr.bth.psn, 13571856u);
}

// Captured on a veth from the kernel's Soft-RoCE (Linux 6.1 rxe0 on
// 10.99.0.1, ibv_rc_pingpong -s 64 to 10.99.0.2; tools/interop/rxe): two
// packets in a row of one QP, with the IP IDs 0x7964 and 0x7966 and UDP
// source port 49441 that rxe chose. A receiver sees neither ID.
TEST(wireIcrc, VerifiesPacketsCapturedFromTheKernelsSoftRoce) {
    const Bytes send_only = concat({
        {0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x4f, 0x1c, 0x3c},
        Bytes(64, 0x7b),
        {0x84, 0x28, 0xd3, 0x37},
    });
    const Bytes ack = {0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xd6,
                       0xff, 0x0e, 0x1f, 0x00, 0x00, 0x01, 0xc0, 0xae, 0x89, 0xae};
    const IcrcAddresses addr = IcrcAddresses::v4({10, 99, 0, 1}, {10, 99, 0, 2}, 49441);
    for (auto [packet, id] : {std::pair{&send_only, 0x7964}, {&ack, 0x7966}}) {
        const std::span<const uint8_t> p(*packet);
        EXPECT_EQ(verify_icrc(addr, p.first(p.size() - 4), load_icrc(p.last<4>())), id);
        ParsedPacket parsed;
        EXPECT_EQ(parse_packet(p, addr, parsed), ParseError::kOk);
    }
}

// Captured the same way with both devices on IPv6 (tools/interop/rxe
// --ipv6): rxe0 on fd00:99::1 sends to fd00:99::2 from UDP port 49441,
// traffic class and flow label 0, hop limit 64.
TEST(wireIcrc, VerifiesAnIpv6PacketCapturedFromTheKernelsSoftRoce) {
    const Bytes send_only = concat({
        {0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xee, 0x82, 0x79},
        Bytes(64, 0x7b),
        {0x58, 0x1d, 0x1d, 0x85},
    });
    std::array<uint8_t, 16> src{0xfd, 0x00, 0x00, 0x99};
    std::array<uint8_t, 16> dst = src;
    src[15] = 1;
    dst[15] = 2;
    const IcrcAddresses addr = IcrcAddresses::v6(src, dst, 49441);
    const std::span<const uint8_t> p(send_only);
    EXPECT_EQ(icrc(addr, p.first(p.size() - 4)), load_icrc(p.last<4>()));
    ParsedPacket parsed;
    EXPECT_EQ(parse_packet(p, addr, parsed), ParseError::kOk);
}

TEST(wireIcrc, FecnBecnByteDoesNotCount) {
    const IcrcAddresses addr = IcrcAddresses::v4({192, 168, 1, 10}, {192, 168, 1, 20}, 0xc001);
    Bytes p = concat({kSendOnlyBth, kHelloPadded});
    const uint32_t base = icrc(addr, p);
    for (int v = 0; v < 256; ++v) {
        p[4] = static_cast<uint8_t>(v);  // FECN, BECN, resv6a
        EXPECT_EQ(icrc(addr, p), base) << v;
    }
}

TEST(wireIcrc, EveryOtherAddressFieldCounts) {
    const Bytes p = concat({kSendOnlyBth, kHelloPadded});
    const IcrcAddresses base = IcrcAddresses::v4({192, 168, 1, 10}, {192, 168, 1, 20}, 0xc001);
    const uint32_t base_icrc = icrc(base, p);
    auto differs = [&](IcrcAddresses a) { return icrc(a, p) != base_icrc; };

    IcrcAddresses a = base;
    a.src[3] ^= 1;
    EXPECT_TRUE(differs(a));
    a = base;
    a.dst[0] ^= 0x80;
    EXPECT_TRUE(differs(a));
    a = base;
    a.src_port ^= 1;
    EXPECT_TRUE(differs(a));
    a = base;
    a.dst_port = 4792;
    EXPECT_TRUE(differs(a));
    a = base;
    a.ipv4_id = 1;
    EXPECT_TRUE(differs(a));
    a = base;
    a.ipv4_dont_fragment = false;
    EXPECT_TRUE(differs(a));
    a = base;
    a.ipv6 = true;
    EXPECT_TRUE(differs(a));
    // Bytes past the IPv4 address are not part of an IPv4 header.
    a = base;
    a.src[15] = 0x55;
    a.dst[8] = 0x66;
    EXPECT_FALSE(differs(a));
    // IPv6 has no ID or DF.
    IcrcAddresses v6 = base;
    v6.ipv6 = true;
    const uint32_t v6_icrc = icrc(v6, p);
    v6.ipv4_id = 7;
    v6.ipv4_dont_fragment = false;
    EXPECT_EQ(icrc(v6, p), v6_icrc);
}

}  // namespace
}  // namespace uroce::wire
