#include "wire/crc32.h"

#include <array>
#include <cassert>
#include <cstddef>

#include <isa-l/crc.h>

namespace uroce::wire {
namespace {

constexpr uint32_t kPoly = 0xedb88320;

// kTable[b] is the register contribution of byte b: what the byte-wise
// algebra below (stepping back, solving for two bytes) is built on.
constexpr std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t b = 0; b < 256; ++b) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; ++bit) {
            c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
        }
        t[b] = c;
    }
    return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

// The top byte of kTable[b] differs for every b, so it names b: this
// steps the register back over one byte.
constexpr std::array<uint8_t, 256> make_top_byte_index() {
    std::array<uint8_t, 256> index{};
    for (uint32_t b = 0; b < 256; ++b) {
        index[kTable[b] >> 24] = static_cast<uint8_t>(b);
    }
    return index;
}

constexpr std::array<uint8_t, 256> kTopByteIndex = make_top_byte_index();

// The register one zero byte earlier: for c' = (c >> 8) ^ T[c & 0xff],
// T's index is named by c' 's top byte.
constexpr uint32_t step_back_over_zero(uint32_t c) {
    const uint8_t index = kTopByteIndex[c >> 24];
    return ((c ^ kTable[index]) << 8) | index;
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

// kPowers[i] = x^(8 * 2^i): moving forward 2^i bytes (one zero byte moves
// x^0 down by eight bits).
constexpr std::array<uint32_t, 32> make_powers() {
    std::array<uint32_t, 32> powers{};
    powers[0] = kOne >> 8;
    for (std::size_t i = 1; i < powers.size(); ++i) {
        powers[i] = multiply_mod_poly(powers[i - 1], powers[i - 1]);
    }
    return powers;
}

constexpr std::array<uint32_t, 32> kPowers = make_powers();

// x^(8n) (or x^(-8n)): the product of the powers of n's bits.
uint32_t power_for(const std::array<uint32_t, 32>& powers, std::size_t n) {
    assert(n >> powers.size() == 0);
    uint32_t power = kOne;
    for (std::size_t i = 0; n != 0; ++i, n >>= 1) {
        if ((n & 1) != 0) {
            power = multiply_mod_poly(powers[i], power);
        }
    }
    return power;
}

// The engine shifts by a few lengths over and over (one per packet size of
// a train): their powers are kept, so that a shift is one multiplication.
// Every slot starts as length 0's power, x^0.
class PowerCache {
  public:
    explicit PowerCache(const std::array<uint32_t, 32>& powers) : powers_(powers) {
        power_.fill(kOne);
    }

    uint32_t shift(uint32_t state, std::size_t n) {
        const std::size_t slot = n % kEntries;
        if (n_[slot] != n) {
            n_[slot] = n;
            power_[slot] = power_for(powers_, n);
        }
        return multiply_mod_poly(power_[slot], state);
    }

  private:
    static constexpr std::size_t kEntries = 8;
    const std::array<uint32_t, 32>& powers_;
    std::array<std::size_t, kEntries> n_{};
    std::array<uint32_t, kEntries> power_;
};

}  // namespace

uint32_t crc32_update(uint32_t state, std::span<const uint8_t> data) {
    // ISA-L's reflected CRC-32 (carry-less multiplication where the CPU has
    // it, chosen at run time) inverts the register on the way in and out.
    return ~crc32_gzip_refl(~state, const_cast<uint8_t*>(data.data()), data.size());
}

uint32_t crc32_unshift(uint32_t state, std::size_t n) {
    thread_local PowerCache cache(kInversePowers);
    return cache.shift(state, n);
}

uint32_t crc32_shift(uint32_t state, std::size_t n) {
    thread_local PowerCache cache(kPowers);
    return cache.shift(state, n);
}

std::optional<std::array<uint8_t, 2>> crc32_two_bytes_giving(uint32_t contribution) {
    // From a zero register, b0 gives T[b0] and b1 then gives
    // (T[b0] >> 8) ^ T[(T[b0] ^ b1) & 0xff]. The last index is named by the
    // top byte; what is left is T[b0] >> 8, whose top byte names b0 and
    // whose other 16 bits must agree.
    const uint8_t last = kTopByteIndex[contribution >> 24];
    const uint32_t first_shifted = contribution ^ kTable[last];
    const uint8_t b0 = kTopByteIndex[(first_shifted >> 16) & 0xff];
    if ((kTable[b0] >> 8) != first_shifted) {
        return std::nullopt;
    }
    const auto b1 = static_cast<uint8_t>(last ^ (kTable[b0] & 0xff));
    return std::array<uint8_t, 2>{b0, b1};
}

}  // namespace uroce::wire
