#include "net/link_monitor.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>

namespace uroce {

void parse_link_messages(std::span<const uint8_t> bytes, LinkNews& news) {
    // NLMSG_OK and RTA_OK check every length against what is left.
    int left = static_cast<int>(bytes.size());
    for (auto* header = reinterpret_cast<const nlmsghdr*>(bytes.data()); NLMSG_OK(header, left);
         header = NLMSG_NEXT(header, left)) {
        if (header->nlmsg_type == RTM_NEWADDR || header->nlmsg_type == RTM_DELADDR) {
            if (header->nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) {
                return;
            }
            // An address message names its interface by index only.
            const auto* address = static_cast<const ifaddrmsg*>(NLMSG_DATA(header));
            char name[IF_NAMESIZE];
            if (if_indextoname(address->ifa_index, name)) {
                news.interfaces.emplace(name);
            } else {
                news.all = true;
            }
            continue;
        }
        if (header->nlmsg_type != RTM_NEWLINK && header->nlmsg_type != RTM_DELLINK) {
            continue;
        }
        if (header->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) {
            return;
        }
        const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(header));
        int attributes = static_cast<int>(header->nlmsg_len - NLMSG_LENGTH(sizeof(ifinfomsg)));
        for (auto* rta = IFLA_RTA(info); RTA_OK(rta, attributes); rta = RTA_NEXT(rta, attributes)) {
            if (rta->rta_type == IFLA_IFNAME) {
                const auto* name = static_cast<const char*>(RTA_DATA(rta));
                news.interfaces.emplace(name, strnlen(name, RTA_PAYLOAD(rta)));
            }
        }
    }
}

Result LinkMonitor::open() {
    UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE));
    sockaddr_nl address{};
    address.nl_family = AF_NETLINK;
    address.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        return fail(errno, "cannot watch the network interfaces (rtnetlink): %s", strerror(errno));
    }
    fd_ = std::move(fd);
    return ok();
}

LinkNews LinkMonitor::drain() {
    LinkNews news;
    std::array<uint8_t, 32768> buffer;  // a kernel's link message is a few kB
    for (unsigned i = 0; i < kMaxDatagrams; ++i) {
        // MSG_TRUNC: n is the datagram's length even when it was longer
        // than the buffer.
        const ssize_t n = recv(fd_.get(), buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && errno == ENOBUFS) {
            news.all = true;
            continue;
        }
        if (n <= 0) {
            break;
        }
        news.all = news.all || static_cast<size_t>(n) > buffer.size();
        parse_link_messages(std::span(buffer.data(), std::min(buffer.size(), size_t(n))), news);
    }
    return news;
}

}  // namespace uroce
