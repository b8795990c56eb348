#include "net/interfaces.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <algorithm>

namespace {

uroce::wire::IpAddress ip(const char* text) {
    const auto address = uroce::wire::IpAddress::parse(text);
    EXPECT_TRUE(address.has_value()) << text;
    return address.value_or(uroce::wire::IpAddress());
}

TEST(interfaces, LoopbackAddressesAreOnLo) {
    EXPECT_EQ(uroce::interface_holding(ip("127.0.0.1")), "lo");
    // Routed through lo without being listed as one of its addresses.
    EXPECT_EQ(uroce::interface_holding(ip("127.0.0.2")), "lo");
}

TEST(interfaces, AnAddressNoInterfaceHoldsIsOnLo) {
    EXPECT_EQ(uroce::interface_holding(ip("203.0.113.77")), "lo");  // TEST-NET-3
}

// Every IPv4 and IPv6 address of a non-loopback interface names that interface.
TEST(interfaces, AnInterfacesAddressNamesIt) {
    ifaddrs* list = nullptr;
    ASSERT_EQ(getifaddrs(&list), 0);
    int checked = 0;
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr &&
            (ifa->ifa_addr->sa_family == AF_INET || ifa->ifa_addr->sa_family == AF_INET6) &&
            !(ifa->ifa_flags & IFF_LOOPBACK)) {
            const auto a = *uroce::wire::IpAddress::of(ifa->ifa_addr);
            std::string name = ifa->ifa_name;
            EXPECT_EQ(uroce::interface_holding(a), name.substr(0, name.find(':')));
            ++checked;
        }
    }
    freeifaddrs(list);
    if (checked == 0) {
        GTEST_SKIP() << "this host has no address outside lo";
    }
}

TEST(interfaces, LoHoldsTheLoopbackAddressesIpv4First) {
    const std::vector<uroce::wire::IpAddress> addresses = uroce::addresses_of("lo");
    ASSERT_FALSE(addresses.empty());
    EXPECT_EQ(addresses.front(), ip("127.0.0.1"));
    // ::1 after it, where the host has IPv6.
    const auto v6 = std::find(addresses.begin(), addresses.end(), ip("::1"));
    const bool has_v6 = access("/proc/net/if_inet6", F_OK) == 0;
    EXPECT_EQ(v6 != addresses.end(), has_v6);
    EXPECT_TRUE(uroce::addresses_of("nosuch0").empty());
}

TEST(interfaces, LoIsUpWithItsMtu) {
    const auto link = uroce::link_of("lo");
    ASSERT_TRUE(link.has_value());
    EXPECT_TRUE(link->up);
    EXPECT_GE(link->mtu, 1280u);  // 65536 by default; whatever it is, IPv6's minimum at least
    EXPECT_FALSE(uroce::link_of("nosuch0").has_value());
    EXPECT_FALSE(uroce::link_of("a-name-longer-than-ifnamsiz").has_value());
}

}  // namespace
