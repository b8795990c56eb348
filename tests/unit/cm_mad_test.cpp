#include "cm/mad.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string.h>

#include <algorithm>
#include <vector>

namespace uroce::cm {
namespace {

using Bytes = std::vector<uint8_t>;

// Where the CM message starts in the MAD; the offsets added to it below are
// those of IBA tables 106-120 (Linux's ibta_vol1_c12.h).
constexpr size_t kCm = 24;

template <size_t N>
std::array<uint8_t, N> pattern(uint8_t seed) {
    std::array<uint8_t, N> a;
    for (size_t i = 0; i < N; ++i) {
        a[i] = static_cast<uint8_t>(seed + i * 7 + 1);
    }
    return a;
}

template <size_t N>
Bytes bytes_of(const std::array<uint8_t, N>& a) {
    return Bytes(a.begin(), a.end());
}

Bytes encoded(uint64_t tid, const Message& m) {
    const auto mad = encode(tid, m);
    Bytes out(kMadSize);
    memcpy(out.data(), mad.data(), kMadSize);
    return out;
}

Bytes slice(const Bytes& b, size_t offset, size_t n) {
    return Bytes(b.begin() + offset, b.begin() + offset + n);
}

DecodeError decode_bytes(const Bytes& b, Mad& out) {
    return decode(std::as_bytes(std::span<const uint8_t>(b)), out);
}

// Decodes `b`, expecting success and a message of type M.
template <typename M>
M decoded(const Bytes& b) {
    Mad mad;
    EXPECT_EQ(decode_bytes(b, mad), DecodeError::kOk);
    EXPECT_TRUE(std::holds_alternative<M>(mad.message));
    EXPECT_EQ(mad.header.attribute, M::kAttribute);
    return std::holds_alternative<M>(mad.message) ? std::get<M>(mad.message) : M{};
}

Gid gid(uint8_t seed) {
    return pattern<16>(seed);
}

Req sample_req() {
    Req r;
    r.local_comm_id = 0x11223344;
    r.service_id = 0x0000000001061d2f;
    r.local_ca_guid = 0x0002c90300a1b2c3;
    r.local_qkey = 0x80010203;
    r.local_qpn = 0xffffff;
    r.responder_resources = 0xab;
    r.local_eecn = 0x123456;
    r.initiator_depth = 0xcd;
    r.remote_eecn = 0xabcdef;
    r.remote_cm_response_timeout = 31;
    r.transport_service = TransportService::kUc;
    r.end_to_end_flow_control = true;
    r.starting_psn = 0x654321;
    r.local_cm_response_timeout = 17;
    r.retry_count = 7;
    r.pkey = 0x8001;
    r.path_mtu = 5;
    r.rdc_exists = true;
    r.rnr_retry_count = 6;
    r.max_cm_retries = 15;
    r.srq = true;
    r.extended_transport_type = 1;
    r.primary.local_lid = 0x1234;
    r.primary.remote_lid = 0xffff;
    r.primary.local_gid = gid(0x10);
    r.primary.remote_gid = gid(0x20);
    r.primary.flow_label = 0xabcde;
    r.primary.packet_rate = 0x2a;
    r.primary.traffic_class = 0x66;
    r.primary.hop_limit = 0x40;
    r.primary.sl = 15;
    r.primary.subnet_local = true;
    r.primary.local_ack_timeout = 31;
    r.alternate.local_lid = 0xfedc;
    r.alternate.remote_lid = 0x0102;
    r.alternate.local_gid = gid(0x30);
    r.alternate.remote_gid = gid(0x40);
    r.alternate.flow_label = 0xfffff;
    r.alternate.packet_rate = 63;
    r.alternate.traffic_class = 0x99;
    r.alternate.hop_limit = 0xff;
    r.alternate.sl = 9;
    r.alternate.subnet_local = false;
    r.alternate.local_ack_timeout = 13;
    r.sap_supported = true;
    r.private_data = pattern<92>(0x50);
    return r;
}

TEST(cmMad, HeaderInPlace) {
    Rtu rtu;
    rtu.local_comm_id = 1;
    const Bytes w = encoded(0x0123456789abcdef, rtu);
    const Bytes header = {0x01, 0x07, 0x02, 0x03,  // base version, class, class version, SEND
                          0x00, 0x00, 0x00, 0x00,  // status, class specific
                          0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,  // transaction ID
                          0x00, 0x14, 0x00, 0x00,   // attribute RTU, reserved
                          0x00, 0x00, 0x00, 0x00};  // attribute modifier
    EXPECT_EQ(slice(w, 0, kCm), header);
    EXPECT_EQ(w.size(), 256u);

    Mad mad;
    ASSERT_EQ(decode_bytes(w, mad), DecodeError::kOk);
    EXPECT_EQ(mad.header.method, kMethodSend);
    EXPECT_EQ(mad.header.transaction_id, 0x0123456789abcdefu);
    EXPECT_EQ(mad.header.attribute, Attribute::kRtu);
    EXPECT_EQ(mad.header.status, 0);
    EXPECT_EQ(mad.header.class_specific, 0);
    EXPECT_EQ(mad.header.attribute_modifier, 0u);
}

TEST(cmMad, HeaderFieldsReadFromTheWire) {
    Bytes w = encoded(7, Drep{});
    w[4] = 0x12, w[5] = 0x34;                                // status
    w[6] = 0x56, w[7] = 0x78;                                // class specific
    w[20] = 0xde, w[21] = 0xad, w[22] = 0xbe, w[23] = 0xef;  // attribute modifier
    Mad mad;
    ASSERT_EQ(decode_bytes(w, mad), DecodeError::kOk);
    EXPECT_EQ(mad.header.status, 0x1234);
    EXPECT_EQ(mad.header.class_specific, 0x5678);
    EXPECT_EQ(mad.header.attribute_modifier, 0xdeadbeefu);
    EXPECT_EQ(mad.header.transaction_id, 7u);
}

TEST(cmMad, AttributeIdsAndNames) {
    EXPECT_EQ(attribute_of(Req{}), Attribute::kReq);
    EXPECT_EQ(attribute_of(SidrRep{}), Attribute::kSidrRep);
    const std::pair<Message, uint16_t> ids[] = {
        {Req{}, 0x0010},  {Mra{}, 0x0011},     {Rej{}, 0x0012},
        {Rep{}, 0x0013},  {Rtu{}, 0x0014},     {Dreq{}, 0x0015},
        {Drep{}, 0x0016}, {SidrReq{}, 0x0017}, {SidrRep{}, 0x0018},
    };
    for (const auto& [message, id] : ids) {
        const Bytes w = encoded(1, message);
        EXPECT_EQ(w[16], id >> 8);
        EXPECT_EQ(w[17], id & 0xff);
    }
    EXPECT_STREQ(name(Attribute::kReq), "REQ");
    EXPECT_STREQ(name(Attribute::kRep), "REP");
    EXPECT_STREQ(name(Attribute::kDreq), "DREQ");
    EXPECT_STREQ(name(Attribute::kSidrReq), "SIDR_REQ");
    EXPECT_STREQ(name(Attribute::kSidrRep), "SIDR_REP");
    EXPECT_STREQ(name(Attribute::kApr), "APR");
    EXPECT_STREQ(name(Attribute::kClassPortInfo), "ClassPortInfo");
    EXPECT_STREQ(name(static_cast<Attribute>(0x0042)), "unknown");
}

TEST(cmMad, ReqEveryFieldInPlace) {
    const Req r = sample_req();
    const Bytes w = encoded(0x42, r);

    EXPECT_EQ(slice(w, kCm + 0, 4), (Bytes{0x11, 0x22, 0x33, 0x44}));              // local comm ID
    EXPECT_EQ(slice(w, kCm + 4, 4), Bytes(4, 0));                                  // reserved
    EXPECT_EQ(slice(w, kCm + 8, 8), (Bytes{0, 0, 0, 0, 0x01, 0x06, 0x1d, 0x2f}));  // service ID
    EXPECT_EQ(slice(w, kCm + 16, 8), (Bytes{0x00, 0x02, 0xc9, 0x03, 0x00, 0xa1, 0xb2, 0xc3}));
    EXPECT_EQ(slice(w, kCm + 24, 4), Bytes(4, 0));                      // reserved
    EXPECT_EQ(slice(w, kCm + 28, 4), (Bytes{0x80, 0x01, 0x02, 0x03}));  // Q_Key
    // QPN:24 | responder resources:8
    EXPECT_EQ(slice(w, kCm + 32, 4), (Bytes{0xff, 0xff, 0xff, 0xab}));
    // EECN:24 | initiator depth:8
    EXPECT_EQ(slice(w, kCm + 36, 4), (Bytes{0x12, 0x34, 0x56, 0xcd}));
    // remote EECN:24 | timeout 31:5, UC 01:2, flow control 1:1 = 11111'01'1
    EXPECT_EQ(slice(w, kCm + 40, 4), (Bytes{0xab, 0xcd, 0xef, 0xfb}));
    // PSN:24 | timeout 17:5, retry 7:3 = 10001'111
    EXPECT_EQ(slice(w, kCm + 44, 4), (Bytes{0x65, 0x43, 0x21, 0x8f}));
    EXPECT_EQ(slice(w, kCm + 48, 2), (Bytes{0x80, 0x01}));  // P_Key
    EXPECT_EQ(w[kCm + 50], 0x5e);  // MTU 5:4, RDC 1:1, RNR retry 6:3 = 0101'1'110
    EXPECT_EQ(w[kCm + 51], 0xf9);  // CM retries 15:4, SRQ 1:1, extended 1:3 = 1111'1'001

    // Primary path.
    EXPECT_EQ(slice(w, kCm + 52, 4), (Bytes{0x12, 0x34, 0xff, 0xff}));  // LIDs
    EXPECT_EQ(slice(w, kCm + 56, 16), bytes_of(gid(0x10)));
    EXPECT_EQ(slice(w, kCm + 72, 16), bytes_of(gid(0x20)));
    // flow label 0xabcde:20, reserved:6, rate 0x2a:6
    EXPECT_EQ(slice(w, kCm + 88, 4), (Bytes{0xab, 0xcd, 0xe0, 0x2a}));
    EXPECT_EQ(w[kCm + 92], 0x66);  // traffic class
    EXPECT_EQ(w[kCm + 93], 0x40);  // hop limit
    EXPECT_EQ(w[kCm + 94], 0xf8);  // SL 15:4, subnet local 1:1, reserved:3
    EXPECT_EQ(w[kCm + 95], 0xf8);  // ACK timeout 31:5, reserved:3

    // Alternate path.
    EXPECT_EQ(slice(w, kCm + 96, 4), (Bytes{0xfe, 0xdc, 0x01, 0x02}));
    EXPECT_EQ(slice(w, kCm + 100, 16), bytes_of(gid(0x30)));
    EXPECT_EQ(slice(w, kCm + 116, 16), bytes_of(gid(0x40)));
    EXPECT_EQ(slice(w, kCm + 132, 4), (Bytes{0xff, 0xff, 0xf0, 0x3f}));
    EXPECT_EQ(w[kCm + 136], 0x99);
    EXPECT_EQ(w[kCm + 137], 0xff);
    EXPECT_EQ(w[kCm + 138], 0x90);  // SL 9, not subnet local
    EXPECT_EQ(w[kCm + 139], 0x6c);  // ACK timeout 13:5, SAP 1:1, reserved:2 = 01101'1'00

    // Private data: 92 bytes from 140, to the MAD's end.
    EXPECT_EQ(kCm + 140, 164u);
    EXPECT_EQ(slice(w, kCm + 140, 92), bytes_of(r.private_data));

    EXPECT_EQ(decoded<Req>(w), r);

    // SAP clear beside a timeout whose lowest bit is set.
    Req no_sap = r;
    no_sap.sap_supported = false;
    const Bytes w2 = encoded(0x42, no_sap);
    EXPECT_EQ(w2[kCm + 139], 0x68);
    EXPECT_EQ(decoded<Req>(w2), no_sap);
}

TEST(cmMad, MraEveryFieldInPlace) {
    Mra m;
    m.local_comm_id = 0xa1a2a3a4;
    m.remote_comm_id = 0xb1b2b3b4;
    m.message_mraed = Answered::kOther;
    m.service_timeout = 31;
    m.private_data = pattern<222>(0x11);
    const Bytes w = encoded(1, m);
    EXPECT_EQ(slice(w, kCm + 0, 8), (Bytes{0xa1, 0xa2, 0xa3, 0xa4, 0xb1, 0xb2, 0xb3, 0xb4}));
    EXPECT_EQ(w[kCm + 8], 0x80);  // message MRAed 2:2, reserved:6
    EXPECT_EQ(w[kCm + 9], 0xf8);  // service timeout 31:5, reserved:3
    EXPECT_EQ(slice(w, kCm + 10, 222), bytes_of(m.private_data));
    EXPECT_EQ(decoded<Mra>(w), m);

    m.message_mraed = Answered::kRep;
    m.service_timeout = 0x12;
    const Bytes w2 = encoded(1, m);
    EXPECT_EQ(w2[kCm + 8], 0x40);
    EXPECT_EQ(w2[kCm + 9], 0x90);  // 10010'000
    EXPECT_EQ(decoded<Mra>(w2), m);
}

TEST(cmMad, RejEveryFieldInPlace) {
    Rej r;
    r.local_comm_id = 0x01020304;
    r.remote_comm_id = 0x05060708;
    r.message_rejected = Answered::kRep;
    r.reject_info_length = 0x7f;
    r.reason = RejectReason::kConsumerDefined;
    r.ari = pattern<72>(0x33);
    r.private_data = pattern<148>(0x44);
    const Bytes w = encoded(1, r);
    EXPECT_EQ(slice(w, kCm + 0, 8), (Bytes{1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(w[kCm + 8], 0x40);  // REP 01:2, reserved:6
    EXPECT_EQ(w[kCm + 9], 0xfe);  // info length 127:7, reserved:1
    EXPECT_EQ(slice(w, kCm + 10, 2), (Bytes{0x00, 28}));
    EXPECT_EQ(slice(w, kCm + 12, 72), bytes_of(r.ari));
    EXPECT_EQ(slice(w, kCm + 84, 148), bytes_of(r.private_data));
    EXPECT_EQ(decoded<Rej>(w), r);

    r.reason = static_cast<RejectReason>(0xabcd);  // vendor and future reasons pass through
    r.reject_info_length = 5;
    const Bytes w2 = encoded(1, r);
    EXPECT_EQ(w2[kCm + 9], 0x0a);
    EXPECT_EQ(slice(w2, kCm + 10, 2), (Bytes{0xab, 0xcd}));
    EXPECT_EQ(decoded<Rej>(w2), r);
}

TEST(cmMad, RejectReasonNumbers) {
    // Linux's enum ib_cm_rej_reason.
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kNoQp), 1);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kTimeout), 4);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kUnsupported), 5);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kInvalidCommId), 6);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kInvalidServiceId), 8);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kStaleConnection), 10);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kInvalidMtu), 26);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kConsumerDefined), 28);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kInvalidRnrRetry), 29);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kInvalidClassVersion), 31);
    EXPECT_EQ(static_cast<uint16_t>(RejectReason::kVendorOptionNotSupported), 35);
}

