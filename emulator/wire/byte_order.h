// Big-endian (network order) loads and stores on byte pointers; callers
// bound-check. Written byte by byte so they need no alignment.
#pragma once

#include <stdint.h>

namespace uroce::wire {

constexpr uint16_t load_be16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
constexpr uint32_t load_be24(const uint8_t* p) {
    return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
}
constexpr uint32_t load_be32(const uint8_t* p) {
    return uint32_t{p[0]} << 24 | load_be24(p + 1);
}
constexpr uint64_t load_be64(const uint8_t* p) {
    return uint64_t{load_be32(p)} << 32 | load_be32(p + 4);
}

constexpr void store_be16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
constexpr void store_be24(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 16);
    p[1] = static_cast<uint8_t>(v >> 8);
    p[2] = static_cast<uint8_t>(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24);
    store_be24(p + 1, v);
}
constexpr void store_be64(uint8_t* p, uint64_t v) {
    store_be32(p, static_cast<uint32_t>(v >> 32));
    store_be32(p + 4, static_cast<uint32_t>(v));
}

}  // namespace uroce::wire
