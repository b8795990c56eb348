// RoCE v2 over IPv4 names an address by its IPv4-mapped GID, ::ffff:a.b.c.d.
#pragma once

#include <stdint.h>
#include <string.h>

#include <array>

namespace uroce::wire {

// The GID of `ipv4` (network order).
inline std::array<uint8_t, 16> ipv4_mapped_gid(uint32_t ipv4) {
    std::array<uint8_t, 16> gid{};
    gid[10] = gid[11] = 0xff;
    memcpy(&gid[12], &ipv4, sizeof(ipv4));
    return gid;
}

// The IPv4 address (network order) an IPv4-mapped GID carries.
inline uint32_t gid_ipv4(const uint8_t (&gid)[16]) {
    uint32_t ipv4;
    memcpy(&ipv4, &gid[12], sizeof(ipv4));
    return ipv4;
}

// Whether `gid` is IPv4-mapped (::ffff:a.b.c.d).
inline bool is_ipv4_mapped(const std::array<uint8_t, 16>& gid) {
    static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(gid.data(), kPrefix, sizeof(kPrefix)) == 0;
}

inline uint32_t gid_ipv4(const std::array<uint8_t, 16>& gid) {
    uint32_t ipv4;
    memcpy(&ipv4, &gid[12], sizeof(ipv4));
    return ipv4;
}

// The four bytes of `ipv4` (network order), as the ICRC covers them.
inline std::array<uint8_t, 4> ipv4_bytes(uint32_t ipv4) {
    std::array<uint8_t, 4> bytes;
    memcpy(bytes.data(), &ipv4, sizeof(ipv4));
    return bytes;
}

}  // namespace uroce::wire