TEST(cmMad, RepEveryFieldInPlace) {
    Rep r;
    r.local_comm_id = 0x10203040;
    r.remote_comm_id = 0x50607080;
    r.local_qkey = 0xfedcba98;
    r.local_qpn = 0xffffff;
    r.local_eecn = 0x0a0b0c;
    r.starting_psn = 0x7f0e0d;
    r.responder_resources = 0x11;
    r.initiator_depth = 0x22;
    r.target_ack_delay = 21;
    r.failover_accepted = 2;
    r.end_to_end_flow_control = true;
    r.rnr_retry_count = 7;
    r.srq = true;
    r.local_ca_guid = 0x0123456789abcdef;
    r.private_data = pattern<196>(0x77);
    const Bytes w = encoded(1, r);
    EXPECT_EQ(slice(w, kCm + 0, 12),
              (Bytes{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0xfe, 0xdc, 0xba, 0x98}));
    EXPECT_EQ(slice(w, kCm + 12, 4), (Bytes{0xff, 0xff, 0xff, 0x00}));  // QPN, reserved
    EXPECT_EQ(slice(w, kCm + 16, 4), (Bytes{0x0a, 0x0b, 0x0c, 0x00}));  // EECN, reserved
    EXPECT_EQ(slice(w, kCm + 20, 4), (Bytes{0x7f, 0x0e, 0x0d, 0x00}));  // PSN, reserved
    EXPECT_EQ(w[kCm + 24], 0x11);
    EXPECT_EQ(w[kCm + 25], 0x22);
    EXPECT_EQ(w[kCm + 26], 0xad);  // ACK delay 21:5, failover 2:2, flow control 1:1 = 10101'10'1
    EXPECT_EQ(w[kCm + 27], 0xf0);  // RNR retry 7:3, SRQ 1:1, reserved:4
    EXPECT_EQ(slice(w, kCm + 28, 8), (Bytes{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}));
    EXPECT_EQ(slice(w, kCm + 36, 196), bytes_of(r.private_data));
    EXPECT_EQ(decoded<Rep>(w), r);

    r.rnr_retry_count = 2;
    r.srq = false;
    r.target_ack_delay = 0;
    r.failover_accepted = 1;
    r.end_to_end_flow_control = false;
    const Bytes w2 = encoded(1, r);
    EXPECT_EQ(w2[kCm + 26], 0x02);
    EXPECT_EQ(w2[kCm + 27], 0x40);
    EXPECT_EQ(decoded<Rep>(w2), r);
}

