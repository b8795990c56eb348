#include "steering/frame.h"

#include <string.h>

namespace uroce::steering {
namespace {

// The kernel's encoding of the IPv4 flags in flow specs (enum ib_ipv4_flags),
// which is not the header's bit order.
constexpr uint8_t kDontFragment = 0x2;
constexpr uint8_t kMoreFragments = 0x4;

constexpr uint16_t kVlan = 0x8100;
constexpr uint16_t kIpv4 = 0x0800;
constexpr uint16_t kIpv6 = 0x86dd;
constexpr uint8_t kTcp = 6;
constexpr uint8_t kUdp = 17;

uint16_t be16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

void parse_ports(std::span<const uint8_t> l4, FrameFields& f) {
    if ((f.ip_proto != kTcp && f.ip_proto != kUdp) || l4.size() < 4) {
        return;
    }
    f.tcp = f.ip_proto == kTcp;
    f.udp = f.ip_proto == kUdp;
    memcpy(&f.src_port, l4.data(), 2);
    memcpy(&f.dst_port, l4.data() + 2, 2);
}

void parse_ipv4(std::span<const uint8_t> ip, FrameFields& f) {
    const size_t header = size_t{ip.empty() ? 0u : ip[0] & 0xfu} * 4;
    if (ip.size() < 20 || (ip[0] >> 4) != 4 || header < 20 || header > ip.size()) {
        return;
    }
    f.ipv4 = true;
    f.tos = ip[1];
    f.ip_flags = static_cast<uint8_t>(((ip[6] & 0x40) ? kDontFragment : 0) |
                                      ((ip[6] & 0x20) ? kMoreFragments : 0));
    f.ttl = ip[8];
    f.ip_proto = ip[9];
    memcpy(&f.src_ip4, ip.data() + 12, 4);
    memcpy(&f.dst_ip4, ip.data() + 16, 4);
    const uint16_t fragment_offset = be16(ip.data() + 6) & 0x1fff;
    if (fragment_offset == 0) {
        parse_ports(ip.subspan(header), f);
    }
}

void parse_ipv6(std::span<const uint8_t> ip, FrameFields& f) {
    if (ip.size() < 40 || (ip[0] >> 4) != 6) {
        return;
    }
    f.ipv6 = true;
    f.tos = static_cast<uint8_t>((ip[0] & 0xf) << 4 | ip[1] >> 4);
    f.flow_label = (uint32_t{ip[1]} & 0xf) << 16 | uint32_t{ip[2]} << 8 | ip[3];
    f.ip_proto = ip[6];
    f.ttl = ip[7];
    memcpy(f.src_ip6.data(), ip.data() + 8, 16);
    memcpy(f.dst_ip6.data(), ip.data() + 24, 16);
    parse_ports(ip.subspan(40), f);
}

}  // namespace

std::optional<FrameFields> parse_frame(std::span<const std::byte> frame) {
    const auto bytes = std::span(reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
    if (bytes.size() < 14) {
        return std::nullopt;
    }
    FrameFields f;
    memcpy(f.dst_mac.data(), bytes.data(), 6);
    memcpy(f.src_mac.data(), bytes.data() + 6, 6);
    size_t offset = 12;
    f.ether_type = be16(bytes.data() + offset);
    if (f.ether_type == kVlan) {
        if (bytes.size() < 18) {
            return std::nullopt;
        }
        f.has_vlan = true;
        f.vlan_tag = be16(bytes.data() + 14);
        offset = 16;
        f.ether_type = be16(bytes.data() + offset);
    }
    const auto payload = bytes.subspan(offset + 2);
    if (f.ether_type == kIpv4) {
        parse_ipv4(payload, f);
    } else if (f.ether_type == kIpv6) {
        parse_ipv6(payload, f);
    }
    return f;
}

}  // namespace uroce::steering
