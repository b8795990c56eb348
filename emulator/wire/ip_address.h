// An IPv4 or IPv6 address as RoCE v2 names it: 16 bytes, the form of a GID,
// with IPv4 as ::ffff:a.b.c.d. One type carries both from the sockets
// through the engine, the transport and the CM to the ICRC and the GRH.
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <array>
#include <compare>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::wire {

class IpAddress {
  public:
    using Bytes = std::array<uint8_t, 16>;

    IpAddress() = default;  // ::, no address
    explicit IpAddress(const Bytes& gid) : bytes_(gid) {}
    explicit IpAddress(const uint8_t (&gid)[16]);
    // `ipv4` in network order.
    static IpAddress v4(uint32_t ipv4);
    static IpAddress of(const in_addr& address) { return v4(address.s_addr); }
    static IpAddress of(const in6_addr& address);
    // A sockaddr_in or sockaddr_in6 (an IPv4-mapped IPv6 one gives the
    // IPv4 address); nothing for another family.
    static std::optional<IpAddress> of(const sockaddr* address);
    // "192.0.2.1", "fd00::1" (no brackets, no scope).
    static std::optional<IpAddress> parse(std::string_view text);

    const Bytes& bytes() const { return bytes_; }
    bool is_v4() const;
    // The IPv4 address in network order (is_v4() only).
    uint32_t ipv4() const;
    in6_addr ipv6() const;
    bool unspecified() const { return *this == IpAddress() || *this == v4(0); }
    // 224.0.0.0/4, ff00::/8.
    bool multicast() const;
    // 127.0.0.0/8, ::1: reachable only from this host.
    bool loopback() const;
    // fe80::/10: reachable only through one interface, named by its index.
    bool link_local() const { return bytes_[0] == 0xfe && (bytes_[1] & 0xc0) == 0x80; }
    // An IPv6 address that names its interface in a socket address (Linux
    // refuses to bind one without): link-local unicast, and multicast of
    // interface- or link-local scope (ff01::, ff02::; IB-style ff12::).
    bool scoped() const;
    int family() const { return is_v4() ? AF_INET : AF_INET6; }
    std::string text() const;
    // `port` in host order; `scope_id` (an interface index) for a scoped()
    // address.
    // Returns the length of what it wrote.
    socklen_t to_sockaddr(uint16_t port, sockaddr_storage& out, uint32_t scope_id = 0) const;

    auto operator<=>(const IpAddress&) const = default;
    // Two 8-byte compares: the data path asks it of every packet, and the
    // defaulted one's call to memcmp cost more than the rest of the lookup.
    bool operator==(const IpAddress& other) const {
        uint64_t a[2], b[2];
        memcpy(a, bytes_.data(), sizeof(a));
        memcpy(b, other.bytes_.data(), sizeof(b));
        return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0;
    }

  private:
    Bytes bytes_{};
};

}  // namespace uroce::wire

template <>
struct std::hash<uroce::wire::IpAddress> {
    size_t operator()(const uroce::wire::IpAddress& address) const noexcept {
        uint64_t high, low;
        memcpy(&high, address.bytes().data(), 8);
        memcpy(&low, address.bytes().data() + 8, 8);
        return std::hash<uint64_t>()(high * 0x9e3779b97f4a7c15ull ^ low);
    }
};