TEST(cmMad, RtuDreqDrepInPlace) {
    Rtu rtu;
    rtu.local_comm_id = 0xc0c1c2c3;
    rtu.remote_comm_id = 0xd0d1d2d3;
    rtu.private_data = pattern<224>(0x01);
    const Bytes w = encoded(1, rtu);
    EXPECT_EQ(slice(w, kCm + 0, 8), (Bytes{0xc0, 0xc1, 0xc2, 0xc3, 0xd0, 0xd1, 0xd2, 0xd3}));
    EXPECT_EQ(slice(w, kCm + 8, 224), bytes_of(rtu.private_data));
    EXPECT_EQ(decoded<Rtu>(w), rtu);

    Dreq dreq;
    dreq.local_comm_id = 0x01010101;
    dreq.remote_comm_id = 0x02020202;
    dreq.remote_qpn_eecn = 0xffffff;
    dreq.private_data = pattern<220>(0x02);
    const Bytes w2 = encoded(1, dreq);
    EXPECT_EQ(slice(w2, kCm + 0, 12), (Bytes{1, 1, 1, 1, 2, 2, 2, 2, 0xff, 0xff, 0xff, 0x00}));
    EXPECT_EQ(slice(w2, kCm + 12, 220), bytes_of(dreq.private_data));
    EXPECT_EQ(decoded<Dreq>(w2), dreq);

    Drep drep;
    drep.local_comm_id = 0x0a0b0c0d;
    drep.remote_comm_id = 0x1a1b1c1d;
    drep.private_data = pattern<224>(0x03);
    const Bytes w3 = encoded(1, drep);
    EXPECT_EQ(slice(w3, kCm + 0, 8), (Bytes{0x0a, 0x0b, 0x0c, 0x0d, 0x1a, 0x1b, 0x1c, 0x1d}));
    EXPECT_EQ(slice(w3, kCm + 8, 224), bytes_of(drep.private_data));
    EXPECT_EQ(decoded<Drep>(w3), drep);
}

