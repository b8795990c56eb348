// The UDP network on real sockets: a burst larger than the send buffers
// waits for buffers instead of growing the pool, and arrives whole, in order.
#include "net/udp_network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <vector>

#include "wire/headers.h"
#include "wire/icrc.h"

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

wire::IpAddress ip(const char* text) {
    return wire::IpAddress::parse(text).value();
}

const uint32_t kLo = if_nametoindex("lo");

// Packets sent without a poll() in between, to 127.0.0.2's socket: what
// each receiving socket got, in order.
struct Received {
    std::vector<std::vector<uint8_t>> at[2];
};

void receive_all(UdpNetwork& network, size_t expected, Received& received) {
    for (int turn = 0; turn < 10000; ++turn) {
        network.poll([&](size_t index, std::span<const uint8_t> bytes,
                         const wire::IpAddress& src_ip, uint16_t src_port,
                         const wire::IpAddress& dest_ip) {
            EXPECT_EQ(dest_ip, ip(index == 1 ? "127.0.0.2" : "127.0.0.1"));
            EXPECT_EQ(src_ip, ip(index == 1 ? "127.0.0.1" : "127.0.0.2"));
            EXPECT_EQ(src_port, network.port());
            received.at[index].emplace_back(bytes.begin(), bytes.end());
        });
        network.submit();  // the re-armed readiness, as the engine does each turn
        if (received.at[0].size() + received.at[1].size() >= expected) {
            return;
        }
        usleep(100);
    }
}

// Every test runs through io_uring and through the readiness loop.
class UdpNetworkTest : public ::testing::TestWithParam<SocketIo::Kind> {};
INSTANTIATE_TEST_SUITE_P(Io, UdpNetworkTest,
                         ::testing::Values(SocketIo::Kind::kIoUring, SocketIo::Kind::kReadiness),
                         [](const auto& param_info) {
                             return param_info.param == SocketIo::Kind::kIoUring ? "IoUring"
                                                                                 : "Readiness";
                         });

// Opens a device socket on `address` (on lo).
Result open(UdpNetwork& network, const char* address) {
    size_t index = 0;
    return network.open(ip(address), kLo, index);
}

// Packet `i`: `size` bytes, starting with i.
std::vector<uint8_t> numbered(uint32_t i, size_t size) {
    std::vector<uint8_t> packet(size, static_cast<uint8_t>(i));
    memcpy(packet.data(), &i, sizeof(i));
    return packet;
}

TEST_P(UdpNetworkTest, ABurstBeyondTheSendBuffersWaitsForThemAndArrivesWhole) {
    UdpNetwork network(free_udp_port(), GetParam());
    ASSERT_TRUE(open(network, "127.0.0.1"));
    ASSERT_TRUE(open(network, "127.0.0.2"));
    // Three times the buffers, each packet longer than the one before so
    // that none joins another's send.
    const uint32_t count = 3 * UdpNetwork::kMaxSendBuffers;
    static_assert(4 + 3 * UdpNetwork::kMaxSendBuffers <= UdpNetwork::kMaxPacket);
    for (uint32_t i = 0; i < count; ++i) {
        network.send(0, ip("127.0.0.2"), numbered(i, 4 + i), network.port());
        ASSERT_LE(network.send_buffers(), UdpNetwork::kMaxSendBuffers);
    }
    network.submit();
    Received received;
    receive_all(network, count, received);
    ASSERT_EQ(received.at[1].size(), count);
    for (uint32_t i = 0; i < count; ++i) {
        ASSERT_EQ(received.at[1][i], numbered(i, 4 + i)) << "out of order at " << i;
    }
}

// A RoCEv2 packet of `size` bytes from `from` to `to` (the network's port
// at both ends), starting with its number, its ICRC computed for `ip_id`.
std::vector<uint8_t> roce_packet(uint32_t i, size_t size, const char* from, const char* to,
                                 uint16_t port, uint16_t ip_id) {
    std::vector<uint8_t> packet = numbered(i, size);
    auto addresses = wire::IcrcAddresses::between(ip(from), ip(to), port, port);
    addresses.ipv4_id = ip_id;
    const auto body = std::span(packet).first(size - wire::kIcrcBytes);
    wire::store_icrc(wire::icrc(addresses, body), std::span(packet).last<4>());
    return packet;
}

