// The 40 bytes a UD receive buffer starts with (IBV_WC_GRH). Over RoCEv2
// with IPv4 they hold 20 zero bytes and then the packet's IPv4 header, the
// layout the kernel's Soft-RoCE writes and ibv_init_ah_from_wc() reads (it
// believes the IPv4 header when its checksum is right).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <array>

namespace uroce::wire {

inline constexpr size_t kGrhBytes = 40;
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kUdpHeaderBytes = 8;

// What a UD receive's ibv_wc.sl says on RoCE: the network header before the
// payload, as mlx5 reports it from its CQE (MLX5_CQE_ROCE_L3_HEADER_TYPE_*:
// 0 GRH, i.e. RoCE v1, 1 IPv6, 2 IPv4). UCX's ud_verbs reads the GRH's
// addresses by it.
inline constexpr uint8_t kRoceL3HeaderIpv4 = 2;

// `src_ipv4`/`dest_ipv4` in network order; `udp_payload` is the RoCEv2
// packet from its BTH to its ICRC.
std::array<uint8_t, kGrhBytes> ipv4_grh(uint32_t src_ipv4, uint32_t dest_ipv4, size_t udp_payload,
                                        uint8_t ttl);

}  // namespace uroce::wire
