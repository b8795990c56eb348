// The two requester timers the wire protocol encodes in 5 bits: the RNR NAK
// timer a responder sends in the AETH (IBA vol.1 table 45, "RNR Timer Field
// Encodings") and the local ACK timeout of the QP attribute (9.7.6.1.3).
#pragma once

#include <stdint.h>

#include <array>
#include <chrono>
#include <optional>

namespace uroce::wire {

// Indexed by the 5-bit code; code 0 is the longest delay, not the shortest.
// rxe_comp.c's rnrnak_usec[] has 61410 for code 25; the spec says 61.44 ms.
inline constexpr std::array<uint32_t, 32> kRnrNakTimerUsec = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

// Only the low 5 bits of code are used, as on the wire.
constexpr std::chrono::microseconds rnr_nak_delay(uint8_t code) {
    return std::chrono::microseconds(kRnrNakTimerUsec[code & 0x1f]);
}

// 4.096 us * 2^timeout; timeout 0 means the timer is disabled (nullopt).
// Only the low 5 bits of timeout are used, as in the QP attribute.
constexpr std::optional<std::chrono::nanoseconds> local_ack_timeout(uint8_t timeout) {
    const unsigned t = timeout & 0x1f;
    if (t == 0) {
        return std::nullopt;
    }
    return std::chrono::nanoseconds(int64_t{4096} << t);
}

}  // namespace uroce::wire