// Packets of one size in a row to one peer leave as one segmented send and
// still arrive one by one, whole and in order, each with the ICRC of the IP
// ID the kernel gave it (its place in the train); a change of size or peer
// starts a new send, and a shorter packet may only end one.
TEST_P(UdpNetworkTest, TrainsOfEqualPacketsLeaveTogetherAndArriveOneByOne) {
    UdpNetwork network(free_udp_port(), GetParam());
    ASSERT_TRUE(open(network, "127.0.0.1"));
    ASSERT_TRUE(open(network, "127.0.0.2"));
    std::vector<std::vector<uint8_t>> to_second;
    std::vector<std::vector<uint8_t>> to_first;
    uint32_t n = 0;
    auto send = [&](size_t from, size_t size, uint16_t place_in_train) {
        const char* source = from == 0 ? "127.0.0.1" : "127.0.0.2";
        const char* dest = from == 0 ? "127.0.0.2" : "127.0.0.1";
        network.send(from, ip(dest), roce_packet(n, size, source, dest, network.port(), 0),
                     network.port());
        (from == 0 ? to_second : to_first)
            .push_back(roce_packet(n, size, source, dest, network.port(), place_in_train));
        ++n;
    };
    for (uint16_t i = 0; i < 200; ++i) {
        send(0, 100, i % UdpNetwork::kMaxSegments);  // three full trains and part of a fourth
    }
    send(0, 60, 200 % UdpNetwork::kMaxSegments);  // ends the fourth
    send(0, 60, 0);
    send(0, 100, 0);  // longer: a new one
    for (int i = 0; i < 5; ++i) {
        send(1, 100, 0);  // another socket and peer
        send(0, 100, 0);
    }
    EXPECT_LE(network.send_buffers(), 4u + 1 + 1 + 10) << "equal packets did not share sends";
    network.submit();
    Received received;
    receive_all(network, to_second.size() + to_first.size(), received);
    EXPECT_EQ(received.at[1], to_second);
    EXPECT_EQ(received.at[0], to_first);
}

// A send gathers its packets' own buffers: packets of a 4096-byte path MTU
// leave fifteen to a send (one IP packet's worth), arrive whole, and every
// buffer comes back to its owner once its send completes.
TEST_P(UdpNetworkTest, FullMtuPacketsShareSendsAndTheirBuffersComeBack) {
    UdpNetwork network(free_udp_port(), GetParam());
    ASSERT_TRUE(open(network, "127.0.0.1"));
    ASSERT_TRUE(open(network, "127.0.0.2"));
    std::vector<std::vector<uint8_t>> returned;
    network.on_sent([&](std::vector<uint8_t>&& bytes) { returned.push_back(std::move(bytes)); });
    constexpr size_t kSize = 4096 + 64;
    constexpr uint16_t kPerTrain = UdpNetwork::kMaxTrainBytes / kSize;
    static_assert(kPerTrain == 15);
    std::vector<std::vector<uint8_t>> expected;
    for (uint16_t i = 0; i < 3 * kPerTrain; ++i) {
        network.send(0, ip("127.0.0.2"),
                     roce_packet(i, kSize, "127.0.0.1", "127.0.0.2", network.port(), 0),
                     network.port());
        expected.push_back(
            roce_packet(i, kSize, "127.0.0.1", "127.0.0.2", network.port(), i % kPerTrain));
    }
    EXPECT_EQ(network.send_buffers(), 3u) << "full-MTU packets did not share sends";
    network.submit();
    Received received;
    receive_all(network, expected.size(), received);
    EXPECT_EQ(received.at[1], expected);
    for (int turn = 0; turn < 1000 && returned.size() < expected.size(); ++turn) {
        network.poll([](size_t, std::span<const uint8_t>, const wire::IpAddress&, uint16_t,
                        const wire::IpAddress&) {});
        usleep(100);
    }
    ASSERT_EQ(returned.size(), expected.size());
    for (const auto& bytes : returned) {
        EXPECT_EQ(bytes.size(), kSize);
    }
}

// A closed socket's slot is taken by the next one opened (addresses that
// come and go do not grow the tables), and what arrives there is the new
// socket's: the old one's readiness is not taken for it.
TEST_P(UdpNetworkTest, AClosedSocketsSlotIsTakenAgain) {
    UdpNetwork network(free_udp_port(), GetParam());
    size_t first = 0, second = 0, again = 0;
    ASSERT_TRUE(network.open(ip("127.0.0.1"), kLo, first));
    ASSERT_TRUE(network.open(ip("127.0.0.3"), kLo, second));
    EXPECT_EQ(first, 0u);
    EXPECT_EQ(second, 1u);
    network.close(second);
    network.submit();
    ASSERT_TRUE(network.open(ip("127.0.0.2"), kLo, again));
    EXPECT_EQ(again, 1u);
    network.send(0, ip("127.0.0.2"),
                 roce_packet(7, 100, "127.0.0.1", "127.0.0.2", network.port(), 0), network.port());
    network.submit();
    Received received;
    receive_all(network, 1, received);
    ASSERT_EQ(received.at[1].size(), 1u);
}

