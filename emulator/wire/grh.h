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

// `src_ipv4`/`dest_ipv4` in network order; `udp_payload` is the RoCEv2
// packet from its BTH to its ICRC.
std::array<uint8_t, kGrhBytes> ipv4_grh(uint32_t src_ipv4, uint32_t dest_ipv4, size_t udp_payload,
                                        uint8_t ttl);

}  // namespace uroce::wire
