// An engine's sockets for its devices: each device's own (GID 0's, where
// its multicast groups and RAW_PACKET frames are) and one per GID whose
// address is its interface's, and which device each socket receives for.
// The sockets themselves are the network's (net/udp_network.h).
#pragma once

#include <vector>

#include "device/device.h"
#include "net/udp_network.h"
#include "util/result.h"

namespace uroce {

class DeviceSockets {
  public:
    explicit DeviceSockets(UdpNetwork& network) : network_(network) {}

    // Opens a socket of the device's on `address`: its own (GID 0's), or
    // GID `gid`'s.
    Result open(Device& device, size_t gid, const wire::IpAddress& address);
    // After the device's GID table changed: each address in it that is the
    // interface's gets a socket of its own, and those of addresses gone
    // close.
    void follow_gids(Device& device);
    // Every socket of the device closes (rdma link delete).
    void close_all(const Device& device);

    // Where a packet from the device's GID `sgid` leaves: that GID's socket,
    // or the device's own for a GID without one (the made link-local GID,
    // or an address whose socket could not be opened).
    size_t source(const Device& from, uint8_t sgid) const;
    const wire::IpAddress& source_ip(const Device& from, uint8_t sgid) const {
        return sockets_[source(from, sgid)].address;
    }
    // The device's own socket.
    static size_t own(const Device& device) { return device.gid_socket(0); }
    // The device whose socket is `index` (null once closed), and its address.
    Device* device_of(size_t index) const {
        return index < sockets_.size() ? sockets_[index].device : nullptr;
    }
    const wire::IpAddress& address_of(size_t index) const {
        static const wire::IpAddress kNone;
        return index < sockets_.size() ? sockets_[index].address : kNone;
    }
    // The device with a socket on `address`, or null.
    Device* device_at(const wire::IpAddress& address) const;

    // The device's first join of a multicast group joins it on its
    // network, its last leave leaves it.
    void listen_to_groups(Device& device);
    // Opens the device's packet socket, once; false (said once) when it
    // cannot be (no CAP_NET_RAW).
    bool open_frames(Device& device);

    // Whether the device's interface reaches other hosts: loopback carries
    // no multicast between them, and the daemon delivers to its own devices.
    static bool on_a_network(const Device& device) { return device.config().netdev != "lo"; }

  private:
    struct Socket {
        Device* device = nullptr;  // null once closed
        wire::IpAddress address;
    };
    void close(Device& device, size_t gid);

    UdpNetwork& network_;
    std::vector<Socket> sockets_;  // by the network's socket index
};

}  // namespace uroce
