// Socket addresses as rdma_cm carries them (AF_INET, AF_INET6, AF_IB in a
// sockaddr_storage), and which device an IP address goes through.
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include <memory>
#include <optional>
#include <vector>

#include "device/device.h"
#include "util/result.h"
#include "wire/ip_address.h"

namespace uroce::cm {

using Address = sockaddr_storage;

// rdma_addr_size: the bytes of an address of this family, 0 if none.
size_t address_size(const Address& address);
// AF_IB carries its port in the low 16 bits of the service ID.
uint16_t port_of(const Address& address);  // host order
void set_port(Address& address, uint16_t port);
// The GID of an AF_IB address.
const uint8_t* gid_of_ib(const Address& address);
// 0.0.0.0, ::, an all-zero AF_IB GID (no family: any too).
bool is_any(const Address& address);
bool is_loopback(const Address& address);
// The IP address of AF_INET or AF_INET6 (IPv4 for an IPv4-mapped one);
// nothing for anything else.
std::optional<wire::IpAddress> ip_of(const Address& address);
// Same host part (ports aside); any matches only any.
bool same_host(const Address& a, const Address& b);
// `ip` with `port` (host order): AF_INET for IPv4, or its IPv4-mapped
// AF_INET6 form when `family` is AF_INET6; AF_INET6 for IPv6.
Address make_address(sa_family_t family, const wire::IpAddress& ip, uint16_t port);
std::string to_string(const Address& address);

// The device with a GID whose address is `ip` (its own address, or another
// of its interface's), if any.
Device* device_at(const std::vector<std::unique_ptr<Device>>& devices, const wire::IpAddress& ip);

// The device a connection to `destination` leaves from: the one whose
// address the kernel's routing table picks as the source for it, else the
// device that owns the destination itself (a device talking to itself from
// an address no device has). ENODEV when no device can reach it, as the
// kernel's rdma_resolve_addr reports a route through a netdev without RDMA.
// `source`: the device's address the connection leaves from.
Result route(const std::vector<std::unique_ptr<Device>>& devices,
             const wire::IpAddress& destination, Device*& device, wire::IpAddress& source);

// Whether `ip` is an address of this host (rdma_bind_addr: EADDRNOTAVAIL
// for one that is not, ENODEV for one that is but has no device).
bool is_host_address(const wire::IpAddress& ip);

}  // namespace uroce::cm
