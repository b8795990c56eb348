#include "cm/mad.h"

#include <string.h>

#include <algorithm>

#include "wire/byte_order.h"

namespace uroce::cm {

namespace {

using wire::load_be16;
using wire::load_be24;
using wire::load_be32;
using wire::load_be64;
using wire::store_be16;
using wire::store_be24;
using wire::store_be32;
using wire::store_be64;

constexpr uint32_t k24BitMask = 0x00ffffff;

// Offsets below are of the CM message, which starts after the MAD header;
// a field of n < 8 bits at bit b of a byte (IBA's Byte[Bit], 0 the most
// significant) is (byte >> (8 - b - n)) & ((1 << n) - 1).

template <size_t N>
void put_bytes(uint8_t* p, const std::array<uint8_t, N>& a) {
    memcpy(p, a.data(), N);
}
template <size_t N>
void get_bytes(const uint8_t* p, std::array<uint8_t, N>& a) {
    memcpy(a.data(), p, N);
}

// A path's 44 bytes, at REQ offset 52 (primary) or 96 (alternate).
void put_path(uint8_t* p, const Path& path) {
    store_be16(p, path.local_lid);
    store_be16(p + 2, path.remote_lid);
    put_bytes(p + 4, path.local_gid);
    put_bytes(p + 20, path.remote_gid);
    store_be32(p + 36, (path.flow_label & 0xfffff) << 12 | (path.packet_rate & 0x3fu));
    p[40] = path.traffic_class;
    p[41] = path.hop_limit;
    p[42] = static_cast<uint8_t>((path.sl & 0xf) << 4 | (path.subnet_local ? 0x08 : 0));
    p[43] = static_cast<uint8_t>((path.local_ack_timeout & 0x1f) << 3);
}

void get_path(const uint8_t* p, Path& path) {
    path.local_lid = load_be16(p);
    path.remote_lid = load_be16(p + 2);
    get_bytes(p + 4, path.local_gid);
    get_bytes(p + 20, path.remote_gid);
    path.flow_label = load_be32(p + 36) >> 12;
    path.packet_rate = p[39] & 0x3f;
    path.traffic_class = p[40];
    path.hop_limit = p[41];
    path.sl = p[42] >> 4;
    path.subnet_local = p[42] & 0x08;
    path.local_ack_timeout = p[43] >> 3;
}

// A 24-bit field followed by an 8-bit one in a 32-bit word.
void store_24_8(uint8_t* p, uint32_t high24, uint8_t low8) {
    store_be24(p, high24 & k24BitMask);
    p[3] = low8;
}

void put(uint8_t* m, const Req& r) {
    store_be32(m, r.local_comm_id);
    store_be64(m + 8, r.service_id);
    store_be64(m + 16, r.local_ca_guid);
    store_be32(m + 28, r.local_qkey);
    store_24_8(m + 32, r.local_qpn, r.responder_resources);
    store_24_8(m + 36, r.local_eecn, r.initiator_depth);
    store_24_8(m + 40, r.remote_eecn,
               static_cast<uint8_t>((r.remote_cm_response_timeout & 0x1f) << 3 |
                                    (static_cast<uint8_t>(r.transport_service) & 0x3) << 1 |
                                    (r.end_to_end_flow_control ? 1 : 0)));
    store_24_8(
        m + 44, r.starting_psn,
        static_cast<uint8_t>((r.local_cm_response_timeout & 0x1f) << 3 | (r.retry_count & 0x7)));
    store_be16(m + 48, r.pkey);
    m[50] = static_cast<uint8_t>((r.path_mtu & 0xf) << 4 | (r.rdc_exists ? 0x08 : 0) |
                                 (r.rnr_retry_count & 0x7));
    m[51] = static_cast<uint8_t>((r.max_cm_retries & 0xf) << 4 | (r.srq ? 0x08 : 0) |
                                 (r.extended_transport_type & 0x7));
    put_path(m + 52, r.primary);
    put_path(m + 96, r.alternate);
    if (r.sap_supported) {
        m[139] |= 0x04;
    }
    put_bytes(m + 140, r.private_data);
}

void get(const uint8_t* m, Req& r) {
    r.local_comm_id = load_be32(m);
    r.service_id = load_be64(m + 8);
    r.local_ca_guid = load_be64(m + 16);
    r.local_qkey = load_be32(m + 28);
    r.local_qpn = load_be24(m + 32);
    r.responder_resources = m[35];
    r.local_eecn = load_be24(m + 36);
    r.initiator_depth = m[39];
    r.remote_eecn = load_be24(m + 40);
    r.remote_cm_response_timeout = m[43] >> 3;
    r.transport_service = static_cast<TransportService>((m[43] >> 1) & 0x3);
    r.end_to_end_flow_control = m[43] & 0x01;
    r.starting_psn = load_be24(m + 44);
    r.local_cm_response_timeout = m[47] >> 3;
    r.retry_count = m[47] & 0x7;
    r.pkey = load_be16(m + 48);
    r.path_mtu = m[50] >> 4;
    r.rdc_exists = m[50] & 0x08;
    r.rnr_retry_count = m[50] & 0x7;
    r.max_cm_retries = m[51] >> 4;
    r.srq = m[51] & 0x08;
    r.extended_transport_type = m[51] & 0x7;
    get_path(m + 52, r.primary);
    get_path(m + 96, r.alternate);
    r.sap_supported = m[139] & 0x04;
    get_bytes(m + 140, r.private_data);
}

void put(uint8_t* m, const Mra& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    m[8] = static_cast<uint8_t>((static_cast<uint8_t>(r.message_mraed) & 0x3) << 6);
    m[9] = static_cast<uint8_t>((r.service_timeout & 0x1f) << 3);
    put_bytes(m + 10, r.private_data);
}

void get(const uint8_t* m, Mra& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    r.message_mraed = static_cast<Answered>(m[8] >> 6);
    r.service_timeout = m[9] >> 3;
    get_bytes(m + 10, r.private_data);
}

void put(uint8_t* m, const Rej& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    m[8] = static_cast<uint8_t>((static_cast<uint8_t>(r.message_rejected) & 0x3) << 6);
    m[9] = static_cast<uint8_t>((r.reject_info_length & 0x7f) << 1);
    store_be16(m + 10, static_cast<uint16_t>(r.reason));
    put_bytes(m + 12, r.ari);
    put_bytes(m + 84, r.private_data);
}

void get(const uint8_t* m, Rej& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    r.message_rejected = static_cast<Answered>(m[8] >> 6);
    r.reject_info_length = m[9] >> 1;
    r.reason = static_cast<RejectReason>(load_be16(m + 10));
    get_bytes(m + 12, r.ari);
    get_bytes(m + 84, r.private_data);
}

void put(uint8_t* m, const Rep& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    store_be32(m + 8, r.local_qkey);
    store_be24(m + 12, r.local_qpn & k24BitMask);
    store_be24(m + 16, r.local_eecn & k24BitMask);
    store_be24(m + 20, r.starting_psn & k24BitMask);
    m[24] = r.responder_resources;
    m[25] = r.initiator_depth;
    m[26] =
        static_cast<uint8_t>((r.target_ack_delay & 0x1f) << 3 | (r.failover_accepted & 0x3) << 1 |
                             (r.end_to_end_flow_control ? 1 : 0));
    m[27] = static_cast<uint8_t>((r.rnr_retry_count & 0x7) << 5 | (r.srq ? 0x10 : 0));
    store_be64(m + 28, r.local_ca_guid);
    put_bytes(m + 36, r.private_data);
}

void get(const uint8_t* m, Rep& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    r.local_qkey = load_be32(m + 8);
    r.local_qpn = load_be24(m + 12);
    r.local_eecn = load_be24(m + 16);
    r.starting_psn = load_be24(m + 20);
    r.responder_resources = m[24];
    r.initiator_depth = m[25];
    r.target_ack_delay = m[26] >> 3;
    r.failover_accepted = (m[26] >> 1) & 0x3;
    r.end_to_end_flow_control = m[26] & 0x01;
    r.rnr_retry_count = m[27] >> 5;
    r.srq = m[27] & 0x10;
    r.local_ca_guid = load_be64(m + 28);
    get_bytes(m + 36, r.private_data);
}

void put(uint8_t* m, const Rtu& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    put_bytes(m + 8, r.private_data);
}

void get(const uint8_t* m, Rtu& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    get_bytes(m + 8, r.private_data);
}

void put(uint8_t* m, const Dreq& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    store_be24(m + 8, r.remote_qpn_eecn & k24BitMask);
    put_bytes(m + 12, r.private_data);
}

void get(const uint8_t* m, Dreq& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    r.remote_qpn_eecn = load_be24(m + 8);
    get_bytes(m + 12, r.private_data);
}

void put(uint8_t* m, const Drep& r) {
    store_be32(m, r.local_comm_id);
    store_be32(m + 4, r.remote_comm_id);
    put_bytes(m + 8, r.private_data);
}

void get(const uint8_t* m, Drep& r) {
    r.local_comm_id = load_be32(m);
    r.remote_comm_id = load_be32(m + 4);
    get_bytes(m + 8, r.private_data);
}

void put(uint8_t* m, const SidrReq& r) {
    store_be32(m, r.request_id);
    store_be16(m + 4, r.pkey);
    store_be64(m + 8, r.service_id);
    put_bytes(m + 16, r.private_data);
}

void get(const uint8_t* m, SidrReq& r) {
    r.request_id = load_be32(m);
    r.pkey = load_be16(m + 4);
    r.service_id = load_be64(m + 8);
    get_bytes(m + 16, r.private_data);
}

void put(uint8_t* m, const SidrRep& r) {
    store_be32(m, r.request_id);
    m[4] = static_cast<uint8_t>(r.status);
    m[5] = r.additional_info_length;
    store_be24(m + 8, r.qpn & k24BitMask);
    store_be64(m + 12, r.service_id);  // 4-byte aligned only, as IBA lays it out
    store_be32(m + 20, r.qkey);
    put_bytes(m + 24, r.class_port_info);
    put_bytes(m + 96, r.private_data);
}

void get(const uint8_t* m, SidrRep& r) {
    r.request_id = load_be32(m);
    r.status = static_cast<SidrStatus>(m[4]);
    r.additional_info_length = m[5];
    r.qpn = load_be24(m + 8);
    r.service_id = load_be64(m + 12);
    r.qkey = load_be32(m + 20);
    get_bytes(m + 24, r.class_port_info);
    get_bytes(m + 96, r.private_data);
}

template <typename M>
Message read_as(const uint8_t* m) {
    M message;
    get(m, message);
    return message;
}

}  // namespace

const char* name(Attribute a) {
    switch (a) {
        case Attribute::kClassPortInfo:
            return "ClassPortInfo";
        case Attribute::kReq:
            return "REQ";
        case Attribute::kMra:
            return "MRA";
        case Attribute::kRej:
            return "REJ";
        case Attribute::kRep:
            return "REP";
        case Attribute::kRtu:
            return "RTU";
        case Attribute::kDreq:
            return "DREQ";
        case Attribute::kDrep:
            return "DREP";
        case Attribute::kSidrReq:
            return "SIDR_REQ";
        case Attribute::kSidrRep:
            return "SIDR_REP";
        case Attribute::kLap:
            return "LAP";
        case Attribute::kApr:
            return "APR";
    }
    return "unknown";
}

const char* name(DecodeError e) {
    switch (e) {
        case DecodeError::kOk:
            return "ok";
        case DecodeError::kShort:
            return "short";
        case DecodeError::kNotCm:
            return "not a CM MAD";
        case DecodeError::kBadMethod:
            return "bad method";
        case DecodeError::kUnsupportedAttribute:
            return "unsupported attribute";
        case DecodeError::kUnknownAttribute:
            return "unknown attribute";
    }
    return "unknown";
}

Attribute attribute_of(const Message& message) {
    return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kAttribute; }, message);
}

