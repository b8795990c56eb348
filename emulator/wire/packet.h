// Whole RoCEv2 UDP payloads: BTH, the extension headers its opcode requires,
// payload, pad to a 4-byte multiple and the ICRC. Building writes into a
// caller's buffer and parsing only points into the caller's bytes; neither
// allocates.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <span>

#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

namespace uroce::wire {

// Values for every header; only those the opcode carries are written or
// were read.
struct PacketHeaders {
    Bth bth;
    Deth deth;
    Xrceth xrceth;
    Reth reth;
    Feth feth;
    AtomicEth atomic_eth;
    Aeth aeth;
    AtomicAckEth atomic_ack_eth;
    ImmDt immdt;
    Ieth ieth;
};

struct ParsedPacket {
    const OpcodeInfo* info = nullptr;
    PacketHeaders hdr;
    std::span<const uint8_t> payload;  // without the pad
};

enum class ParseError : uint8_t {
    kOk,
    kTooShortForBth,
    kUnknownOpcode,
    kBadTransportVersion,
    kTooShortForHeaders,  // the opcode's headers and the ICRC do not fit
    kPadInconsistent,     // payload and pad not a 4-byte multiple, or pad beyond the payload
    kUnexpectedPayload,   // bytes between the headers and the ICRC of an opcode without payload
    kIcrcMismatch,
};

const char* parse_error_text(ParseError e);

// Checks the layout of a UDP payload and decodes it into out, which is only
// meaningful when kOk is returned. Reads nothing outside udp_payload.
ParseError parse_headers(std::span<const uint8_t> udp_payload, ParsedPacket& out);

// parse_headers() followed by the ICRC check.
ParseError parse_packet(std::span<const uint8_t> udp_payload, const IcrcAddresses& addr,
                        ParsedPacket& out);

enum class BuildError : uint8_t {
    kOk,
    kUnknownOpcode,
    kUnexpectedPayload,  // payload bytes for an opcode without payload
    kTooLarge,           // beyond what an IPv4 UDP datagram holds
    kBufferTooSmall,
};

const char* build_error_text(BuildError e);

struct BuildResult {
    BuildError error;
    size_t size;  // bytes written on kOk
};

// UDP payload bytes of a packet with this opcode and payload length.
size_t packet_size(const OpcodeInfo& info, size_t payload_bytes);

// Writes headers.bth.opcode's headers, the payload, zero pad and the ICRC to
// the start of out. The BTH pad count is derived from the payload length;
// every other BTH field is taken from headers.bth as given. Without
// addresses the ICRC is left 0: for packets that never leave the daemon
// and that nobody records.
BuildResult build_packet(const PacketHeaders& headers, std::span<const uint8_t> payload,
                         const IcrcAddresses* addr, std::span<uint8_t> out);
inline BuildResult build_packet(const PacketHeaders& headers, std::span<const uint8_t> payload,
                                const IcrcAddresses& addr, std::span<uint8_t> out) {
    return build_packet(headers, payload, &addr, out);
}

}  // namespace uroce::wire
