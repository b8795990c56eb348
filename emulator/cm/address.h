// Socket addresses as rdma_cm carries them (AF_INET, AF_INET6, AF_IB in a
// sockaddr_storage), and which device an IP address goes through.
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include <memory>
#include <vector>

#include "device/device.h"
#include "util/result.h"

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
// The IPv4 address (network order) of AF_INET or an IPv4-mapped AF_INET6
// address; false for anything else.
bool ipv4_of(const Address& address, uint32_t& ipv4);
// Same host part (ports aside); any matches only any.
bool same_host(const Address& a, const Address& b);
// An AF_INET address with `ipv4` (network order) and `port` (host order),
// or its IPv4-mapped AF_INET6 form when `family` is AF_INET6.
Address make_address(sa_family_t family, uint32_t ipv4, uint16_t port);
std::string to_string(const Address& address);

// The device whose address is `ipv4`, if any.
Device* device_at(const std::vector<std::unique_ptr<Device>>& devices, uint32_t ipv4);

// The device a connection to `destination` leaves from: the one whose
// address the kernel's routing table picks as the source for it, else the
// device that owns the destination itself (a device talking to itself from
// an address no device has). ENODEV when no device can reach it, as the
// kernel's rdma_resolve_addr reports a route through a netdev without RDMA.
Result route(const std::vector<std::unique_ptr<Device>>& devices, uint32_t destination,
             Device*& device);

// Whether `ipv4` is an address of this host (rdma_bind_addr: EADDRNOTAVAIL
// for one that is not, ENODEV for one that is but has no device).
bool is_host_address(uint32_t ipv4);

}  // namespace uroce::cm
