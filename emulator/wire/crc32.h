// CRC-32 as used by Ethernet and the IBA ICRC: reflected polynomial
// 0xedb88320, LSB-first bit order.
#pragma once

#include <stdint.h>

#include <span>

namespace uroce::wire {

// Advances a raw CRC register over data: no initial or final inversion, so
// calls chain (crc32_update(crc32_update(s, a), b) covers a then b). This is
// the kernel's crc32_le().
uint32_t crc32_update(uint32_t state, std::span<const uint8_t> data);

// The standard CRC-32 (zlib's crc32()): register starts at ~0, result inverted.
inline uint32_t crc32(std::span<const uint8_t> data) {
    return ~crc32_update(~0u, data);
}

}  // namespace uroce::wire
