#include "net/interfaces.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>

namespace {

in_addr ipv4(const char* text) {
    in_addr a{};
    EXPECT_EQ(inet_pton(AF_INET, text, &a), 1);
    return a;
}

TEST(interfaces, LoopbackAddressesAreOnLo) {
    EXPECT_EQ(uroce::interface_holding(ipv4("127.0.0.1")), "lo");
    // Routed through lo without being listed as one of its addresses.
    EXPECT_EQ(uroce::interface_holding(ipv4("127.0.0.2")), "lo");
}

TEST(interfaces, AnAddressNoInterfaceHoldsIsOnLo) {
    EXPECT_EQ(uroce::interface_holding(ipv4("203.0.113.77")), "lo");  // TEST-NET-3
}

// Every IPv4 address of a non-loopback interface names that interface.
TEST(interfaces, AnInterfacesAddressNamesIt) {
    ifaddrs* list = nullptr;
    ASSERT_EQ(getifaddrs(&list), 0);
    int checked = 0;
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET &&
            !(ifa->ifa_flags & IFF_LOOPBACK)) {
            const in_addr a = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr;
            std::string name = ifa->ifa_name;
            EXPECT_EQ(uroce::interface_holding(a), name.substr(0, name.find(':')));
            ++checked;
        }
    }
    freeifaddrs(list);
    if (checked == 0) {
        GTEST_SKIP() << "this host has no IPv4 address outside lo";
    }
}

TEST(interfaces, LoHoldsTheLoopbackAddress) {
    bool found = false;
    for (const in_addr& a : uroce::ipv4_addresses_of("lo")) {
        found |= a.s_addr == ipv4("127.0.0.1").s_addr;
    }
    EXPECT_TRUE(found);
    EXPECT_TRUE(uroce::ipv4_addresses_of("nosuch0").empty());
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
