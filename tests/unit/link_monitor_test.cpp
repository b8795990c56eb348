// What the daemon reads from rtnetlink's link messages: the names of the
// interfaces they are about, and nothing from bytes that do not parse.
#include "net/link_monitor.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace uroce {
namespace {

// One RTM_NEWLINK (or `type`) message naming `name`, with an IFLA_MTU too.
std::vector<uint8_t> link_message(const std::string& name, uint16_t type = RTM_NEWLINK) {
    const size_t name_attr = RTA_LENGTH(name.size() + 1);
    const size_t mtu_attr = RTA_LENGTH(sizeof(uint32_t));
    const size_t length = NLMSG_LENGTH(sizeof(ifinfomsg)) + RTA_ALIGN(mtu_attr) + name_attr;
    std::vector<uint8_t> bytes(NLMSG_ALIGN(length));
    auto* header = reinterpret_cast<nlmsghdr*>(bytes.data());
    header->nlmsg_len = static_cast<uint32_t>(length);
    header->nlmsg_type = type;
    auto* mtu = reinterpret_cast<rtattr*>(bytes.data() + NLMSG_LENGTH(sizeof(ifinfomsg)));
    mtu->rta_type = IFLA_MTU;
    mtu->rta_len = static_cast<uint16_t>(mtu_attr);
    const uint32_t value = 1500;
    memcpy(RTA_DATA(mtu), &value, sizeof(value));
    auto* ifname = reinterpret_cast<rtattr*>(reinterpret_cast<uint8_t*>(mtu) + RTA_ALIGN(mtu_attr));
    ifname->rta_type = IFLA_IFNAME;
    ifname->rta_len = static_cast<uint16_t>(name_attr);
    memcpy(RTA_DATA(ifname), name.c_str(), name.size() + 1);
    return bytes;
}

TEST(link_monitor, NamesEveryLinkMessagesInterface) {
    std::vector<uint8_t> bytes = link_message("eth0");
    const std::vector<uint8_t> second = link_message("veth-b", RTM_DELLINK);
    bytes.insert(bytes.end(), second.begin(), second.end());
    LinkNews news;
    parse_link_messages(bytes, news);
    EXPECT_EQ(news.interfaces, (std::set<std::string>{"eth0", "veth-b"}));
    EXPECT_FALSE(news.all);
}

// One RTM_NEWADDR (or `type`) message about interface `index`.
std::vector<uint8_t> address_message(uint32_t index, uint16_t type = RTM_NEWADDR) {
    std::vector<uint8_t> bytes(NLMSG_SPACE(sizeof(ifaddrmsg)));
    auto* header = reinterpret_cast<nlmsghdr*>(bytes.data());
    header->nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
    header->nlmsg_type = type;
    auto* address = static_cast<ifaddrmsg*>(NLMSG_DATA(header));
    address->ifa_family = AF_INET6;
    address->ifa_index = index;
    return bytes;
}

TEST(link_monitor, OtherMessagesNameNothing) {
    LinkNews news;
    parse_link_messages(link_message("eth0", RTM_NEWROUTE), news);
    EXPECT_TRUE(news.interfaces.empty());
    EXPECT_FALSE(news.all);
}

// An address added or removed names its interface (lo is index 1 in every
// network namespace); an index no interface has any more asks for all.
TEST(link_monitor, AddressMessagesNameTheirInterface) {
    LinkNews news;
    parse_link_messages(address_message(1, RTM_DELADDR), news);
    EXPECT_EQ(news.interfaces, (std::set<std::string>{"lo"}));
    EXPECT_FALSE(news.all);
    parse_link_messages(address_message(0x7ffffff0), news);
    EXPECT_TRUE(news.all);
    LinkNews short_message;
    std::vector<uint8_t> cut = address_message(1);
    reinterpret_cast<nlmsghdr*>(cut.data())->nlmsg_len = NLMSG_LENGTH(2);
    parse_link_messages(cut, short_message);
    EXPECT_TRUE(short_message.interfaces.empty());
}

TEST(link_monitor, TruncatedOrLyingLengthsEndTheWalk) {
    const std::vector<uint8_t> whole = link_message("eth0");
    for (size_t cut = 0; cut < whole.size(); ++cut) {
        LinkNews news;
        parse_link_messages(std::span(whole.data(), cut), news);
        // A cut message names nothing, or (cut inside padding) the whole name.
        for (const std::string& name : news.interfaces) {
            EXPECT_EQ(name, "eth0") << "cut at " << cut;
        }
    }
    std::vector<uint8_t> lying = whole;
    reinterpret_cast<nlmsghdr*>(lying.data())->nlmsg_len = 1 << 20;
    LinkNews news;
    parse_link_messages(lying, news);
    EXPECT_TRUE(news.interfaces.empty());
    // An attribute longer than its message.
    lying = whole;
    auto* mtu = reinterpret_cast<rtattr*>(lying.data() + NLMSG_LENGTH(sizeof(ifinfomsg)));
    mtu->rta_len = 0xffff;
    parse_link_messages(lying, news);
    EXPECT_TRUE(news.interfaces.empty());
}

TEST(link_monitor, AnUnterminatedNameStopsAtItsAttribute) {
    std::vector<uint8_t> bytes = link_message("eth0");
    // Overwrite the terminating NUL: the name is what the attribute holds.
    auto* header = reinterpret_cast<nlmsghdr*>(bytes.data());
    bytes[header->nlmsg_len - 1] = 'X';
    LinkNews news;
    parse_link_messages(bytes, news);
    EXPECT_EQ(news.interfaces, (std::set<std::string>{"eth0X"}));
}

TEST(link_monitor, OpensOnThisHost) {
    LinkMonitor monitor;
    ASSERT_TRUE(monitor.open());
    EXPECT_GE(monitor.fd(), 0);
    const LinkNews news = monitor.drain();  // nothing waiting: returns at once
    EXPECT_FALSE(news.all);
}

}  // namespace
}  // namespace uroce
