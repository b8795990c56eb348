#include "wire/ip_address.h"

#include <arpa/inet.h>

namespace uroce::wire {

namespace {

constexpr uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

}  // namespace

IpAddress::IpAddress(const uint8_t (&gid)[16]) {
    memcpy(bytes_.data(), gid, bytes_.size());
}

IpAddress IpAddress::v4(uint32_t ipv4) {
    IpAddress address;
    memcpy(address.bytes_.data(), kV4Prefix, sizeof(kV4Prefix));
    memcpy(&address.bytes_[12], &ipv4, sizeof(ipv4));
    return address;
}

IpAddress IpAddress::of(const in6_addr& address) {
    IpAddress result;
    memcpy(result.bytes_.data(), address.s6_addr, result.bytes_.size());
    return result;
}

std::optional<IpAddress> IpAddress::of(const sockaddr* address) {
    if (address->sa_family == AF_INET) {
        return of(reinterpret_cast<const sockaddr_in*>(address)->sin_addr);
    }
    if (address->sa_family == AF_INET6) {
        return of(reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
    }
    return std::nullopt;
}

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
    const std::string copy(text);
    in_addr v4_address{};
    if (inet_pton(AF_INET, copy.c_str(), &v4_address) == 1) {
        return of(v4_address);
    }
    in6_addr v6_address{};
    if (inet_pton(AF_INET6, copy.c_str(), &v6_address) == 1) {
        return of(v6_address);
    }
    return std::nullopt;
}

bool IpAddress::is_v4() const {
    return memcmp(bytes_.data(), kV4Prefix, sizeof(kV4Prefix)) == 0;
}

uint32_t IpAddress::ipv4() const {
    uint32_t ipv4;
    memcpy(&ipv4, &bytes_[12], sizeof(ipv4));
    return ipv4;
}

in6_addr IpAddress::ipv6() const {
    in6_addr address;
    memcpy(address.s6_addr, bytes_.data(), bytes_.size());
    return address;
}

bool IpAddress::multicast() const {
    return is_v4() ? IN_MULTICAST(ntohl(ipv4())) : bytes_[0] == 0xff;
}

bool IpAddress::loopback() const {
    return is_v4() ? (ntohl(ipv4()) >> 24) == 127 : *this == of(in6addr_loopback);
}

bool IpAddress::scoped() const {
    const bool small_scope_multicast = bytes_[0] == 0xff && (bytes_[1] & 0x0f) <= 2;
    return !is_v4() && (link_local() || small_scope_multicast);
}

std::string IpAddress::text() const {
    char buffer[INET6_ADDRSTRLEN] = "";
    if (is_v4()) {
        const in_addr address{ipv4()};
        inet_ntop(AF_INET, &address, buffer, sizeof(buffer));
    } else {
        const in6_addr address = ipv6();
        inet_ntop(AF_INET6, &address, buffer, sizeof(buffer));
    }
    return buffer;
}

socklen_t IpAddress::to_sockaddr(uint16_t port, sockaddr_storage& out, uint32_t scope_id) const {
    out = {};
    if (is_v4()) {
        auto& v4_out = reinterpret_cast<sockaddr_in&>(out);
        v4_out.sin_family = AF_INET;
        v4_out.sin_port = htons(port);
        v4_out.sin_addr.s_addr = ipv4();
        return sizeof(sockaddr_in);
    }
    auto& v6_out = reinterpret_cast<sockaddr_in6&>(out);
    v6_out.sin6_family = AF_INET6;
    v6_out.sin6_port = htons(port);
    v6_out.sin6_addr = ipv6();
    v6_out.sin6_scope_id = scoped() ? scope_id : 0;
    return sizeof(sockaddr_in6);
}

}  // namespace uroce::wire
