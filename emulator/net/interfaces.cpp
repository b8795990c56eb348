#include "net/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <fstream>
#include <set>

#include "util/unique_fd.h"

namespace uroce {

namespace {

struct InterfaceAddress {
    std::string interface;  // an address label ("eth0:1") names eth0
    wire::IpAddress address;
};

// Every IPv4 and IPv6 address of the host, in getifaddrs' order.
std::vector<InterfaceAddress> host_addresses() {
    std::vector<InterfaceAddress> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        return out;
    }
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        const auto address = ifa->ifa_addr ? wire::IpAddress::of(ifa->ifa_addr) : std::nullopt;
        if (address) {
            const std::string name = ifa->ifa_name;
            out.push_back({name.substr(0, name.find(':')), *address});
        }
    }
    freeifaddrs(list);
    return out;
}

// IPv6 addresses still in duplicate address detection, or that failed it
// (/proc/net/if_inet6, this network namespace's): no packet reaches them.
std::set<wire::IpAddress> unusable_ipv6_addresses() {
    constexpr unsigned kTentative = 0x40, kDadFailed = 0x08;  // IFA_F_*
    std::set<wire::IpAddress> out;
    std::ifstream table("/proc/net/if_inet6");
    std::string hex, name;
    unsigned index, prefix, scope, flags;
    while (table >> hex >> std::hex >> index >> prefix >> scope >> flags >> name >> std::dec) {
        wire::IpAddress::Bytes bytes{};
        for (size_t i = 0; i < bytes.size() && hex.size() == 32; ++i) {
            bytes[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
        }
        if (hex.size() == 32 && (flags & (kTentative | kDadFailed))) {
            out.insert(wire::IpAddress(bytes));
        }
    }
    return out;
}

}  // namespace

std::string interface_holding(const wire::IpAddress& address) {
    for (const InterfaceAddress& a : host_addresses()) {
        if (a.address == address) {
            return a.interface;
        }
    }
    return "lo";
}

std::vector<wire::IpAddress> addresses_of(const std::string& name, bool link_local) {
    std::vector<wire::IpAddress> v4, v6;
    const std::set<wire::IpAddress> unusable = unusable_ipv6_addresses();
    for (const InterfaceAddress& a : host_addresses()) {
        if (a.interface == name && (link_local || !a.address.link_local()) &&
            !unusable.contains(a.address)) {
            (a.address.is_v4() ? v4 : v6).push_back(a.address);
        }
    }
    v4.insert(v4.end(), v6.begin(), v6.end());
    return v4;
}

std::optional<Link> link_of(const std::string& name) {
    ifreq request{};
    if (name.size() >= sizeof(request.ifr_name)) {
        return std::nullopt;
    }
    memcpy(request.ifr_name, name.data(), name.size());
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ioctl(fd.get(), SIOCGIFMTU, &request) != 0) {
        return std::nullopt;
    }
    Link link;
    link.mtu = static_cast<unsigned>(request.ifr_mtu);
    if (ioctl(fd.get(), SIOCGIFFLAGS, &request) != 0) {
        return std::nullopt;
    }
    link.up = (request.ifr_flags & IFF_UP) && (request.ifr_flags & IFF_RUNNING);
    return link;
}

}  // namespace uroce