// A packet the kernel will not send is reported, with its socket, peer,
// errno and count, and the packets after it still go.
TEST_P(UdpNetworkTest, APacketTheKernelRefusesIsReportedNotDroppedInSilence) {
    UdpNetwork network(free_udp_port(), GetParam());
    ASSERT_TRUE(open(network, "127.0.0.1"));
    ASSERT_TRUE(open(network, "127.0.0.2"));
    struct Failure {
        size_t index;
        wire::IpAddress dest;
        int error;
        unsigned packets;
    };
    std::vector<Failure> failures;
    network.on_send_failed(
        [&](size_t index, const wire::IpAddress& dest, int error, unsigned packets) {
            failures.push_back({index, dest, error, packets});
        });
    // Longer than any packet a device sends.
    network.send(0, ip("127.0.0.2"), numbered(0, UdpNetwork::kMaxPacket + 1), network.port());
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].index, 0u);
    EXPECT_EQ(failures[0].error, EMSGSIZE);
    // From a loopback address to one no loopback route reaches: the kernel
    // refuses it when the send completes.
    network.send(1, ip("192.0.2.1"), numbered(1, 64), network.port());  // TEST-NET-1
    network.send(0, ip("127.0.0.2"), numbered(2, 64), network.port());
    network.submit();
    Received received;
    receive_all(network, 1, received);
    for (int turn = 0; turn < 1000 && failures.size() < 2; ++turn) {
        network.poll([](size_t, std::span<const uint8_t>, const wire::IpAddress&, uint16_t,
                        const wire::IpAddress&) {});
        usleep(100);
    }
    ASSERT_EQ(failures.size(), 2u);
    EXPECT_EQ(failures[1].index, 1u);
    EXPECT_EQ(failures[1].dest, ip("192.0.2.1"));
    EXPECT_NE(failures[1].error, 0);
    EXPECT_EQ(failures[1].packets, 1u);
    ASSERT_EQ(received.at[1].size(), 1u);
    EXPECT_EQ(received.at[1][0], numbered(2, 64));
}

// A device on an IPv6 address sends and receives over UDP/IPv6, its trains
// too (IPv6 has no IP ID: every packet of a train keeps the ICRC it was
// built with), and a packet to the other family is reported, not sent.
TEST_P(UdpNetworkTest, Ipv6PacketsTravelAndAnotherFamilyIsRefused) {
    UdpNetwork network(free_udp_port(), GetParam());
    if (Result r = open(network, "::1"); !r) {
        GTEST_SKIP() << "no IPv6 on lo: " << r.message;
    }
    std::vector<int> errors;
    network.on_send_failed(
        [&](size_t, const wire::IpAddress&, int error, unsigned) { errors.push_back(error); });
    std::vector<std::vector<uint8_t>> sent;
    for (uint32_t i = 0; i < 5; ++i) {
        sent.push_back(roce_packet(i, 100, "::1", "::1", network.port(), 0));
        network.send(0, ip("::1"), std::vector<uint8_t>(sent.back()), network.port());
    }
    network.send(0, ip("127.0.0.1"), numbered(9, 64), network.port());
    EXPECT_EQ(errors, std::vector<int>{EAFNOSUPPORT});
    network.submit();
    std::vector<std::vector<uint8_t>> received;
    for (int turn = 0; turn < 10000 && received.size() < sent.size(); ++turn) {
        network.poll([&](size_t index, std::span<const uint8_t> bytes, const wire::IpAddress& src,
                         uint16_t, const wire::IpAddress& dest) {
            EXPECT_EQ(index, 0u);
            EXPECT_EQ(src, ip("::1"));
            EXPECT_EQ(dest, ip("::1"));
            received.emplace_back(bytes.begin(), bytes.end());
        });
        network.submit();
        usleep(100);
    }
    EXPECT_EQ(received, sent);
}

// The kernel's Soft-RoCE sends UDP checksum 0 over IPv6 too: such a
// datagram arrives (IPv6 drops it at a socket that did not ask for it).
TEST_P(UdpNetworkTest, AnIpv6DatagramWithoutAChecksumArrives) {
    UdpNetwork network(free_udp_port(), GetParam());
    if (Result r = open(network, "::1"); !r) {
        GTEST_SKIP() << "no IPv6 on lo: " << r.message;
    }
    const int sender = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sender, 0);
    const int on = 1;
    ASSERT_EQ(setsockopt(sender, SOL_UDP, UDP_NO_CHECK6_TX, &on, sizeof(on)), 0);
    sockaddr_storage to;
    const socklen_t length = ip("::1").to_sockaddr(network.port(), to);
    const std::vector<uint8_t> packet = numbered(7, 80);
    ASSERT_EQ(
        sendto(sender, packet.data(), packet.size(), 0, reinterpret_cast<sockaddr*>(&to), length),
        static_cast<ssize_t>(packet.size()))
        << strerror(errno);
    close(sender);
    std::vector<std::vector<uint8_t>> received;
    for (int turn = 0; turn < 10000 && received.empty(); ++turn) {
        network.poll(
            [&](size_t, std::span<const uint8_t> bytes, const wire::IpAddress&, uint16_t,
                const wire::IpAddress&) { received.emplace_back(bytes.begin(), bytes.end()); });
        network.submit();
        usleep(100);
    }
    ASSERT_EQ(received.size(), 1u);
    EXPECT_EQ(received[0], packet);
}

}  // namespace
}  // namespace uroce
