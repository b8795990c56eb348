#include "wire/grh.h"

#include <netinet/in.h>
#include <string.h>

namespace uroce::wire {
namespace {

uint16_t ipv4_checksum(const uint8_t* header) {
    uint32_t sum = 0;
    for (size_t i = 0; i < kIpv4HeaderBytes; i += 2) {
        sum += uint32_t{header[i]} << 8 | header[i + 1];
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return static_cast<uint16_t>(~sum);
}

}  // namespace

std::array<uint8_t, kGrhBytes> ipv4_grh(uint32_t src_ipv4, uint32_t dest_ipv4, size_t udp_payload,
                                        uint8_t ttl) {
    std::array<uint8_t, kGrhBytes> grh{};
    uint8_t* ip = grh.data() + kGrhBytes - kIpv4HeaderBytes;
    const auto total = static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + udp_payload);
    ip[0] = 0x45;  // version 4, 5 words
    ip[2] = static_cast<uint8_t>(total >> 8);
    ip[3] = static_cast<uint8_t>(total);
    ip[6] = 0x40;  // don't fragment
    ip[8] = ttl;
    ip[9] = IPPROTO_UDP;
    memcpy(ip + 12, &src_ipv4, 4);
    memcpy(ip + 16, &dest_ipv4, 4);
    const uint16_t check = ipv4_checksum(ip);
    ip[10] = static_cast<uint8_t>(check >> 8);
    ip[11] = static_cast<uint8_t>(check);
    return grh;
}

}  // namespace uroce::wire
