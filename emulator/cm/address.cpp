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
    uint32_t ipv4;
    if (ipv4_of(address, ipv4)) {
        return (ntohl(ipv4) >> 24) == 127;
    }
    return address.ss_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
}

bool ipv4_of(const Address& address, uint32_t& ipv4) {
    if (address.ss_family == AF_INET) {
        ipv4 = reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr;
        return true;
    }
    if (address.ss_family == AF_INET6) {
        const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            memcpy(&ipv4, &a.s6_addr[12], sizeof(ipv4));
            return true;
        }
    }
    return false;
}

bool same_host(const Address& a, const Address& b) {
    if (is_any(a) || is_any(b)) {
        return is_any(a) && is_any(b);
    }
    uint32_t x, y;
    if (ipv4_of(a, x) && ipv4_of(b, y)) {
        return x == y;
    }
    if (a.ss_family == AF_IB && b.ss_family == AF_IB) {
        return memcmp(gid_of_ib(a), gid_of_ib(b), 16) == 0;
    }
    if (a.ss_family == AF_INET6 && b.ss_family == AF_INET6) {
        return IN6_ARE_ADDR_EQUAL(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                                  &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr);
    }
    return false;
}

Address make_address(sa_family_t family, uint32_t ipv4, uint16_t port) {
    Address address{};
    if (family == AF_INET6) {
        auto& in6 = reinterpret_cast<sockaddr_in6&>(address);
        in6.sin6_family = AF_INET6;
        in6.sin6_addr.s6_addr[10] = in6.sin6_addr.s6_addr[11] = 0xff;
        memcpy(&in6.sin6_addr.s6_addr[12], &ipv4, sizeof(ipv4));
        in6.sin6_port = htons(port);
    } else {
        auto& in = reinterpret_cast<sockaddr_in&>(address);
        in.sin_family = AF_INET;
        in.sin_addr.s_addr = ipv4;
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

Device* device_at(const std::vector<std::unique_ptr<Device>>& devices, uint32_t ipv4) {
    for (const auto& device : devices) {
        if (device->config().address.s_addr == ipv4) {
            return device.get();
        }
    }
    return nullptr;
}

namespace {

// The source address the kernel would pick for `destination`: a UDP
// socket's connect() asks the routing table and sends nothing.
bool kernel_source(uint32_t destination, uint32_t& source) {
    UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = destination;
    to.sin_port = htons(4791);
    if (!sock || connect(sock.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
        return false;
    }
    sockaddr_in from{};
    socklen_t length = sizeof(from);
    if (getsockname(sock.get(), reinterpret_cast<sockaddr*>(&from), &length) != 0) {
        return false;
    }
    source = from.sin_addr.s_addr;
    return true;
}

}  // namespace

Result route(const std::vector<std::unique_ptr<Device>>& devices, uint32_t destination,
             Device*& device) {
    uint32_t source = 0;
    const bool routed = kernel_source(destination, source);
    device = routed ? device_at(devices, source) : nullptr;
    if (!device) {
        device = device_at(devices, destination);
    }
    if (device) {
        return ok();
    }
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &destination, text, sizeof(text));
    if (!routed) {
        return fail(ENETUNREACH, "no route to %s", text);
    }
    char from[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &source, from, sizeof(from));
    return fail(ENODEV, "%s is reached from %s, which no uroce device has", text, from);
}

bool is_host_address(uint32_t ipv4) {
    UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = ipv4;
    return sock && bind(sock.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0;
}

}  // namespace uroce::cm