TEST(cmMad, DreqWholeImage) {
    // Every one of the 256 bytes, written out by hand.
    Dreq d;
    d.local_comm_id = 0x00000001;
    d.remote_comm_id = 0x00000002;
    d.remote_qpn_eecn = 0x000011;
    d.private_data[0] = 0xaa;
    d.private_data[219] = 0xbb;
    Bytes expected(256, 0);
    expected[0] = 1, expected[1] = 7, expected[2] = 2, expected[3] = 3;
    expected[15] = 0x99;  // transaction ID
    expected[17] = 0x15;  // DREQ
    expected[27] = 1;
    expected[31] = 2;
    expected[34] = 0x11;
    expected[36] = 0xaa;
    expected[255] = 0xbb;
    EXPECT_EQ(encoded(0x99, d), expected);
}

TEST(cmMad, SidrReqEveryFieldInPlace) {
    SidrReq s;
    s.request_id = 0x31323334;
    s.pkey = 0xffff;
    s.service_id = 0x00000000013f0102;
    s.private_data = pattern<216>(0x09);
    const Bytes w = encoded(1, s);
    EXPECT_EQ(slice(w, kCm + 0, 8), (Bytes{0x31, 0x32, 0x33, 0x34, 0xff, 0xff, 0x00, 0x00}));
    EXPECT_EQ(slice(w, kCm + 8, 8), (Bytes{0, 0, 0, 0, 0x01, 0x3f, 0x01, 0x02}));
    EXPECT_EQ(slice(w, kCm + 16, 216), bytes_of(s.private_data));
    EXPECT_EQ(decoded<SidrReq>(w), s);
}

