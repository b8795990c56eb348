// The RoCEv2 invariant CRC (IBA Annex A17.4.1; Linux rxe_icrc.c): a CRC-32
// over a pseudo packet made of 8 bytes of 0xff standing for the masked LRH,
// the IP header, the UDP header, the BTH and everything after it up to the
// ICRC, with the fields routers may change set to all ones:
//   IPv4: TOS, TTL, header checksum;  IPv6: traffic class, flow label, hop
//   limit;  UDP: checksum;  BTH: the byte holding FECN, BECN and resv6a.
// The result is stored after the payload least significant byte first, as
// rxe and ConnectX hardware do.
//
// uroce sends through ordinary UDP sockets and never sees the IP header, so
// the header is synthesised: version 4, no options, IP ID 0 and DF set,
// which is what Linux puts on datagrams from an unconnected socket with
// IP_PMTUDISC_DO (ip_select_ident_segs()). Other senders pick other IDs
// (rxe's prepare_ipv4_hdr() draws one from __ip_select_ident(), hardware
// counts), which a UDP receiver cannot see: verify_icrc() solves for the ID
// instead (IPv6 has no such field).
#pragma once

#include <stdint.h>

#include <array>
#include <optional>
#include <span>

#include "wire/ip_address.h"

namespace uroce::wire {

inline constexpr uint16_t kRoceV2Port = 4791;

// crc32_update(~0, 8 bytes of 0xff): the register after the masked LRH.
inline constexpr uint32_t kIcrcSeed = 0xdebb20e3;

// The IP and UDP header fields the ICRC covers. Addresses are in network
// byte order; lengths follow from the UDP payload.
struct IcrcAddresses {
    bool ipv6 = false;
    std::array<uint8_t, 16> src{};  // IPv4 uses the first 4 bytes
    std::array<uint8_t, 16> dst{};
    uint16_t src_port = 0;
    uint16_t dst_port = kRoceV2Port;
    uint16_t ipv4_id = 0;
    bool ipv4_dont_fragment = true;

    static IcrcAddresses v4(std::array<uint8_t, 4> src, std::array<uint8_t, 4> dst,
                            uint16_t src_port, uint16_t dst_port = kRoceV2Port);
    static IcrcAddresses v6(const std::array<uint8_t, 16>& src, const std::array<uint8_t, 16>& dst,
                            uint16_t src_port, uint16_t dst_port = kRoceV2Port);
    // Of `src` and `dst`'s family (both of one).
    static IcrcAddresses between(const IpAddress& src, const IpAddress& dst, uint16_t src_port,
                                 uint16_t dst_port = kRoceV2Port);
};

// The ICRC of a UDP payload that starts with a BTH, given without the four
// ICRC bytes (whose length still counts in the IP and UDP lengths).
uint32_t icrc(const IcrcAddresses& addr, std::span<const uint8_t> udp_payload_without_icrc);

// Checks a received packet's carried ICRC and returns the IPv4 ID under
// which it verifies, or nothing when none does. The ICRC is linear in the
// ID: the difference between the carried value and the one computed with
// addr.ipv4_id is the ID's difference moved through the bytes after it, so
// moving it back and solving for two bytes finds the only candidate. That
// costs one CRC and a few dozen multiplications, but it spends 16 of the 32
// check bits on the ID: a corrupted IPv4 packet passes with probability
// 2^-16 rather than 2^-32 (UDP's own checksum still covers it). IPv6
// packets are checked with all 32 bits.
std::optional<uint16_t> verify_icrc(const IcrcAddresses& addr,
                                    std::span<const uint8_t> udp_payload_without_icrc,
                                    uint32_t carried);

// The ICRC of the same IPv4 packet under IP ID `to` instead of `from`, in
// a few multiplications: a segmented send (UDP_SEGMENT) leaves with IDs
// 0, 1, 2, ... (Linux counts up from the first packet's 0), and a peer that
// checks the ICRC against the ID it received, as rxe does, needs each one's.
uint32_t icrc_with_ipv4_id(uint32_t icrc, uint16_t from, uint16_t to,
                           size_t udp_payload_bytes_without_icrc);

inline void store_icrc(uint32_t icrc, std::span<uint8_t, 4> out) {
    out[0] = static_cast<uint8_t>(icrc);
    out[1] = static_cast<uint8_t>(icrc >> 8);
    out[2] = static_cast<uint8_t>(icrc >> 16);
    out[3] = static_cast<uint8_t>(icrc >> 24);
}

inline uint32_t load_icrc(std::span<const uint8_t, 4> in) {
    return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

}  // namespace uroce::wire
