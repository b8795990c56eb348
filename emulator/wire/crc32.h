// CRC-32 as used by Ethernet and the IBA ICRC: reflected polynomial
// 0xedb88320, LSB-first bit order.
#pragma once

#include <stdint.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>

namespace uroce::wire {

// Advances a raw CRC register over data: no initial or final inversion, so
// calls chain (crc32_update(crc32_update(s, a), b) covers a then b). This is
// the kernel's crc32_le().
uint32_t crc32_update(uint32_t state, std::span<const uint8_t> data);

// Moves a register back over n zero bytes: the inverse of
// crc32_update(state, n zero bytes), which multiplies the register by x^8n
// modulo the polynomial. CRC-32 is linear, so this is how the effect of a
// field n bytes before the end is isolated from the final value.
uint32_t crc32_unshift(uint32_t state, std::size_t n);

// Moves a register forward over n zero bytes, as crc32_update() would,
// in a few multiplications: the inverse of crc32_unshift().
uint32_t crc32_shift(uint32_t state, std::size_t n);

// The two bytes b whose linear contribution crc32_update(0, b) equals
// `contribution`, if there are any: 2^16 of the 2^32 register values are
// reached by two bytes, so a value none reaches fails a 16-bit check.
std::optional<std::array<uint8_t, 2>> crc32_two_bytes_giving(uint32_t contribution);

// The standard CRC-32 (zlib's crc32()): register starts at ~0, result inverted.
inline uint32_t crc32(std::span<const uint8_t> data) {
    return ~crc32_update(~0u, data);
}

}  // namespace uroce::wire
