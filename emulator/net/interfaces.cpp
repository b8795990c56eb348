#include "net/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "util/unique_fd.h"

namespace uroce {

namespace {

struct Ipv4Address {
    std::string interface;  // an address label ("eth0:1") names eth0
    in_addr address;
};

std::vector<Ipv4Address> ipv4_addresses() {
    std::vector<Ipv4Address> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        return out;
    }
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET) {
            const std::string name = ifa->ifa_name;
            out.push_back({name.substr(0, name.find(':')),
                           reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr});
        }
    }
    freeifaddrs(list);
    return out;
}

}  // namespace

std::string interface_holding(in_addr address) {
    for (const Ipv4Address& a : ipv4_addresses()) {
        if (a.address.s_addr == address.s_addr) {
            return a.interface;
        }
    }
    return "lo";
}

std::vector<in_addr> ipv4_addresses_of(const std::string& name) {
    std::vector<in_addr> out;
    for (const Ipv4Address& a : ipv4_addresses()) {
        if (a.interface == name) {
            out.push_back(a.address);
        }
    }
    return out;
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

std::string ipv4_text(uint32_t address) {
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &address, text, sizeof(text));
    return text;
}

}  // namespace uroce
