// The UDP network on real sockets: a burst larger than the send buffers
// waits for buffers instead of growing the pool, and arrives whole, in order.
#include "net/udp_network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace uroce {
namespace {

// A UDP port free on 127.0.0.1 and 127.0.0.2 right now.
uint16_t free_udp_port() {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof(addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length), 0);
    close(fd);
    return ntohs(addr.sin_port);
}

in_addr ipv4(const char* text) {
    in_addr address{};
    inet_pton(AF_INET, text, &address);
    return address;
}

TEST(UdpNetworkTest, ABurstBeyondTheSendBuffersWaitsForThemAndArrivesWhole) {
    UdpNetwork network(free_udp_port());
    ASSERT_TRUE(network.open(ipv4("127.0.0.1")));
    ASSERT_TRUE(network.open(ipv4("127.0.0.2")));
    // Three times the buffers, sent without a poll() in between.
    const uint32_t count = 3 * UdpNetwork::kMaxSendBuffers;
    for (uint32_t i = 0; i < count; ++i) {
        const std::span<uint8_t> buffer = network.send_buffer();
        ASSERT_GE(buffer.size(), sizeof(i));
        memcpy(buffer.data(), &i, sizeof(i));
        network.send(0, ipv4("127.0.0.2").s_addr, sizeof(i), network.port());
        ASSERT_LE(network.send_buffers(), UdpNetwork::kMaxSendBuffers);
    }
    network.submit();
    std::vector<uint32_t> received;
    for (int turn = 0; turn < 10000 && received.size() < count; ++turn) {
        network.poll([&](size_t index, std::span<const uint8_t> bytes, uint32_t src_ipv4,
                         uint16_t src_port) {
            EXPECT_EQ(index, 1u);
            EXPECT_EQ(src_ipv4, ipv4("127.0.0.1").s_addr);
            EXPECT_EQ(src_port, network.port());
            uint32_t value = 0;
            ASSERT_EQ(bytes.size(), sizeof(value));
            memcpy(&value, bytes.data(), sizeof(value));
            received.push_back(value);
        });
        network.submit();  // the re-armed readiness, as the engine does each turn
        if (received.size() < count) {
            usleep(100);
        }
    }
    ASSERT_EQ(received.size(), count);
    for (uint32_t i = 0; i < count; ++i) {
        ASSERT_EQ(received[i], i) << "out of order at " << i;
    }
}

}  // namespace
}  // namespace uroce