TEST(cmMad, SidrRepEveryFieldInPlace) {
    SidrRep s;
    s.request_id = 0x41424344;
    s.status = SidrStatus::kRedirect;
    s.additional_info_length = 72;
    s.qpn = 0xffffff;
    s.service_id = 0x0000000001111234;
    s.qkey = 0x01234567;
    s.class_port_info = pattern<72>(0x5a);
    s.private_data = pattern<136>(0x6b);
    const Bytes w = encoded(1, s);
    EXPECT_EQ(slice(w, kCm + 0, 4), (Bytes{0x41, 0x42, 0x43, 0x44}));
    EXPECT_EQ(slice(w, kCm + 4, 4), (Bytes{4, 72, 0, 0}));             // status, length, reserved
    EXPECT_EQ(slice(w, kCm + 8, 4), (Bytes{0xff, 0xff, 0xff, 0x00}));  // QPN, reserved
    EXPECT_EQ(slice(w, kCm + 12, 8), (Bytes{0, 0, 0, 0, 0x01, 0x11, 0x12, 0x34}));
    EXPECT_EQ(slice(w, kCm + 20, 4), (Bytes{0x01, 0x23, 0x45, 0x67}));
    EXPECT_EQ(slice(w, kCm + 24, 72), bytes_of(s.class_port_info));
    EXPECT_EQ(slice(w, kCm + 96, 136), bytes_of(s.private_data));
    EXPECT_EQ(decoded<SidrRep>(w), s);
}

