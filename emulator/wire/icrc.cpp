#include "wire/icrc.h"

#include <algorithm>
#include <cstddef>

#include "wire/byte_order.h"
#include "wire/crc32.h"
#include "wire/headers.h"

namespace uroce::wire {
namespace {

constexpr size_t kIpv4HeaderBytes = 20;
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr uint8_t kIpProtoUdp = 17;
constexpr size_t kIpv4IdOffset = 4;

// Returns the pseudo header length written to out.
size_t masked_ip_udp(const IcrcAddresses& a, size_t udp_length, uint8_t* out) {
    uint8_t* udp;
    if (!a.ipv6) {
        out[0] = 0x45;  // version 4, 5 words, no options
        out[1] = 0xff;  // TOS
        store_be16(out + 2, static_cast<uint16_t>(kIpv4HeaderBytes + udp_length));
        store_be16(out + kIpv4IdOffset, a.ipv4_id);
        store_be16(out + 6, a.ipv4_dont_fragment ? 0x4000 : 0);
        out[8] = 0xff;  // TTL
        out[9] = kIpProtoUdp;
        store_be16(out + 10, 0xffff);  // header checksum
        std::copy_n(a.src.begin(), 4, out + 12);
        std::copy_n(a.dst.begin(), 4, out + 16);
        udp = out + kIpv4HeaderBytes;
    } else {
        // Version 6, then traffic class and flow label all ones.
        out[0] = 0x6f;
        out[1] = out[2] = out[3] = 0xff;
        store_be16(out + 4, static_cast<uint16_t>(udp_length));
        out[6] = kIpProtoUdp;
        out[7] = 0xff;  // hop limit
        std::copy_n(a.src.begin(), 16, out + 8);
        std::copy_n(a.dst.begin(), 16, out + 24);
        udp = out + kIpv6HeaderBytes;
    }
    store_be16(udp, a.src_port);
    store_be16(udp + 2, a.dst_port);
    store_be16(udp + 4, static_cast<uint16_t>(udp_length));
    store_be16(udp + 6, 0xffff);  // checksum
    return static_cast<size_t>(udp + kUdpHeaderBytes - out);
}

}  // namespace

IcrcAddresses IcrcAddresses::v4(std::array<uint8_t, 4> src, std::array<uint8_t, 4> dst,
                                uint16_t src_port, uint16_t dst_port) {
    IcrcAddresses a;
    std::copy(src.begin(), src.end(), a.src.begin());
    std::copy(dst.begin(), dst.end(), a.dst.begin());
    a.src_port = src_port;
    a.dst_port = dst_port;
    return a;
}

IcrcAddresses IcrcAddresses::v6(const std::array<uint8_t, 16>& src,
                                const std::array<uint8_t, 16>& dst, uint16_t src_port,
                                uint16_t dst_port) {
    IcrcAddresses a;
    a.ipv6 = true;
    a.src = src;
    a.dst = dst;
    a.src_port = src_port;
    a.dst_port = dst_port;
    return a;
}

IcrcAddresses IcrcAddresses::between(const IpAddress& src, const IpAddress& dst, uint16_t src_port,
                                     uint16_t dst_port) {
    if (!src.is_v4()) {
        return v6(src.bytes(), dst.bytes(), src_port, dst_port);
    }
    const auto last4 = [](const IpAddress& address) {
        std::array<uint8_t, 4> bytes;
        std::copy(address.bytes().begin() + 12, address.bytes().end(), bytes.begin());
        return bytes;
    };
    return v4(last4(src), last4(dst), src_port, dst_port);
}

uint32_t icrc(const IcrcAddresses& addr, std::span<const uint8_t> udp_payload_without_icrc) {
    const std::span<const uint8_t> p = udp_payload_without_icrc;
    const size_t udp_length = kUdpHeaderBytes + p.size() + kIcrcBytes;

    std::array<uint8_t, kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes> pseudo;
    size_t n = masked_ip_udp(addr, udp_length, pseudo.data());
    const size_t bth = std::min(p.size(), kBthBytes);
    std::copy_n(p.begin(), bth, pseudo.begin() + n);
    if (bth > 4) {
        pseudo[n + 4] = 0xff;  // FECN, BECN, resv6a
    }
    n += bth;

    uint32_t crc = crc32_update(kIcrcSeed, std::span(pseudo).first(n));
    crc = crc32_update(crc, p.subspan(bth));
    return ~crc;
}

uint32_t icrc_with_ipv4_id(uint32_t icrc, uint16_t from, uint16_t to,
                           size_t udp_payload_bytes_without_icrc) {
    const uint16_t change = from ^ to;
    const uint8_t id_bytes[2] = {static_cast<uint8_t>(change >> 8), static_cast<uint8_t>(change)};
    const size_t bytes_after_id =
        kIpv4HeaderBytes - kIpv4IdOffset - 2 + kUdpHeaderBytes + udp_payload_bytes_without_icrc;
    return icrc ^ crc32_shift(crc32_update(0, id_bytes), bytes_after_id);
}

std::optional<uint16_t> verify_icrc(const IcrcAddresses& addr,
                                    std::span<const uint8_t> udp_payload_without_icrc,
                                    uint32_t carried) {
    const uint32_t difference = icrc(addr, udp_payload_without_icrc) ^ carried;
    if (difference == 0) {
        return addr.ipv4_id;
    }
    if (addr.ipv6) {
        return std::nullopt;
    }
    const size_t bytes_after_id =
        kIpv4HeaderBytes - kIpv4IdOffset - 2 + kUdpHeaderBytes + udp_payload_without_icrc.size();
    const auto id_bytes = crc32_two_bytes_giving(crc32_unshift(difference, bytes_after_id));
    if (!id_bytes) {
        return std::nullopt;
    }
    return static_cast<uint16_t>(addr.ipv4_id ^ load_be16(id_bytes->data()));
}

}  // namespace uroce::wire
