// The host's network interfaces, as far as a device needs them.
#pragma once

#include <netinet/in.h>

#include <optional>
#include <string>
#include <vector>

#include "wire/ip_address.h"

namespace uroce {

// The interface that holds `address` (getifaddrs), which the kernel's GID
// table names as a RoCE GID's netdev; "lo" for an address no interface lists
// (the rest of 127.0.0.0/8 is routed through lo).
std::string interface_holding(const wire::IpAddress& address);

// The addresses of interface `name` (its labelled ones, "eth0:1", too),
// link-local IPv6 ones only when asked for: IPv4 first, then IPv6, each in
// the order getifaddrs lists them; empty when it has none or does not exist.
// IPv6 addresses still in (or failed by) duplicate address detection are
// left out: until it ends, nothing sent to them arrives.
std::vector<wire::IpAddress> addresses_of(const std::string& name, bool link_local = false);

// What a device's port follows of its interface.
struct Link {
    unsigned mtu = 0;  // bytes of an IP packet (the interface's MTU)
    bool up = false;   // administratively up and with carrier (IFF_UP and IFF_RUNNING)
    bool operator==(const Link&) const = default;
};

// Interface `name`'s link now; nothing when there is no such interface.
std::optional<Link> link_of(const std::string& name);

}  // namespace uroce
