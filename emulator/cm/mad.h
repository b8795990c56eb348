// Communication Manager MADs (IBA vol.1 chapter 12, 13.4): the 256-byte
// GMPs of management class 0x07 that QP1 carries to set up and tear down
// connections. Plain structs holding field values in host order, and their
// big-endian, bit-packed encodings at the byte and bit offsets of IBA tables
// 106-120 (as Linux's include/rdma/ibta_vol1_c12.h spells them). Reserved
// bits are written as zero and ignored when read. No I/O.
//
// Also the RDMA IP CM Service (IBA Annex A11) that rdma_cm speaks on top:
// the IP-derived Service ID and the addressing header at the start of a
// REQ's or SIDR_REQ's private data.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <array>
#include <optional>
#include <span>
#include <variant>

#include "wire/ip_address.h"

namespace uroce::cm {

inline constexpr size_t kMadSize = 256;
inline constexpr size_t kMadHeaderSize = 24;
// What follows the common MAD header.
inline constexpr size_t kMessageSize = kMadSize - kMadHeaderSize;

inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
// IBA 1.2 and later; what Linux's CM registers.
inline constexpr uint8_t kClassVersion = 2;
// Every CM message is a SEND: CM protocols have no request/response MADs.
inline constexpr uint8_t kMethodSend = 0x03;

enum class Attribute : uint16_t {
    kClassPortInfo = 0x0001,
    kReq = 0x0010,
    kMra = 0x0011,
    kRej = 0x0012,
    kRep = 0x0013,
    kRtu = 0x0014,
    kDreq = 0x0015,
    kDrep = 0x0016,
    kSidrReq = 0x0017,
    kSidrRep = 0x0018,
    kLap = 0x0019,
    kApr = 0x001A,
};

// "REQ", "REP", ...; "unknown" for any other value.
const char* name(Attribute);

using Gid = std::array<uint8_t, 16>;

// The message an MRA or REJ answers (2 bits).
enum class Answered : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// REQ's transport service type (2 bits); kExtended defers to the extended
// transport type, where 1 is XRC.
enum class TransportService : uint8_t { kRc = 0, kUc = 1, kRd = 2, kExtended = 3 };
inline constexpr uint8_t kExtendedTransportXrc = 1;

// REJ reasons, numbered as Linux's enum ib_cm_rej_reason.
enum class RejectReason : uint16_t {
    kNoQp = 1,
    kNoEec = 2,
    kNoResources = 3,
    kTimeout = 4,
    kUnsupported = 5,
    kInvalidCommId = 6,
    kInvalidCommInstance = 7,
    kInvalidServiceId = 8,
    kInvalidTransportType = 9,
    kStaleConnection = 10,
    kRdcNotExist = 11,
    kInvalidGid = 12,
    kInvalidLid = 13,
    kInvalidSl = 14,
    kInvalidTrafficClass = 15,
    kInvalidHopLimit = 16,
    kInvalidPacketRate = 17,
    kInvalidAltGid = 18,
    kInvalidAltLid = 19,
    kInvalidAltSl = 20,
    kInvalidAltTrafficClass = 21,
    kInvalidAltHopLimit = 22,
    kInvalidAltPacketRate = 23,
    kPortCmRedirect = 24,
    kPortRedirect = 25,
    kInvalidMtu = 26,
    kInsufficientRespResources = 27,
    kConsumerDefined = 28,
    kInvalidRnrRetry = 29,
    kDuplicateLocalCommId = 30,
    kInvalidClassVersion = 31,
    kInvalidFlowLabel = 32,
    kInvalidAltFlowLabel = 33,
    kVendorOptionNotSupported = 35,
};

// SIDR_REP status, numbered as Linux's enum ib_cm_sidr_status.
enum class SidrStatus : uint8_t {
    kSuccess = 0,
    kUnsupported = 1,  // no such Service ID
    kReject = 2,
    kNoQp = 3,
    kRedirect = 4,
    kUnsupportedVersion = 5,
};

// A REQ's primary or alternate path: 44 bytes on the wire.
struct Path {
    uint16_t local_lid = 0;
    uint16_t remote_lid = 0;
    Gid local_gid{};
    Gid remote_gid{};
    uint32_t flow_label = 0;  // 20 bits
    uint8_t packet_rate = 0;  // 6 bits
    uint8_t traffic_class = 0;
    uint8_t hop_limit = 0;
    uint8_t sl = 0;  // 4 bits
    bool subnet_local = false;
    uint8_t local_ack_timeout = 0;  // 5 bits
    friend bool operator==(const Path&, const Path&) = default;
};

// Connection request (IBA 12.6.5, table 106).
struct Req {
    static constexpr Attribute kAttribute = Attribute::kReq;
    uint32_t local_comm_id = 0;
    uint64_t service_id = 0;
    uint64_t local_ca_guid = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;  // 24 bits
    uint8_t responder_resources = 0;
    uint32_t local_eecn = 0;  // 24 bits
    uint8_t initiator_depth = 0;
    uint32_t remote_eecn = 0;                // 24 bits
    uint8_t remote_cm_response_timeout = 0;  // 5 bits
    TransportService transport_service = TransportService::kRc;
    bool end_to_end_flow_control = false;
    uint32_t starting_psn = 0;              // 24 bits
    uint8_t local_cm_response_timeout = 0;  // 5 bits
    uint8_t retry_count = 0;                // 3 bits
    uint16_t pkey = 0;
    uint8_t path_mtu = 0;  // 4 bits, IBA MTU code
    bool rdc_exists = false;
    uint8_t rnr_retry_count = 0;  // 3 bits
    uint8_t max_cm_retries = 0;   // 4 bits
    bool srq = false;
    uint8_t extended_transport_type = 0;  // 3 bits
    Path primary;
    Path alternate;
    // A bit of the alternate path's last byte that the path itself lacks.
    bool sap_supported = false;
    std::array<uint8_t, 92> private_data{};
    friend bool operator==(const Req&, const Req&) = default;
};

// Message receipt acknowledgement (IBA 12.6.6, table 107).
struct Mra {
    static constexpr Attribute kAttribute = Attribute::kMra;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    Answered message_mraed = Answered::kReq;
    uint8_t service_timeout = 0;  // 5 bits
    std::array<uint8_t, 222> private_data{};
    friend bool operator==(const Mra&, const Mra&) = default;
};

// Reject (IBA 12.6.7, table 108).
struct Rej {
    static constexpr Attribute kAttribute = Attribute::kRej;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    Answered message_rejected = Answered::kReq;
    uint8_t reject_info_length = 0;  // 7 bits: bytes of ari in use
    RejectReason reason = RejectReason::kConsumerDefined;
    std::array<uint8_t, 72> ari{};  // additional rejection information
    std::array<uint8_t, 148> private_data{};
    friend bool operator==(const Rej&, const Rej&) = default;
};

// Reply to request for communication (IBA 12.6.8, table 110).
struct Rep {
    static constexpr Attribute kAttribute = Attribute::kRep;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;     // 24 bits
    uint32_t local_eecn = 0;    // 24 bits
    uint32_t starting_psn = 0;  // 24 bits
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t target_ack_delay = 0;   // 5 bits
    uint8_t failover_accepted = 0;  // 2 bits: 0 accepted, 1 unsupported, 2 rejected
    bool end_to_end_flow_control = false;
    uint8_t rnr_retry_count = 0;  // 3 bits
    bool srq = false;
    uint64_t local_ca_guid = 0;
    std::array<uint8_t, 196> private_data{};
    friend bool operator==(const Rep&, const Rep&) = default;
};

// Ready to use (IBA table 111).
struct Rtu {
    static constexpr Attribute kAttribute = Attribute::kRtu;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, 224> private_data{};
    friend bool operator==(const Rtu&, const Rtu&) = default;
};

// Disconnection request (IBA table 112).
struct Dreq {
    static constexpr Attribute kAttribute = Attribute::kDreq;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn_eecn = 0;  // 24 bits
    std::array<uint8_t, 220> private_data{};
    friend bool operator==(const Dreq&, const Dreq&) = default;
};

// Disconnection reply (IBA table 113).
struct Drep {
    static constexpr Attribute kAttribute = Attribute::kDrep;
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, 224> private_data{};
    friend bool operator==(const Drep&, const Drep&) = default;
};

// Service ID resolution request (IBA 12.11.1, table 119).
struct SidrReq {
    static constexpr Attribute kAttribute = Attribute::kSidrReq;
    uint32_t request_id = 0;
    uint16_t pkey = 0;
    uint64_t service_id = 0;
    std::array<uint8_t, 216> private_data{};
    friend bool operator==(const SidrReq&, const SidrReq&) = default;
};

// Service ID resolution response (IBA table 120).
struct SidrRep {
    static constexpr Attribute kAttribute = Attribute::kSidrRep;
    uint32_t request_id = 0;
    SidrStatus status = SidrStatus::kSuccess;
    uint8_t additional_info_length = 0;
    uint32_t qpn = 0;  // 24 bits
    uint64_t service_id = 0;
    uint32_t qkey = 0;
    std::array<uint8_t, 72> class_port_info{};  // additional information
    std::array<uint8_t, 136> private_data{};
    friend bool operator==(const SidrRep&, const SidrRep&) = default;
};

// LAP, APR and ClassPortInfo are known attributes but not decoded here.
using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

Attribute attribute_of(const Message&);

// The common MAD header's fields past the three version/class bytes.
struct MadHeader {
    uint8_t method = kMethodSend;  // with the R bit (0x80)
    uint16_t status = 0;
    uint16_t class_specific = 0;
    uint64_t transaction_id = 0;
    Attribute attribute = Attribute::kReq;
    uint32_t attribute_modifier = 0;
    friend bool operator==(const MadHeader&, const MadHeader&) = default;
};

struct Mad {
    MadHeader header;
    Message message;
    friend bool operator==(const Mad&, const Mad&) = default;
};

// A whole CM MAD: a SEND with status, class-specific and attribute modifier
// zero, the attribute the message's type names.
std::array<std::byte, kMadSize> encode(uint64_t transaction_id, const Message& message);

enum class DecodeError {
    kOk,
    kShort,                 // fewer than kMadSize bytes
    kNotCm,                 // base version, class or class version
    kBadMethod,             // anything but SEND
    kUnsupportedAttribute,  // ClassPortInfo, LAP, APR
    kUnknownAttribute,
};

const char* name(DecodeError);

// Reads the first kMadSize bytes; `out` is written only on kOk.
DecodeError decode(std::span<const std::byte> bytes, Mad& out);

// ---- RDMA IP CM Service (IBA Annex A11) ----

// rdma_cm's port spaces (enum rdma_ucm_port_space): the Service ID's bits
// 31..16. The IP ones carry the 0x01 of Annex A11's prefix and the IP
// protocol number.
enum class PortSpace : uint16_t {
    kIpoib = 0x0002,
    kTcp = 0x0106,
    kUdp = 0x0111,
    kIb = 0x013F,
};

// The Service ID under which rdma_cm listens on `port` of port space `ps`.
constexpr uint64_t service_id(PortSpace ps, uint16_t port) {
    return uint64_t{static_cast<uint16_t>(ps)} << 16 | port;
}
constexpr PortSpace port_space_of(uint64_t service_id) {
    return static_cast<PortSpace>(static_cast<uint16_t>(service_id >> 16));
}
constexpr uint16_t port_of(uint64_t service_id) {
    return static_cast<uint16_t>(service_id);
}
// Annex A11's range, 0x0000_0000_01xx_xxxx, where the private data starts
// with an IpCmHeader.
constexpr bool is_ip_service_id(uint64_t service_id) {
    return (service_id & 0xFFFFFFFFFF000000ull) == 0x0000000001000000ull;
}

inline constexpr size_t kIpCmHeaderSize = 36;
// Major version 0 (bits 7..4), minor 0 (bits 3..0).
inline constexpr uint8_t kIpCmVersion = 0x00;

// The header at the start of a REQ's or SIDR_REQ's private data under an IP
// Service ID. The destination port is the Service ID's. Its IP version is
// the addresses' (both of one family). On the wire an IPv4 address takes
// the last 4 bytes with the first 12 zero (not IPv4-mapped: Annex A11 and
// Linux's cma_hdr leave them zero).
struct IpCmHeader {
    uint16_t src_port = 0;
    wire::IpAddress src_ip = wire::IpAddress::v4(0);
    wire::IpAddress dst_ip = wire::IpAddress::v4(0);
    friend bool operator==(const IpCmHeader&, const IpCmHeader&) = default;
};

std::array<uint8_t, kIpCmHeaderSize> encode_ip_cm_header(const IpCmHeader& header);

// Nothing when `private_data` is shorter than the header, its version is not
// 0.0 or its IP version is neither 4 nor 6.
std::optional<IpCmHeader> decode_ip_cm_header(std::span<const uint8_t> private_data);

}  // namespace uroce::cm
