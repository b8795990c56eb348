// RoCEv2 UDP source ports. The destination is always 4791; the source port
// is free for entropy (IBA A17.5.1.1), and like the kernel's rxe (which
// takes 0xC000 plus a 14-bit hash of the QP number) every packet of one QP
// leaves from one port of 0xC000..0xFFFF, so that routers spreading flows
// over equal-cost paths spread QPs. uroce draws from 256 of those ports,
// 0xF000..0xF0FF: each port in use is a socket the daemon holds, and these
// lie above Linux's ephemeral ports (32768..60999), where no other socket
// is given one by chance.
#pragma once

#include <stdint.h>

namespace uroce::wire {

inline constexpr uint16_t kSourcePortBase = 0xF000;
inline constexpr uint32_t kSourcePorts = 256;

// The source port of QP `qpn`'s packets (Fibonacci hashing spreads
// consecutive QP numbers over the ports).
constexpr uint16_t roce_source_port(uint32_t qpn) {
    return static_cast<uint16_t>(kSourcePortBase + ((qpn * 0x9E3779B1u) >> 24));
}

}  // namespace uroce::wire
