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

std::array<uint8_t, kGrhBytes> received_grh(const IpAddress& src, const IpAddress& dest,
                                            size_t udp_payload, uint8_t hop_limit) {
    std::array<uint8_t, kGrhBytes> grh{};
    if (!src.is_v4()) {
        // The IPv6 header: version 6, traffic class and flow label 0.
        const auto payload = static_cast<uint16_t>(kUdpHeaderBytes + udp_payload);
        grh[0] = 0x60;
        grh[4] = static_cast<uint8_t>(payload >> 8);
        grh[5] = static_cast<uint8_t>(payload);
        grh[6] = IPPROTO_UDP;
        grh[7] = hop_limit;
        memcpy(grh.data() + 8, src.bytes().data(), 16);
        memcpy(grh.data() + 24, dest.bytes().data(), 16);
        return grh;
    }
    uint8_t* ip = grh.data() + kGrhBytes - kIpv4HeaderBytes;
    const auto total = static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + udp_payload);
    ip[0] = 0x45;  // version 4, 5 words
    ip[2] = static_cast<uint8_t>(total >> 8);
    ip[3] = static_cast<uint8_t>(total);
    ip[6] = 0x40;  // don't fragment
    ip[8] = hop_limit;
    ip[9] = IPPROTO_UDP;
    const uint32_t src_ip = src.ipv4();
    const uint32_t dest_ip = dest.ipv4();
    memcpy(ip + 12, &src_ip, 4);
    memcpy(ip + 16, &dest_ip, 4);
    const uint16_t check = ipv4_checksum(ip);
    ip[10] = static_cast<uint8_t>(check >> 8);
    ip[11] = static_cast<uint8_t>(check);
    return grh;
}

}  // namespace uroce::wire
