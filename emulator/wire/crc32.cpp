#include "wire/crc32.h"

#include <array>
#include <cstddef>

namespace uroce::wire {
namespace {

constexpr uint32_t kPoly = 0xedb88320;

// Slice-by-8: kTables[k][b] is the register contribution of byte b followed
// by k zero bytes, so eight input bytes fold in with eight lookups.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t b = 0; b < 256; ++b) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; ++bit) {
            c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
        }
        t[0][b] = c;
    }
    for (std::size_t k = 1; k < t.size(); ++k) {
        for (uint32_t b = 0; b < 256; ++b) {
            const uint32_t prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][prev & 0xff];
        }
    }
    return t;
}

constexpr Tables kTables = make_tables();

inline uint32_t load_le32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

uint32_t crc32_update(uint32_t state, std::span<const uint8_t> data) {
    const uint8_t* p = data.data();
    std::size_t n = data.size();
    uint32_t c = state;
    for (; n >= 8; n -= 8, p += 8) {
        const uint32_t lo = c ^ load_le32(p);
        const uint32_t hi = load_le32(p + 4);
        c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
            kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    }
    for (; n > 0; --n, ++p) {
        c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xff];
    }
    return c;
}

}  // namespace uroce::wire