TEST(cmMad, EveryMessageRoundTripsAtItsMaxima) {
    Req req;
    req.local_comm_id = req.local_qkey = 0xffffffff;
    req.service_id = req.local_ca_guid = ~uint64_t{0};
    req.local_qpn = req.local_eecn = req.remote_eecn = req.starting_psn = 0xffffff;
    req.responder_resources = req.initiator_depth = 0xff;
    req.remote_cm_response_timeout = req.local_cm_response_timeout = 31;
    req.transport_service = TransportService::kExtended;
    req.end_to_end_flow_control = req.rdc_exists = req.srq = req.sap_supported = true;
    req.retry_count = req.rnr_retry_count = req.extended_transport_type = 7;
    req.pkey = 0xffff;
    req.path_mtu = req.max_cm_retries = 15;
    for (Path* p : {&req.primary, &req.alternate}) {
        p->local_lid = p->remote_lid = 0xffff;
        p->local_gid.fill(0xff);
        p->remote_gid.fill(0xff);
        p->flow_label = 0xfffff;
        p->packet_rate = 63;
        p->traffic_class = p->hop_limit = 0xff;
        p->sl = 15;
        p->subnet_local = true;
        p->local_ack_timeout = 31;
    }
    req.private_data.fill(0xff);

    Mra mra{0xffffffff, 0xffffffff, static_cast<Answered>(3), 31, {}};
    mra.private_data.fill(0xff);
    Rej rej{
        0xffffffff, 0xffffffff, static_cast<Answered>(3), 127, static_cast<RejectReason>(0xffff),
        {},         {}};
    rej.ari.fill(0xff);
    rej.private_data.fill(0xff);
    Rep rep{0xffffffff, 0xffffffff, 0xffffffff, 0xffffff, 0xffffff, 0xffffff,     0xff, 0xff,
            31,         3,          true,       7,        true,     ~uint64_t{0}, {}};
    rep.private_data.fill(0xff);
    Rtu rtu{0xffffffff, 0xffffffff, {}};
    rtu.private_data.fill(0xff);
    Dreq dreq{0xffffffff, 0xffffffff, 0xffffff, {}};
    dreq.private_data.fill(0xff);
    Drep drep{0xffffffff, 0xffffffff, {}};
    drep.private_data.fill(0xff);
    SidrReq sidr_req{0xffffffff, 0xffff, ~uint64_t{0}, {}};
    sidr_req.private_data.fill(0xff);
    SidrRep sidr_rep{
        0xffffffff, static_cast<SidrStatus>(0xff), 0xff, 0xffffff, ~uint64_t{0}, 0xffffffff, {},
        {}};
    sidr_rep.class_port_info.fill(0xff);
    sidr_rep.private_data.fill(0xff);

    const Message messages[] = {req, mra, rej, rep, rtu, dreq, drep, sidr_req, sidr_rep};
    for (const Message& m : messages) {
        SCOPED_TRACE(name(attribute_of(m)));
        Mad mad;
        ASSERT_EQ(decode_bytes(encoded(~uint64_t{0}, m), mad), DecodeError::kOk);
        EXPECT_EQ(mad.message, m);
        EXPECT_EQ(mad.header.transaction_id, ~uint64_t{0});
    }

    // Only reserved bits stay clear with every field at its maximum.
    const Bytes w = encoded(1, req);
    EXPECT_EQ(slice(w, kCm + 4, 4), Bytes(4, 0));
    EXPECT_EQ(slice(w, kCm + 24, 4), Bytes(4, 0));
    EXPECT_EQ(slice(w, kCm + 88, 4), (Bytes{0xff, 0xff, 0xf0, 0x3f}));
    EXPECT_EQ(w[kCm + 94], 0xf8);
    EXPECT_EQ(w[kCm + 95], 0xf8);
    EXPECT_EQ(w[kCm + 138], 0xf8);
    EXPECT_EQ(w[kCm + 139], 0xfc);
    const Bytes w2 = encoded(1, rep);
    EXPECT_EQ(slice(w2, kCm + 12, 12),
              (Bytes{0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0}));
    EXPECT_EQ(w2[kCm + 27], 0xf0);
}

TEST(cmMad, OversizedFieldsAreMaskedNotSpilled) {
    Req r;
    r.local_qpn = 0xff123456;
    r.responder_resources = 0x01;
    r.remote_cm_response_timeout = 0xff;
    r.transport_service = static_cast<TransportService>(0xff);
    r.starting_psn = 0xffabcdef;
    r.retry_count = 0xff;
    r.local_cm_response_timeout = 0;
    r.path_mtu = 0xff;
    r.primary.flow_label = 0xfff12345;
    r.primary.packet_rate = 0;
    r.primary.sl = 0xff;
    r.primary.local_ack_timeout = 0xff;
    const Bytes w = encoded(1, r);
    EXPECT_EQ(slice(w, kCm + 32, 4), (Bytes{0x12, 0x34, 0x56, 0x01}));
    EXPECT_EQ(w[kCm + 43], 0xfe);  // timeout 31, type 3, no flow control
    EXPECT_EQ(slice(w, kCm + 44, 4), (Bytes{0xab, 0xcd, 0xef, 0x07}));
    EXPECT_EQ(w[kCm + 50], 0xf0);
    EXPECT_EQ(slice(w, kCm + 88, 4), (Bytes{0x12, 0x34, 0x50, 0x00}));
    EXPECT_EQ(w[kCm + 94], 0xf0);
    EXPECT_EQ(w[kCm + 95], 0xf8);

    Dreq d;
    d.local_comm_id = 0;
    d.remote_qpn_eecn = 0xabcdef01;
    const Bytes w2 = encoded(1, d);
    EXPECT_EQ(slice(w2, kCm + 8, 4), (Bytes{0xcd, 0xef, 0x01, 0x00}));
}

TEST(cmMad, ReservedBitsIgnoredWhenRead) {
    Bytes w = encoded(1, Req{});
    w[kCm + 4] = 0xff;   // reserved word
    w[kCm + 27] = 0xff;  // reserved word
    w[kCm + 94] = 0x07;  // reserved low bits of SL byte
    w[kCm + 95] = 0x07;  // reserved low bits of ACK timeout byte
    w[kCm + 90] = 0x0f;  // the 6 reserved bits after the flow label:
    w[kCm + 91] = 0xc0;  // byte 90's low nibble and byte 91's top 2 bits
    const Req r = decoded<Req>(w);
    EXPECT_EQ(r.primary.sl, 0);
    EXPECT_FALSE(r.primary.subnet_local);
    EXPECT_EQ(r.primary.local_ack_timeout, 0);
    EXPECT_EQ(r.primary.flow_label, 0x0u);
    EXPECT_EQ(r.primary.packet_rate, 0);
    EXPECT_EQ(r.local_qkey, 0u);
    EXPECT_EQ(r.service_id, 0u);
    EXPECT_EQ(encoded(1, r), encoded(1, Req{}));

    // Byte 90's high nibble holds the flow label's lowest 4 bits.
    Bytes w2 = encoded(1, Req{});
    w2[kCm + 90] = 0xf0;
    EXPECT_EQ(decoded<Req>(w2).primary.flow_label, 0xfu);

    Bytes w3 = encoded(1, Mra{});
    w3[kCm + 8] = 0x3f;
    w3[kCm + 9] = 0x07;
    const Mra m = decoded<Mra>(w3);
    EXPECT_EQ(m.message_mraed, Answered::kReq);
    EXPECT_EQ(m.service_timeout, 0);
}

