// The host's network interfaces, as far as a device needs them.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

namespace uroce {

// The interface that holds `address` (getifaddrs), which the kernel's GID
// table names as a RoCE GID's netdev; "lo" for an address no interface lists
// (the rest of 127.0.0.0/8 is routed through lo).
std::string interface_holding(in_addr address);

// The IPv4 addresses of interface `name` (its labelled ones, "eth0:1", too),
// in the order getifaddrs lists them; empty when it has none or does not exist.
std::vector<in_addr> ipv4_addresses_of(const std::string& name);

// "127.0.0.2" for an address in network order.
std::string ipv4_text(uint32_t address);

}  // namespace uroce
