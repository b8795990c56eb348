// The 40 bytes a UD receive buffer starts with (IBV_WC_GRH). Over RoCEv2
// with IPv4 they hold 20 zero bytes and then the packet's IPv4 header; with
// IPv6, the packet's IPv6 header, which has the GRH's layout. That is what
// the kernel's Soft-RoCE writes and ibv_init_ah_from_wc() reads (it
// believes the IPv4 header when its checksum is right, else the GRH).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <array>

#include "wire/ip_address.h"

namespace uroce::wire {

inline constexpr size_t kGrhBytes = 40;
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kUdpHeaderBytes = 8;

// What a UD receive's ibv_wc.sl says on RoCE: the network header before the
// payload, as mlx5 reports it from its CQE (MLX5_CQE_ROCE_L3_HEADER_TYPE_*:
// 0 GRH, i.e. RoCE v1, 1 IPv6, 2 IPv4). UCX's ud_verbs reads the GRH's
// addresses by it.
inline constexpr uint8_t kRoceL3HeaderIpv6 = 1;
inline constexpr uint8_t kRoceL3HeaderIpv4 = 2;
inline uint8_t roce_l3_header(const IpAddress& address) {
    return address.is_v4() ? kRoceL3HeaderIpv4 : kRoceL3HeaderIpv6;
}

// `src` and `dest` of one family; `udp_payload` is the RoCEv2 packet from
// its BTH to its ICRC; `hop_limit` the TTL or hop limit it arrived with.
std::array<uint8_t, kGrhBytes> received_grh(const IpAddress& src, const IpAddress& dest,
                                            size_t udp_payload, uint8_t hop_limit);

}  // namespace uroce::wire
