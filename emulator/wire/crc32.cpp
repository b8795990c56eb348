#include "wire/crc32.h"

#include <array>
#include <cassert>
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

// The top byte of kTables[0][b] differs for every b, so it names b: this
// steps the register back over one byte.
constexpr std::array<uint8_t, 256> make_top_byte_index() {
    std::array<uint8_t, 256> index{};
    for (uint32_t b = 0; b < 256; ++b) {
        index[kTables[0][b] >> 24] = static_cast<uint8_t>(b);
    }
    return index;
}

constexpr std::array<uint8_t, 256> kTopByteIndex = make_top_byte_index();

// The register one zero byte earlier: for c' = (c >> 8) ^ T[c & 0xff],
// T's index is named by c' 's top byte.
constexpr uint32_t step_back_over_zero(uint32_t c) {
    const uint8_t index = kTopByteIndex[c >> 24];
    return ((c ^ kTables[0][index]) << 8) | index;
}

// a * b modulo the polynomial, in the reflected representation (x^0 is
// the top bit), as zlib's multmodp().
constexpr uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if ((a & m) != 0) {
            product ^= b;
        }
        b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
    }
    return product;
}

constexpr uint32_t kOne = 1u << 31;

// kInversePowers[i] = x^(-8 * 2^i): moving back 2^i bytes.
constexpr std::array<uint32_t, 32> make_inverse_powers() {
    std::array<uint32_t, 32> powers{};
    powers[0] = step_back_over_zero(kOne);
    for (std::size_t i = 1; i < powers.size(); ++i) {
        powers[i] = multiply_mod_poly(powers[i - 1], powers[i - 1]);
    }
    return powers;
}

constexpr std::array<uint32_t, 32> kInversePowers = make_inverse_powers();

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

uint32_t crc32_unshift(uint32_t state, std::size_t n) {
    assert(n >> kInversePowers.size() == 0);
    for (std::size_t i = 0; n != 0; ++i, n >>= 1) {
        if ((n & 1) != 0) {
            state = multiply_mod_poly(kInversePowers[i], state);
        }
    }
    return state;
}

std::optional<std::array<uint8_t, 2>> crc32_two_bytes_giving(uint32_t contribution) {
    // From a zero register, b0 gives T[b0] and b1 then gives
    // (T[b0] >> 8) ^ T[(T[b0] ^ b1) & 0xff]. The last index is named by the
    // top byte; what is left is T[b0] >> 8, whose top byte names b0 and
    // whose other 16 bits must agree.
    const uint8_t last = kTopByteIndex[contribution >> 24];
    const uint32_t first_shifted = contribution ^ kTables[0][last];
    const uint8_t b0 = kTopByteIndex[(first_shifted >> 16) & 0xff];
    if ((kTables[0][b0] >> 8) != first_shifted) {
        return std::nullopt;
    }
    const auto b1 = static_cast<uint8_t>(last ^ (kTables[0][b0] & 0xff));
    return std::array<uint8_t, 2>{b0, b1};
}

}  // namespace uroce::wire
