#include "steering/rss_hash.h"

#include <infiniband/verbs.h>
#include <string.h>

namespace uroce::steering {
namespace {

void append(std::vector<uint8_t>& out, const void* bytes, size_t size) {
    const auto* p = static_cast<const uint8_t*>(bytes);
    out.insert(out.end(), p, p + size);
}

}  // namespace

uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
    auto key_byte = [&](size_t i) -> uint32_t { return i < key.size() ? key[i] : 0; };
    // The 32 key bits that line up with the input bit being looked at.
    uint32_t window = key_byte(0) << 24 | key_byte(1) << 16 | key_byte(2) << 8 | key_byte(3);
    uint32_t hash = 0;
    for (size_t i = 0; i < input.size(); ++i) {
        for (int bit = 7; bit >= 0; --bit) {
            if (input[i] >> bit & 1) {
                hash ^= window;
            }
            window = window << 1 | (key_byte(i + 4) >> bit & 1);
        }
    }
    return hash;
}

std::vector<uint8_t> rss_hash_input(const FrameFields& frame, uint64_t fields) {
    std::vector<uint8_t> input;
    if (frame.ipv4) {
        if (fields & IBV_RX_HASH_SRC_IPV4) {
            append(input, &frame.src_ip4, 4);
        }
        if (fields & IBV_RX_HASH_DST_IPV4) {
            append(input, &frame.dst_ip4, 4);
        }
    } else if (frame.ipv6) {
        if (fields & IBV_RX_HASH_SRC_IPV6) {
            append(input, frame.src_ip6.data(), 16);
        }
        if (fields & IBV_RX_HASH_DST_IPV6) {
            append(input, frame.dst_ip6.data(), 16);
        }
    }
    const uint64_t src = frame.tcp ? IBV_RX_HASH_SRC_PORT_TCP : IBV_RX_HASH_SRC_PORT_UDP;
    const uint64_t dst = frame.tcp ? IBV_RX_HASH_DST_PORT_TCP : IBV_RX_HASH_DST_PORT_UDP;
    if (frame.tcp || frame.udp) {
        if (fields & src) {
            append(input, &frame.src_port, 2);
        }
        if (fields & dst) {
            append(input, &frame.dst_port, 2);
        }
    }
    return input;
}

}  // namespace uroce::steering
