#include "cm/address.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <unistd.h>

#include "util/unique_fd.h"

namespace uroce::cm {

size_t address_size(const Address& address) {
    switch (address.ss_family) {
        case AF_INET:
            return sizeof(sockaddr_in);
        case AF_INET6:
            return sizeof(sockaddr_in6);
        case AF_IB:
            return sizeof(sockaddr_ib);
        default:
            return 0;
    }
}

uint16_t port_of(const Address& address) {
    switch (address.ss_family) {
        case AF_INET:
            return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
        case AF_INET6:
            return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
        case AF_IB:  // the low 16 bits of the service ID
            return be64toh(reinterpret_cast<const sockaddr_ib&>(address).sib_sid) & 0xffff;
        default:
            return 0;
    }
}

void set_port(Address& address, uint16_t port) {
    if (address.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in&>(address).sin_port = htons(port);
    } else if (address.ss_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6&>(address).sin6_port = htons(port);
    } else if (address.ss_family == AF_IB) {
        // As cma_bind_port: the port into the service ID, which is then exact.
        auto& ib = reinterpret_cast<sockaddr_ib&>(address);
        ib.sib_sid = htobe64((be64toh(ib.sib_sid) & ~0xffffull) | port);
        ib.sib_sid_mask = ~0ull;
    }
}

const uint8_t* gid_of_ib(const Address& address) {
    return reinterpret_cast<const sockaddr_ib&>(address).sib_addr.sib_raw;
}

bool is_any(const Address& address) {
    switch (address.ss_family) {
        case AF_INET:
            return reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr == INADDR_ANY;
        case AF_INET6:
            return IN6_IS_ADDR_UNSPECIFIED(
                &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
        case AF_UNSPEC:
            return true;
        case AF_IB: {
            static const uint8_t zero[16] = {};
            return memcmp(gid_of_ib(address), zero, sizeof(zero)) == 0;
        }
        default:
            return false;
    }
}

bool is_loopback(const Address& address) {
    const auto ip = ip_of(address);
    if (!ip) {
        return false;
    }
    const in6_addr v6 = ip->ipv6();
    return ip->is_v4() ? (ntohl(ip->ipv4()) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&v6);
}

std::optional<wire::IpAddress> ip_of(const Address& address) {
    if (address.ss_family != AF_INET && address.ss_family != AF_INET6) {
        return std::nullopt;
    }
    return wire::IpAddress::of(reinterpret_cast<const sockaddr*>(&address));
}

bool same_host(const Address& a, const Address& b) {
    if (is_any(a) || is_any(b)) {
        return is_any(a) && is_any(b);
    }
    if (a.ss_family == AF_IB && b.ss_family == AF_IB) {
        return memcmp(gid_of_ib(a), gid_of_ib(b), 16) == 0;
    }
    const auto x = ip_of(a);
    const auto y = ip_of(b);
    return x && y && *x == *y;
}

Address make_address(sa_family_t family, const wire::IpAddress& ip, uint16_t port) {
    Address address{};
    if (family == AF_INET6 || !ip.is_v4()) {
        auto& in6 = reinterpret_cast<sockaddr_in6&>(address);
        in6.sin6_family = AF_INET6;
        in6.sin6_addr = ip.ipv6();
        in6.sin6_port = htons(port);
    } else {
        auto& in = reinterpret_cast<sockaddr_in&>(address);
        in.sin_family = AF_INET;
        in.sin_addr.s_addr = ip.ipv4();
        in.sin_port = htons(port);
    }
    return address;
}

std::string to_string(const Address& address) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (address.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text,
                  sizeof(text));
    } else if (address.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text,
                  sizeof(text));
        return std::string("[") + text + "]:" + std::to_string(port_of(address));
    } else if (address.ss_family == AF_IB) {
        inet_ntop(AF_INET6, gid_of_ib(address), text, sizeof(text));
        return std::string("ib:[") + text + "]:" + std::to_string(port_of(address));
    } else if (address.ss_family == AF_UNSPEC) {
        return "-";
    }
    return std::string(text) + ":" + std::to_string(port_of(address));
}

Device* device_at(const std::vector<std::unique_ptr<Device>>& devices, const wire::IpAddress& ip) {
    for (const auto& device : devices) {
        // Its own address, or another of its interface's that has a GID.
        const auto index = device->gid_table().index_of(ip);
        if (index && (*index == 0 || device->gid_table().interface_address(*index))) {
            return device.get();
        }
    }
    return nullptr;
}

namespace {

// The source address the kernel would pick for `destination`: a UDP
// socket's connect() asks the routing table and sends nothing.
bool kernel_source(const wire::IpAddress& destination, wire::IpAddress& source) {
    UniqueFd sock(socket(destination.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage to;
    const socklen_t length = destination.to_sockaddr(4791, to);
    if (!sock || connect(sock.get(), reinterpret_cast<sockaddr*>(&to), length) != 0) {
        return false;
    }
    sockaddr_storage from{};
    socklen_t from_length = sizeof(from);
    if (getsockname(sock.get(), reinterpret_cast<sockaddr*>(&from), &from_length) != 0) {
        return false;
    }
    const auto ip = wire::IpAddress::of(reinterpret_cast<sockaddr*>(&from));
    if (!ip) {
        return false;
    }
    source = *ip;
    return true;
}

}  // namespace

Result route(const std::vector<std::unique_ptr<Device>>& devices,
             const wire::IpAddress& destination, Device*& device, wire::IpAddress& source) {
    const bool routed = kernel_source(destination, source);
    device = routed ? device_at(devices, source) : nullptr;
    if (!device && (device = device_at(devices, destination))) {
        source = destination;
    }
    if (device) {
        return ok();
    }
    if (!routed) {
        return fail(ENETUNREACH, "no route to %s", destination.text().c_str());
    }
    return fail(ENODEV, "%s is reached from %s, which no uroce device has",
                destination.text().c_str(), source.text().c_str());
}

bool is_host_address(const wire::IpAddress& ip) {
    UniqueFd sock(socket(ip.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage at;
    const socklen_t length = ip.to_sockaddr(0, at);
    return sock && bind(sock.get(), reinterpret_cast<sockaddr*>(&at), length) == 0;
}

}  // namespace uroce::cm
