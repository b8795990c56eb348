#include "wire/headers.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace uroce::wire {
namespace {

using Bytes = std::vector<uint8_t>;

template <size_t N, typename H>
Bytes encoded(const H& h) {
    std::array<uint8_t, N> out;
    out.fill(0xaa);  // every byte must be written
    encode(h, std::span<uint8_t, N>(out));
    return Bytes(out.begin(), out.end());
}

template <size_t N>
std::span<const uint8_t, N> fixed(const Bytes& b) {
    return std::span<const uint8_t, N>(b.data(), N);
}

TEST(wireHeaders, BthEveryFieldInPlace) {
    Bth h;
    h.opcode = 0x0a;
    h.solicited = true;
    h.migreq = true;
    h.pad = 3;
    h.tver = 0;
    h.pkey = 0x8001;
    h.fecn = true;
    h.becn = false;
    h.dest_qp = 0x123456;
    h.ack_req = true;
    h.psn = 0xabcdef;
    const Bytes wire = {0x0a, 0xf0, 0x80, 0x01, 0x80, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef};
    EXPECT_EQ(encoded<kBthBytes>(h), wire);
    EXPECT_EQ(decode_bth(fixed<kBthBytes>(wire)), h);
}

TEST(wireHeaders, BthFromARealCnp) {
    // The BTH of a CNP captured from a ConnectX-4 Lx (scapy's RoCE tests).
    const Bytes wire = {0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00};
    const Bth h = decode_bth(fixed<kBthBytes>(wire));
    EXPECT_EQ(h.opcode, 0x81);
    EXPECT_FALSE(h.solicited || h.migreq || h.fecn || h.ack_req);
    EXPECT_TRUE(h.becn);
    EXPECT_EQ(h.pad, 0);
    EXPECT_EQ(h.tver, 0);
    EXPECT_EQ(h.pkey, 0xffff);
    EXPECT_EQ(h.dest_qp, 0x118u);
    EXPECT_EQ(h.psn, 0u);
    EXPECT_EQ(encoded<kBthBytes>(h), wire);
}

TEST(wireHeaders, BthReservedBitsIgnoredAndOversizedFieldsMasked) {
    // resv6a (byte 4, bits 5..0) and resv7 (byte 8, bits 6..0) all set.
    const Bytes wire = {0x04, 0x01, 0x12, 0x34, 0x3f, 0x00, 0x00, 0x05, 0x7f, 0x00, 0x00, 0x09};
    const Bth h = decode_bth(fixed<kBthBytes>(wire));
    EXPECT_EQ(h.tver, 1);
    EXPECT_FALSE(h.fecn || h.becn || h.ack_req);
    EXPECT_EQ(h.dest_qp, 5u);
    EXPECT_EQ(h.psn, 9u);

    Bth big;
    big.pad = 0xff;
    big.tver = 0xff;
    big.dest_qp = 0xff123456;
    big.psn = 0xff654321;
    const Bytes out = encoded<kBthBytes>(big);
    EXPECT_EQ(out[1], 0x3f);  // pad 3, tver 15, SE and M untouched
    EXPECT_EQ(out[4], 0x00);
    EXPECT_EQ((Bytes{out[5], out[6], out[7]}), (Bytes{0x12, 0x34, 0x56}));
    EXPECT_EQ(out[8], 0x00);
    EXPECT_EQ((Bytes{out[9], out[10], out[11]}), (Bytes{0x65, 0x43, 0x21}));
}

TEST(wireHeaders, Reth) {
    const Reth h{0x0102030405060708, 0x11223344, 0x00010000};
    const Bytes wire = {1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x00, 0x01, 0x00, 0x00};
    EXPECT_EQ(encoded<kRethBytes>(h), wire);
    EXPECT_EQ(decode_reth(fixed<kRethBytes>(wire)), h);
}

TEST(wireHeaders, AtomicEth) {
    const AtomicEth h{0x1000, 0xdeadbeef, 0xa1a2a3a4a5a6a7a8, 0xb1b2b3b4b5b6b7b8};
    const Bytes wire = {0,    0,    0,    0,    0,    0,    0x10, 0x00, 0xde, 0xad,
                        0xbe, 0xef, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                        0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8};
    EXPECT_EQ(encoded<kAtomicEthBytes>(h), wire);
    EXPECT_EQ(decode_atomic_eth(fixed<kAtomicEthBytes>(wire)), h);
}

TEST(wireHeaders, AtomicAckEthImmDtIeth) {
    const Bytes orig = {0x80, 0, 0, 0, 0, 0, 0, 0x01};
    EXPECT_EQ(encoded<kAtomicAckEthBytes>(AtomicAckEth{0x8000000000000001}), orig);
    EXPECT_EQ(decode_atomic_ack_eth(fixed<kAtomicAckEthBytes>(orig)).original, 0x8000000000000001u);

    const Bytes imm = {0xca, 0xfe, 0xba, 0xbe};
    EXPECT_EQ(encoded<kImmDtBytes>(ImmDt{0xcafebabe}), imm);
    EXPECT_EQ(decode_immdt(fixed<kImmDtBytes>(imm)).imm, 0xcafebabeu);

    const Bytes rkey = {0x00, 0x00, 0x12, 0x34};
    EXPECT_EQ(encoded<kIethBytes>(Ieth{0x1234}), rkey);
    EXPECT_EQ(decode_ieth(fixed<kIethBytes>(rkey)).rkey, 0x1234u);
}

TEST(wireHeaders, DethSourceQpIs24Bits) {
    const Deth h{0x80010000, 0x000abc};
    const Bytes wire = {0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x0a, 0xbc};
    EXPECT_EQ(encoded<kDethBytes>(h), wire);
    EXPECT_EQ(decode_deth(fixed<kDethBytes>(wire)), h);
    const Bytes reserved_set = {0, 0, 0, 1, 0xff, 0x00, 0x0a, 0xbc};
    EXPECT_EQ(decode_deth(fixed<kDethBytes>(reserved_set)).src_qp, 0xabcu);
    EXPECT_EQ(encoded<kDethBytes>(Deth{1, 0xff000abc})[4], 0x00);
}

TEST(wireHeaders, XrcethSrqIs24Bits) {
    const Bytes wire = {0x00, 0x65, 0x43, 0x21};
    EXPECT_EQ(encoded<kXrcethBytes>(Xrceth{0x654321}), wire);
    EXPECT_EQ(decode_xrceth(fixed<kXrcethBytes>(wire)).xrc_srq, 0x654321u);
    const Bytes reserved_set = {0xff, 0x65, 0x43, 0x21};
    EXPECT_EQ(decode_xrceth(fixed<kXrcethBytes>(reserved_set)).xrc_srq, 0x654321u);
    EXPECT_EQ(encoded<kXrcethBytes>(Xrceth{0xff654321}), wire);
}

TEST(wireHeaders, FethPlacementTypeAndSelectivity) {
    // Selectivity level in bits 5..4, placement type in bits 3..0 (rxe_hdr.h).
    const Bytes wire = {0x00, 0x00, 0x00, 0x21};
    const Feth h{1, 2};
    EXPECT_EQ(encoded<kFethBytes>(h), wire);
    EXPECT_EQ(decode_feth(fixed<kFethBytes>(wire)), h);
    const Bytes reserved_set = {0xff, 0xff, 0xff, 0xe3};
    EXPECT_EQ(decode_feth(fixed<kFethBytes>(reserved_set)), (Feth{3, 2}));
}

TEST(wireHeaders, AethBytes) {
    const Bytes wire = {0x2e, 0x00, 0x01, 0x02};
    const Aeth h = decode_aeth(fixed<kAethBytes>(wire));
    EXPECT_EQ(h.syndrome, 0x2e);
    EXPECT_EQ(h.msn, 0x102u);
    EXPECT_EQ(encoded<kAethBytes>(h), wire);
    EXPECT_EQ(encoded<kAethBytes>(Aeth{0x00, 0xff000003})[1], 0x00);
}

TEST(wireAeth, BuildersSetTheSyndrome) {
    // IBA vol.1 table 42/43/44: ACK 000ccccc, RNR NAK 001ttttt, NAK 011nnnnn.
    EXPECT_EQ(Aeth::ack(7).syndrome, 0x1f);
    EXPECT_EQ(Aeth::ack(7, 3).syndrome, 0x03);
    EXPECT_EQ(Aeth::ack(7).msn, 7u);
    EXPECT_EQ(Aeth::rnr_nak(1, 14).syndrome, 0x2e);
    EXPECT_EQ(Aeth::rnr_nak(1, 0).syndrome, 0x20);
    EXPECT_EQ(Aeth::nak(2, NakCode::kPsnSequenceError).syndrome, 0x60);
    EXPECT_EQ(Aeth::nak(2, NakCode::kInvalidRequest).syndrome, 0x61);
    EXPECT_EQ(Aeth::nak(2, NakCode::kRemoteAccessError).syndrome, 0x62);
    EXPECT_EQ(Aeth::nak(2, NakCode::kRemoteOperationalError).syndrome, 0x63);
    EXPECT_EQ(Aeth::nak(2, NakCode::kInvalidRdRequest).syndrome, 0x64);
    EXPECT_EQ(Aeth::rnr_nak(1, 0xff).syndrome, 0x3f);  // timer keeps to its 5 bits
}

TEST(wireAeth, TypeAndValueOfEverySyndrome) {
    for (int s = 0; s < 256; ++s) {
        const Aeth a{static_cast<uint8_t>(s), 0};
        AethType expected = AethType::kReserved;
        if (s < 0x20) {
            expected = AethType::kAck;
        } else if (s < 0x40) {
            expected = AethType::kRnrNak;
        } else if (s >= 0x60 && s < 0x80) {
            expected = AethType::kNak;
        }
        EXPECT_EQ(a.type(), expected) << s;
        EXPECT_EQ(a.value(), s % 32) << s;
    }
    EXPECT_EQ(Aeth::nak(0, NakCode::kRemoteAccessError).value(), 2);
    EXPECT_EQ(Aeth::rnr_nak(0, 31).value(), 31);
}

}  // namespace
}  // namespace uroce::wire