TEST(cmMad, DecodeRefusesShortBuffers) {
    const Bytes w = encoded(1, Rtu{});
    Mad mad;
    EXPECT_EQ(decode_bytes(Bytes{}, mad), DecodeError::kShort);
    EXPECT_EQ(decode_bytes(slice(w, 0, kCm), mad), DecodeError::kShort);
    EXPECT_EQ(decode_bytes(slice(w, 0, 255), mad), DecodeError::kShort);
    // A longer buffer (a UD payload with padding) is read for its first 256.
    Bytes longer = w;
    longer.resize(300, 0xee);
    EXPECT_EQ(decode_bytes(longer, mad), DecodeError::kOk);
}

TEST(cmMad, DecodeRefusesOtherClassesAndVersions) {
    const Bytes good = encoded(1, Rtu{});
    const struct {
        size_t offset;
        uint8_t value;
        DecodeError error;
    } cases[] = {
        {0, 0x02, DecodeError::kNotCm},                                      // base version
        {0, 0x00, DecodeError::kNotCm},     {1, 0x03, DecodeError::kNotCm},  // SA class
        {1, 0x81, DecodeError::kNotCm},                                      // directed-route SMP
        {2, 0x01, DecodeError::kNotCm},                                      // class version 1
        {2, 0x03, DecodeError::kNotCm},     {3, 0x01, DecodeError::kBadMethod},  // GET
        {3, 0x02, DecodeError::kBadMethod},                                      // SET
        {3, 0x83, DecodeError::kBadMethod},  // SEND with the response bit
        {3, 0x81, DecodeError::kBadMethod},  // GET response
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(testing::Message() << "byte " << c.offset << " = " << int{c.value});
        Bytes w = good;
        w[c.offset] = c.value;
        Mad mad;
        mad.header.transaction_id = 0x5555;
        EXPECT_EQ(decode_bytes(w, mad), c.error);
        EXPECT_EQ(mad.header.transaction_id, 0x5555u);  // untouched on error
    }
}

TEST(cmMad, DecodeRefusesUnknownAndUnsupportedAttributes) {
    const struct {
        uint16_t id;
        DecodeError error;
    } cases[] = {
        {0x0000, DecodeError::kUnknownAttribute},
        {0x000f, DecodeError::kUnknownAttribute},
        {0x001b, DecodeError::kUnknownAttribute},
        {0x1000, DecodeError::kUnknownAttribute},  // REQ's ID byte-swapped
        {0xffff, DecodeError::kUnknownAttribute},
        {0x0001, DecodeError::kUnsupportedAttribute},  // ClassPortInfo
        {0x0019, DecodeError::kUnsupportedAttribute},  // LAP
        {0x001a, DecodeError::kUnsupportedAttribute},  // APR
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.id);
        Bytes w = encoded(1, Rtu{});
        w[16] = static_cast<uint8_t>(c.id >> 8);
        w[17] = static_cast<uint8_t>(c.id);
        Mad mad;
        EXPECT_EQ(decode_bytes(w, mad), c.error);
    }
    EXPECT_STREQ(name(DecodeError::kUnknownAttribute), "unknown attribute");
}

TEST(cmMad, DecodeDispatchesOnTheAttribute) {
    // The same body read as another message: the attribute, not the bytes, decides.
    Bytes w = encoded(1, Drep{0x01020304, 0x05060708, {}});
    w[17] = 0x14;  // RTU
    const Rtu rtu = decoded<Rtu>(w);
    EXPECT_EQ(rtu.local_comm_id, 0x01020304u);
    EXPECT_EQ(rtu.remote_comm_id, 0x05060708u);
}

// ---- RDMA IP CM Service (Annex A11) ----

