#include "wire/ip_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <unordered_set>

namespace uroce::wire {
namespace {

IpAddress ip(const char* text) {
    const auto address = IpAddress::parse(text);
    EXPECT_TRUE(address.has_value()) << text;
    return address.value_or(IpAddress());
}

// IPv4 is its IPv4-mapped GID, ::ffff:a.b.c.d, whichever way it is made.
TEST(wireIpAddress, Ipv4IsItsMappedGid) {
    const IpAddress a = ip("192.0.2.7");
    const IpAddress::Bytes gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
    EXPECT_EQ(a.bytes(), gid);
    EXPECT_TRUE(a.is_v4());
    EXPECT_EQ(a.ipv4(), inet_addr("192.0.2.7"));
    EXPECT_EQ(IpAddress::v4(inet_addr("192.0.2.7")), a);
    EXPECT_EQ(IpAddress(gid), a);
    EXPECT_EQ(ip("::ffff:192.0.2.7"), a);  // written as IPv6, still IPv4
    EXPECT_EQ(a.family(), AF_INET);
    EXPECT_EQ(a.text(), "192.0.2.7");
}

TEST(wireIpAddress, Ipv6IsItsOwnBytes) {
    const IpAddress a = ip("fd00:77::2");
    EXPECT_FALSE(a.is_v4());
    EXPECT_EQ(a.family(), AF_INET6);
    EXPECT_EQ(a.bytes()[0], 0xfd);
    EXPECT_EQ(a.bytes()[15], 2);
    EXPECT_EQ(a.text(), "fd00:77::2");
}

TEST(wireIpAddress, ParseRefusesWhatIsNoAddress) {
    for (const char* text :
         {"", "uroce0", "192.0.2", "192.0.2.256", "[fd00::1]", "fd00::1%eth0", "10.0.0.1:4791"}) {
        EXPECT_FALSE(IpAddress::parse(text).has_value()) << text;
    }
}

TEST(wireIpAddress, KindsOfAddress) {
    EXPECT_TRUE(IpAddress().unspecified());
    EXPECT_TRUE(ip("0.0.0.0").unspecified());
    EXPECT_FALSE(ip("127.0.0.1").unspecified());
    EXPECT_TRUE(ip("224.0.0.1").multicast());
    EXPECT_TRUE(ip("239.255.255.255").multicast());
    EXPECT_FALSE(ip("240.0.0.1").multicast());
    EXPECT_TRUE(ip("ff0e::1").multicast());
    EXPECT_FALSE(ip("fd00::1").multicast());
    EXPECT_TRUE(ip("fe80::1").link_local());
    EXPECT_TRUE(ip("febf::1").link_local());
    EXPECT_FALSE(ip("fec0::1").link_local());
    EXPECT_FALSE(ip("169.254.0.1").link_local());  // IPv4 needs no scope
}

// To a socket address and back, port and scope included.
TEST(wireIpAddress, SocketAddressesBothWays) {
    sockaddr_storage storage;
    ASSERT_EQ(ip("10.0.0.1").to_sockaddr(4791, storage), sizeof(sockaddr_in));
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(storage);
    EXPECT_EQ(v4.sin_family, AF_INET);
    EXPECT_EQ(ntohs(v4.sin_port), 4791);
    EXPECT_EQ(IpAddress::of(reinterpret_cast<const sockaddr*>(&storage)), ip("10.0.0.1"));

    ASSERT_EQ(ip("fe80::1").to_sockaddr(4791, storage, 7), sizeof(sockaddr_in6));
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(storage);
    EXPECT_EQ(v6.sin6_family, AF_INET6);
    EXPECT_EQ(ntohs(v6.sin6_port), 4791);
    EXPECT_EQ(v6.sin6_scope_id, 7u);
    EXPECT_EQ(IpAddress::of(reinterpret_cast<const sockaddr*>(&storage)), ip("fe80::1"));
    ip("fd00::1").to_sockaddr(0, storage, 7);
    EXPECT_EQ(v6.sin6_scope_id, 0u);  // a global address has no scope
    // Multicast of link-local scope names its interface; of global scope, not.
    for (const char* group : {"ff02::1", "ff12:401b::1", "ff01::1"}) {
        ip(group).to_sockaddr(0, storage, 7);
        EXPECT_EQ(v6.sin6_scope_id, 7u) << group;
    }
    ip("ff0e::1").to_sockaddr(0, storage, 7);
    EXPECT_EQ(v6.sin6_scope_id, 0u);

    sockaddr_storage other{};
    other.ss_family = AF_UNIX;
    EXPECT_FALSE(IpAddress::of(reinterpret_cast<const sockaddr*>(&other)).has_value());
}

TEST(wireIpAddress, EqualAddressesHashAlike) {
    std::unordered_set<IpAddress> set{ip("10.0.0.1"), ip("::ffff:10.0.0.1"), ip("fd00::1"),
                                      ip("fd00::2")};
    EXPECT_EQ(set.size(), 3u);
    EXPECT_TRUE(set.contains(IpAddress::v4(inet_addr("10.0.0.1"))));
}

}  // namespace
}  // namespace uroce::wire
