// 24-bit packet sequence numbers (IBA vol.1 9.7.1). PSNs wrap, so two PSNs
// compare by their signed distance modulo 2^24; a valid window never spans
// 2^23 or more PSNs, which makes that distance unambiguous.
#pragma once

#include <stdint.h>

namespace uroce::wire {

inline constexpr uint32_t kPsnMask = 0x00ffffff;
inline constexpr uint32_t kPsnHalfRange = 0x00800000;

constexpr uint32_t psn_add(uint32_t psn, uint32_t n) {
    return (psn + n) & kPsnMask;
}

// a - b as a signed distance in (-2^23, 2^23]. rxe's psn_compare() maps an
// exact distance of 2^23 to "before" instead; no valid window reaches it.
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    const uint32_t d = (a - b) & kPsnMask;
    return d > kPsnHalfRange ? static_cast<int32_t>(d) - static_cast<int32_t>(kPsnMask + 1)
                             : static_cast<int32_t>(d);
}

constexpr bool psn_before(uint32_t a, uint32_t b) {
    return psn_diff(a, b) < 0;
}
constexpr bool psn_after(uint32_t a, uint32_t b) {
    return psn_diff(a, b) > 0;
}

// first <= psn <= last going forward from first, e.g. a responder asking
// whether a request PSN falls among the ones it has already executed.
constexpr bool psn_in_range(uint32_t psn, uint32_t first, uint32_t last) {
    return psn_diff(psn, first) >= 0 && psn_diff(last, psn) >= 0;
}

}  // namespace uroce::wire
