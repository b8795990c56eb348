#include "cm/mad.h"

#include <string.h>

#include <algorithm>
#include <concepts>
#include <type_traits>

#include "wire/byte_order.h"

namespace uroce::cm {

namespace {

using wire::load_be16;
using wire::load_be32;
using wire::load_be64;
using wire::store_be16;
using wire::store_be64;

// Each message's layout is written once, as a list of its fields, and
// both directions walk it: `layout(message, field)` calls field(byte, bit,
// width, member) for every bit field (IBA's Byte[Bit], bit 0 the most
// significant; big-endian across bytes), field(byte, array) for byte
// strings and field(byte, path) for a path's 44 bytes. Offsets are of the
// CM message, which starts after the MAD header.

template <class R, class M>
concept MessageOf = std::same_as<std::remove_const_t<R>, M>;

// A path's 44 bytes, at REQ offset 52 (primary) or 96 (alternate).
template <MessageOf<Path> R, class Field>
void layout(R& p, Field&& field) {
    field(0, 0, 16, p.local_lid);
    field(2, 0, 16, p.remote_lid);
    field(4, p.local_gid);
    field(20, p.remote_gid);
    field(36, 0, 20, p.flow_label);
    field(39, 2, 6, p.packet_rate);
    field(40, 0, 8, p.traffic_class);
    field(41, 0, 8, p.hop_limit);
    field(42, 0, 4, p.sl);
    field(42, 4, 1, p.subnet_local);
    field(43, 0, 5, p.local_ack_timeout);
}

template <MessageOf<Req> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(8, 0, 64, r.service_id);
    field(16, 0, 64, r.local_ca_guid);
    field(28, 0, 32, r.local_qkey);
    field(32, 0, 24, r.local_qpn);
    field(35, 0, 8, r.responder_resources);
    field(36, 0, 24, r.local_eecn);
    field(39, 0, 8, r.initiator_depth);
    field(40, 0, 24, r.remote_eecn);
    field(43, 0, 5, r.remote_cm_response_timeout);
    field(43, 5, 2, r.transport_service);
    field(43, 7, 1, r.end_to_end_flow_control);
    field(44, 0, 24, r.starting_psn);
    field(47, 0, 5, r.local_cm_response_timeout);
    field(47, 5, 3, r.retry_count);
    field(48, 0, 16, r.pkey);
    field(50, 0, 4, r.path_mtu);
    field(50, 4, 1, r.rdc_exists);
    field(50, 5, 3, r.rnr_retry_count);
    field(51, 0, 4, r.max_cm_retries);
    field(51, 4, 1, r.srq);
    field(51, 5, 3, r.extended_transport_type);
    field(52, r.primary);
    field(96, r.alternate);
    field(139, 5, 1, r.sap_supported);  // in the alternate path's last byte
    field(140, r.private_data);
}

template <MessageOf<Mra> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(4, 0, 32, r.remote_comm_id);
    field(8, 0, 2, r.message_mraed);
    field(9, 0, 5, r.service_timeout);
    field(10, r.private_data);
}

template <MessageOf<Rej> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(4, 0, 32, r.remote_comm_id);
    field(8, 0, 2, r.message_rejected);
    field(9, 0, 7, r.reject_info_length);
    field(10, 0, 16, r.reason);
    field(12, r.ari);
    field(84, r.private_data);
}

template <MessageOf<Rep> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(4, 0, 32, r.remote_comm_id);
    field(8, 0, 32, r.local_qkey);
    field(12, 0, 24, r.local_qpn);
    field(16, 0, 24, r.local_eecn);
    field(20, 0, 24, r.starting_psn);
    field(24, 0, 8, r.responder_resources);
    field(25, 0, 8, r.initiator_depth);
    field(26, 0, 5, r.target_ack_delay);
    field(26, 5, 2, r.failover_accepted);
    field(26, 7, 1, r.end_to_end_flow_control);
    field(27, 0, 3, r.rnr_retry_count);
    field(27, 3, 1, r.srq);
    field(28, 0, 64, r.local_ca_guid);
    field(36, r.private_data);
}

