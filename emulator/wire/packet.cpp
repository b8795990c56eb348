#include "wire/packet.h"

#include <algorithm>

namespace uroce::wire {
namespace {

// The largest UDP payload an IPv4 datagram carries.
constexpr size_t kMaxUdpPayload = 65535 - 20 - 8;

template <size_t N>
std::span<uint8_t, N> at(std::span<uint8_t> buf, size_t offset) {
    return buf.subspan(offset).first<N>();
}

template <size_t N>
std::span<const uint8_t, N> at(std::span<const uint8_t> buf, size_t offset) {
    return buf.subspan(offset).first<N>();
}

void encode_ext(ExtHeader h, const PacketHeaders& in, std::span<uint8_t> buf, size_t off) {
    switch (h) {
        case ExtHeader::kDeth:
            return encode(in.deth, at<kDethBytes>(buf, off));
        case ExtHeader::kXrceth:
            return encode(in.xrceth, at<kXrcethBytes>(buf, off));
        case ExtHeader::kReth:
            return encode(in.reth, at<kRethBytes>(buf, off));
        case ExtHeader::kFeth:
            return encode(in.feth, at<kFethBytes>(buf, off));
        case ExtHeader::kAtomicEth:
            return encode(in.atomic_eth, at<kAtomicEthBytes>(buf, off));
        case ExtHeader::kAeth:
            return encode(in.aeth, at<kAethBytes>(buf, off));
        case ExtHeader::kAtomicAckEth:
            return encode(in.atomic_ack_eth, at<kAtomicAckEthBytes>(buf, off));
        case ExtHeader::kImmDt:
            return encode(in.immdt, at<kImmDtBytes>(buf, off));
        case ExtHeader::kIeth:
            return encode(in.ieth, at<kIethBytes>(buf, off));
        case ExtHeader::kCnpReserved:
            std::fill_n(buf.begin() + static_cast<std::ptrdiff_t>(off), kCnpReservedBytes, 0);
            return;
    }
}

void decode_ext(ExtHeader h, std::span<const uint8_t> buf, size_t off, PacketHeaders& out) {
    switch (h) {
        case ExtHeader::kDeth:
            out.deth = decode_deth(at<kDethBytes>(buf, off));
            return;
        case ExtHeader::kXrceth:
            out.xrceth = decode_xrceth(at<kXrcethBytes>(buf, off));
            return;
        case ExtHeader::kReth:
            out.reth = decode_reth(at<kRethBytes>(buf, off));
            return;
        case ExtHeader::kFeth:
            out.feth = decode_feth(at<kFethBytes>(buf, off));
            return;
        case ExtHeader::kAtomicEth:
            out.atomic_eth = decode_atomic_eth(at<kAtomicEthBytes>(buf, off));
            return;
        case ExtHeader::kAeth:
            out.aeth = decode_aeth(at<kAethBytes>(buf, off));
            return;
        case ExtHeader::kAtomicAckEth:
            out.atomic_ack_eth = decode_atomic_ack_eth(at<kAtomicAckEthBytes>(buf, off));
            return;
        case ExtHeader::kImmDt:
            out.immdt = decode_immdt(at<kImmDtBytes>(buf, off));
            return;
        case ExtHeader::kIeth:
            out.ieth = decode_ieth(at<kIethBytes>(buf, off));
            return;
        case ExtHeader::kCnpReserved:
            return;  // ignored on receive
    }
}

constexpr size_t pad_for(size_t payload_bytes) {
    return (4 - payload_bytes % 4) % 4;
}

}  // namespace

const char* parse_error_text(ParseError e) {
    switch (e) {
        case ParseError::kOk:
            return "ok";
        case ParseError::kTooShortForBth:
            return "too short for a BTH";
        case ParseError::kUnknownOpcode:
            return "unknown opcode";
        case ParseError::kBadTransportVersion:
            return "unsupported transport header version";
        case ParseError::kTooShortForHeaders:
            return "too short for the opcode's headers and ICRC";
        case ParseError::kPadInconsistent:
            return "pad count inconsistent with the packet length";
        case ParseError::kUnexpectedPayload:
            return "payload on an opcode that carries none";
        case ParseError::kIcrcMismatch:
            return "ICRC mismatch";
    }
    return "unknown parse error";
}

const char* build_error_text(BuildError e) {
    switch (e) {
        case BuildError::kOk:
            return "ok";
        case BuildError::kUnknownOpcode:
            return "unknown opcode";
        case BuildError::kUnexpectedPayload:
            return "payload on an opcode that carries none";
        case BuildError::kTooLarge:
            return "packet too large for a UDP datagram";
        case BuildError::kBufferTooSmall:
            return "buffer too small";
    }
    return "unknown build error";
}

ParseError parse_headers(std::span<const uint8_t> udp_payload, ParsedPacket& out) {
    const std::span<const uint8_t> buf = udp_payload;
    if (buf.size() < kBthBytes) {
        return ParseError::kTooShortForBth;
    }
    out.hdr.bth = decode_bth(at<kBthBytes>(buf, 0));
    const OpcodeInfo* info = opcode_info(out.hdr.bth.opcode);
    if (info == nullptr) {
        return ParseError::kUnknownOpcode;
    }
    if (out.hdr.bth.tver != 0) {
        return ParseError::kBadTransportVersion;
    }
    if (buf.size() < info->header_bytes + kIcrcBytes) {
        return ParseError::kTooShortForHeaders;
    }
    // Payload and pad together.
    const size_t rest = buf.size() - info->header_bytes - kIcrcBytes;
    const size_t pad = out.hdr.bth.pad;
    if (!info->payload && rest != 0) {
        return ParseError::kUnexpectedPayload;
    }
    if (rest % 4 != 0 || pad > rest) {
        return ParseError::kPadInconsistent;
    }
    size_t off = kBthBytes;
    for (size_t i = 0; i < info->header_count; ++i) {
        decode_ext(info->headers[i], buf, off, out.hdr);
        off += ext_header_bytes(info->headers[i]);
    }
    out.info = info;
    out.payload = buf.subspan(off, rest - pad);
    return ParseError::kOk;
}

ParseError parse_packet(std::span<const uint8_t> udp_payload, const IcrcAddresses& addr,
                        ParsedPacket& out) {
    const ParseError e = parse_headers(udp_payload, out);
    if (e != ParseError::kOk) {
        return e;
    }
    const size_t covered = udp_payload.size() - kIcrcBytes;
    const uint32_t carried = load_icrc(at<kIcrcBytes>(udp_payload, covered));
    if (!verify_icrc(addr, udp_payload.first(covered), carried)) {
        return ParseError::kIcrcMismatch;
    }
    return ParseError::kOk;
}

size_t packet_size(const OpcodeInfo& info, size_t payload_bytes) {
    return info.header_bytes + payload_bytes + pad_for(payload_bytes) + kIcrcBytes;
}

BuildResult build_packet(const PacketHeaders& headers, std::span<const uint8_t> payload,
                         const IcrcAddresses* addr, std::span<uint8_t> out) {
    const OpcodeInfo* info = opcode_info(headers.bth.opcode);
    if (info == nullptr) {
        return {BuildError::kUnknownOpcode, 0};
    }
    if (!info->payload && !payload.empty()) {
        return {BuildError::kUnexpectedPayload, 0};
    }
    const size_t size = packet_size(*info, payload.size());
    if (size > kMaxUdpPayload) {
        return {BuildError::kTooLarge, 0};
    }
    if (out.size() < size) {
        return {BuildError::kBufferTooSmall, 0};
    }

    Bth bth = headers.bth;
    bth.pad = static_cast<uint8_t>(pad_for(payload.size()));
    encode(bth, at<kBthBytes>(out, 0));
    size_t off = kBthBytes;
    for (size_t i = 0; i < info->header_count; ++i) {
        encode_ext(info->headers[i], headers, out, off);
        off += ext_header_bytes(info->headers[i]);
    }
    std::copy(payload.begin(), payload.end(), out.begin() + static_cast<std::ptrdiff_t>(off));
    off += payload.size();
    std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(off), bth.pad, 0);
    off += bth.pad;
    store_icrc(addr ? icrc(*addr, out.first(off)) : 0, at<kIcrcBytes>(out, off));
    return {BuildError::kOk, size};
}

}  // namespace uroce::wire
