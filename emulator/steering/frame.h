// The fields of an Ethernet frame that flow rules match and RSS hashes:
// MACs, an 802.1Q tag, and IPv4/IPv6 with TCP/UDP ports.
#pragma once

#include <stdint.h>

#include <array>
#include <optional>
#include <span>

namespace uroce::steering {

struct FrameFields {
    std::array<uint8_t, 6> dst_mac{}, src_mac{};
    uint16_t ether_type = 0;  // host order; the one after an 802.1Q tag
    bool has_vlan = false;
    uint16_t vlan_tag = 0;  // host order TCI
    bool ipv4 = false, ipv6 = false;
    uint32_t src_ip4 = 0, dst_ip4 = 0;       // network order, as in the frame
    uint8_t ip_proto = 0, tos = 0, ttl = 0;  // IPv6: next header, traffic class, hop limit
    uint8_t ip_flags = 0;  // IPv4: 0x2 don't fragment, 0x4 more fragments (as flow specs)
    std::array<uint8_t, 16> src_ip6{}, dst_ip6{};
    uint32_t flow_label = 0;  // host order
    bool tcp = false, udp = false;
    uint16_t src_port = 0, dst_port = 0;  // network order, as in the frame
};

// Null when shorter than its Ethernet header; truncated IP or L4 headers
// leave those parts unset. Ports only from a first (or unfragmented) IPv4
// fragment, or the IPv6 fixed header's next header.
std::optional<FrameFields> parse_frame(std::span<const std::byte> frame);

}  // namespace uroce::steering