// RTU and DREP: the two communication ids and private data.
template <class R, class Field>
requires MessageOf<R, Rtu> || MessageOf<R, Drep>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(4, 0, 32, r.remote_comm_id);
    field(8, r.private_data);
}

template <MessageOf<Dreq> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.local_comm_id);
    field(4, 0, 32, r.remote_comm_id);
    field(8, 0, 24, r.remote_qpn_eecn);
    field(12, r.private_data);
}

template <MessageOf<SidrReq> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.request_id);
    field(4, 0, 16, r.pkey);
    field(8, 0, 64, r.service_id);
    field(16, r.private_data);
}

template <MessageOf<SidrRep> R, class Field>
void layout(R& r, Field&& field) {
    field(0, 0, 32, r.request_id);
    field(4, 0, 8, r.status);
    field(5, 0, 8, r.additional_info_length);
    field(8, 0, 24, r.qpn);
    field(12, 0, 64, r.service_id);  // 4-byte aligned only, as IBA lays it out
    field(20, 0, 32, r.qkey);
    field(24, r.class_port_info);
    field(96, r.private_data);
}

uint64_t low_bits(unsigned width) {
    return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
}

// The bytes a field of `width` bits at bit `bit` spans (at most 8), and how
// far its lowest bit is from the end of the last.
struct Span {
    unsigned bytes;
    unsigned shift;
};
Span span_of(unsigned bit, unsigned width) {
    const unsigned bytes = (bit + width + 7) / 8;
    return {bytes, bytes * 8 - bit - width};
}

uint64_t load_bits(const uint8_t* p, unsigned bit, unsigned width) {
    const Span span = span_of(bit, width);
    uint64_t word = 0;
    for (unsigned i = 0; i < span.bytes; ++i) {
        word = word << 8 | p[i];
    }
    return word >> span.shift & low_bits(width);
}

// Keeps the bits around the field (a byte may hold several).
void store_bits(uint8_t* p, unsigned bit, unsigned width, uint64_t value) {
    const Span span = span_of(bit, width);
    uint64_t word = 0;
    for (unsigned i = 0; i < span.bytes; ++i) {
        word = word << 8 | p[i];
    }
    const uint64_t mask = low_bits(width) << span.shift;
    word = (word & ~mask) | (value << span.shift & mask);
    for (unsigned i = span.bytes; i-- > 0; word >>= 8) {
        p[i] = static_cast<uint8_t>(word);
    }
}

// The encoding direction: each field's value into the message's bytes.
struct Writer {
    uint8_t* m;
    template <class T>
    void operator()(size_t byte, unsigned bit, unsigned width, const T& value) const {
        store_bits(m + byte, bit, width, static_cast<uint64_t>(value));
    }
    template <size_t N>
    void operator()(size_t byte, const std::array<uint8_t, N>& bytes) const {
        memcpy(m + byte, bytes.data(), N);
    }
    void operator()(size_t byte, const Path& path) const { layout(path, Writer{m + byte}); }
};

// The decoding direction: each field from the message's bytes.
struct Reader {
    const uint8_t* m;
    template <class T>
    void operator()(size_t byte, unsigned bit, unsigned width, T& value) const {
        value = static_cast<T>(load_bits(m + byte, bit, width));
    }
    template <size_t N>
    void operator()(size_t byte, std::array<uint8_t, N>& bytes) const {
        memcpy(bytes.data(), m + byte, N);
    }
    void operator()(size_t byte, Path& path) const { layout(path, Reader{m + byte}); }
};

template <class M>
void put(uint8_t* m, const M& message) {
    layout(message, Writer{m});
}

template <class M>
void get(const uint8_t* m, M& message) {
    layout(message, Reader{m});
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
    const std::array<uint8_t, 16> src = header_bytes(h.src_ip);
    const std::array<uint8_t, 16> dst = header_bytes(h.dst_ip);
    memcpy(&out[4], src.data(), src.size());
    memcpy(&out[20], dst.data(), dst.size());
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