TEST(cmIpService, ServiceIds) {
    EXPECT_EQ(service_id(PortSpace::kTcp, 7471), 0x0000000001061d2fu);
    EXPECT_EQ(service_id(PortSpace::kUdp, 0xffff), 0x000000000111ffffu);
    EXPECT_EQ(service_id(PortSpace::kIb, 1), 0x00000000013f0001u);
    EXPECT_EQ(service_id(PortSpace::kIpoib, 0x1234), 0x0000000000021234u);
    EXPECT_EQ(port_space_of(0x0000000001061d2f), PortSpace::kTcp);
    EXPECT_EQ(port_of(0x0000000001061d2f), 7471);
    EXPECT_EQ(port_space_of(0x000000000111abcd), PortSpace::kUdp);
    EXPECT_EQ(port_of(0x000000000111abcd), 0xabcd);
    EXPECT_TRUE(is_ip_service_id(service_id(PortSpace::kTcp, 0)));
    EXPECT_TRUE(is_ip_service_id(service_id(PortSpace::kIb, 4791)));
    EXPECT_FALSE(is_ip_service_id(service_id(PortSpace::kIpoib, 1)));
    EXPECT_FALSE(is_ip_service_id(0x0000000101061d2f));
    EXPECT_FALSE(is_ip_service_id(0x0200000001061d2f));
}

TEST(cmIpService, Ipv4HeaderInPlace) {
    IpCmHeader h;
    h.src_port = 40000;
    h.src_ip = wire::IpAddress::v4(htonl(0xc0a8010a));  // 192.168.1.10
    h.dst_ip = wire::IpAddress::v4(htonl(0x0a000001));  // 10.0.0.1
    Bytes expected(36, 0);
    expected[0] = 0x00;  // version 0.0
    expected[1] = 0x40;  // IPv4 in bits 7..4
    expected[2] = 0x9c, expected[3] = 0x40;
    expected[16] = 0xc0, expected[17] = 0xa8, expected[18] = 0x01, expected[19] = 0x0a;
    expected[32] = 0x0a, expected[33] = 0x00, expected[34] = 0x00, expected[35] = 0x01;
    EXPECT_EQ(bytes_of(encode_ip_cm_header(h)), expected);

    const auto back = decode_ip_cm_header(expected);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, h);
}

TEST(cmIpService, Ipv6HeaderInPlace) {
    IpCmHeader h;
    h.src_port = 0x1234;
    h.src_ip = wire::IpAddress(pattern<16>(0xf0));
    h.dst_ip = wire::IpAddress(pattern<16>(0x0f));
    const auto bytes = encode_ip_cm_header(h);
    EXPECT_EQ(bytes[0], 0x00);
    EXPECT_EQ(bytes[1], 0x60);
    EXPECT_EQ(bytes[2], 0x12);
    EXPECT_EQ(bytes[3], 0x34);
    EXPECT_EQ(slice(bytes_of(bytes), 4, 16), bytes_of(h.src_ip.bytes()));
    EXPECT_EQ(slice(bytes_of(bytes), 20, 16), bytes_of(h.dst_ip.bytes()));
    EXPECT_EQ(decode_ip_cm_header(bytes), h);
}

TEST(cmIpService, HeaderDecodeRefusesBadInput) {
    IpCmHeader h;
    h.src_ip = wire::IpAddress::v4(htonl(0x01020304));
    const auto good = bytes_of(encode_ip_cm_header(h));
    EXPECT_TRUE(decode_ip_cm_header(good).has_value());
    EXPECT_FALSE(decode_ip_cm_header(slice(good, 0, 35)).has_value());
    EXPECT_FALSE(decode_ip_cm_header(Bytes{}).has_value());
    for (const uint8_t version : {0x10, 0x01}) {  // major 1; minor 1
        Bytes b = good;
        b[0] = version;
        EXPECT_FALSE(decode_ip_cm_header(b).has_value()) << int{version};
    }
    for (const uint8_t ip : {0x00, 0x50, 0xf0}) {
        Bytes b = good;
        b[1] = ip;
        EXPECT_FALSE(decode_ip_cm_header(b).has_value()) << int{ip};
    }
    // The low nibble of byte 1 is reserved.
    Bytes b = good;
    b[1] = 0x4f;
    EXPECT_TRUE(decode_ip_cm_header(b).has_value());
}

TEST(cmIpService, RdmaCmReqCarriesTheHeader) {
    // What rdma_connect to 10.0.0.2:7471 from 10.0.0.1:33000 sends.
    IpCmHeader h;
    h.src_port = 33000;
    h.src_ip = wire::IpAddress::v4(htonl(0x0a000001));
    h.dst_ip = wire::IpAddress::v4(htonl(0x0a000002));
    Req req = sample_req();
    req.service_id = service_id(PortSpace::kTcp, 7471);
    req.private_data.fill(0);
    const auto header = encode_ip_cm_header(h);
    std::copy(header.begin(), header.end(), req.private_data.begin());
    req.private_data[36] = 0xab;  // the consumer's own private data follows

    const Bytes w = encoded(9, req);
    EXPECT_EQ(slice(w, kCm + 140, 36), bytes_of(header));
    EXPECT_EQ(w[kCm + 176], 0xab);

    const Req got = decoded<Req>(w);
    EXPECT_TRUE(is_ip_service_id(got.service_id));
    EXPECT_EQ(port_of(got.service_id), 7471);
    const auto parsed = decode_ip_cm_header(got.private_data);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, h);
    EXPECT_EQ(parsed->dst_ip.ipv4(), htonl(0x0a000002));
}

}  // namespace
}  // namespace uroce::cm