std::array<std::byte, kMadSize> encode(uint64_t transaction_id, const Message& message) {
    std::array<std::byte, kMadSize> mad{};  // reserved fields stay zero
    uint8_t* p = reinterpret_cast<uint8_t*>(mad.data());
    p[0] = kBaseVersion;
    p[1] = kMgmtClassCm;
    p[2] = kClassVersion;
    p[3] = kMethodSend;
    store_be64(p + 8, transaction_id);
    store_be16(p + 16, static_cast<uint16_t>(attribute_of(message)));
    std::visit([p](const auto& m) { put(p + kMadHeaderSize, m); }, message);
    return mad;
}

DecodeError decode(std::span<const std::byte> bytes, Mad& out) {
    if (bytes.size() < kMadSize) {
        return DecodeError::kShort;
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
    if (p[0] != kBaseVersion || p[1] != kMgmtClassCm || p[2] != kClassVersion) {
        return DecodeError::kNotCm;
    }
    if (p[3] != kMethodSend) {
        return DecodeError::kBadMethod;
    }
    MadHeader h;
    h.method = p[3];
    h.status = load_be16(p + 4);
    h.class_specific = load_be16(p + 6);
    h.transaction_id = load_be64(p + 8);
    h.attribute = static_cast<Attribute>(load_be16(p + 16));
    h.attribute_modifier = load_be32(p + 20);

    const uint8_t* m = p + kMadHeaderSize;
    Message message;
    switch (h.attribute) {
        case Attribute::kReq:
            message = read_as<Req>(m);
            break;
        case Attribute::kMra:
            message = read_as<Mra>(m);
            break;
        case Attribute::kRej:
            message = read_as<Rej>(m);
            break;
        case Attribute::kRep:
            message = read_as<Rep>(m);
            break;
        case Attribute::kRtu:
            message = read_as<Rtu>(m);
            break;
        case Attribute::kDreq:
            message = read_as<Dreq>(m);
            break;
        case Attribute::kDrep:
            message = read_as<Drep>(m);
            break;
        case Attribute::kSidrReq:
            message = read_as<SidrReq>(m);
            break;
        case Attribute::kSidrRep:
            message = read_as<SidrRep>(m);
            break;
        case Attribute::kClassPortInfo:
        case Attribute::kLap:
        case Attribute::kApr:
            return DecodeError::kUnsupportedAttribute;
        default:
            return DecodeError::kUnknownAttribute;
    }
    out.header = h;
    out.message = std::move(message);
    return DecodeError::kOk;
}

namespace {

// The 16 bytes of `address` in the header (IPv4: 12 zero bytes first).
std::array<uint8_t, 16> header_bytes(const wire::IpAddress& address) {
    std::array<uint8_t, 16> bytes = address.bytes();
    if (address.is_v4()) {
        std::fill_n(bytes.begin(), 12, 0);
    }
    return bytes;
}

wire::IpAddress header_address(const uint8_t* bytes, bool v4) {
    if (v4) {
        uint32_t ipv4;
        memcpy(&ipv4, bytes + 12, sizeof(ipv4));
        return wire::IpAddress::v4(ipv4);
    }
    wire::IpAddress::Bytes raw;
    memcpy(raw.data(), bytes, raw.size());
    return wire::IpAddress(raw);
}

}  // namespace

std::array<uint8_t, kIpCmHeaderSize> encode_ip_cm_header(const IpCmHeader& h) {
    std::array<uint8_t, kIpCmHeaderSize> out{};
    out[0] = kIpCmVersion;
    out[1] = static_cast<uint8_t>((h.src_ip.is_v4() ? 4 : 6) << 4);
    store_be16(&out[2], h.src_port);
    put_bytes(&out[4], header_bytes(h.src_ip));
    put_bytes(&out[20], header_bytes(h.dst_ip));
    return out;
}

std::optional<IpCmHeader> decode_ip_cm_header(std::span<const uint8_t> private_data) {
    if (private_data.size() < kIpCmHeaderSize) {
        return std::nullopt;
    }
    const uint8_t* p = private_data.data();
    IpCmHeader h;
    const int ip_version = p[1] >> 4;
    if (p[0] != kIpCmVersion || (ip_version != 4 && ip_version != 6)) {
        return std::nullopt;
    }
    h.src_port = load_be16(p + 2);
    h.src_ip = header_address(p + 4, ip_version == 4);
    h.dst_ip = header_address(p + 20, ip_version == 4);
    return h;
}

}  // namespace uroce::cm
