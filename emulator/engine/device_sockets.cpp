#include "engine/device_sockets.h"

#include <net/if.h>

#include "util/log.h"

namespace uroce {

Result DeviceSockets::open(Device& device, size_t gid, const wire::IpAddress& address) {
    size_t index = 0;
    // An interface's address may still be tentative (IPv6 duplicate address
    // detection): bound all the same, it receives once the kernel is done.
    if (Result r =
            network_.open(address, if_nametoindex(device.config().netdev.c_str()), index, gid != 0);
        !r) {
        return r;
    }
    if (sockets_.size() <= index) {
        sockets_.resize(index + 1);
    }
    sockets_[index] = {&device, address};
    device.set_gid_socket(gid, index);
    return ok();
}

void DeviceSockets::close(Device& device, size_t gid) {
    const size_t index = device.gid_socket(gid);
    network_.close(index);
    sockets_[index] = {};
    device.set_gid_socket(gid, Device::kNoSocket);
}

void DeviceSockets::follow_gids(Device& device) {
    if (!device.config().follows_interface) {
        return;
    }
    for (size_t gid = 1; gid < GidTable::kLength; ++gid) {
        const auto address = device.gid_table().interface_address(gid);
        const size_t socket = device.gid_socket(gid);
        if (socket != Device::kNoSocket && (!address || sockets_[socket].address != *address)) {
            close(device, gid);
        }
        if (address && device.gid_socket(gid) == Device::kNoSocket) {
            if (Result r = open(device, gid, *address); !r) {
                // Its packets leave from the device's own address instead.
                log_warn("device %s: GID %zu (%s) has no socket: %s", device.name().c_str(), gid,
                         address->text().c_str(), r.message.c_str());
            }
        }
    }
}

void DeviceSockets::close_all(const Device& device) {
    for (Socket& socket : sockets_) {
        if (socket.device == &device) {
            network_.close(static_cast<size_t>(&socket - sockets_.data()));
            socket = {};
        }
    }
}

size_t DeviceSockets::source(const Device& from, uint8_t sgid) const {
    const size_t socket = from.gid_socket(sgid);
    return socket != Device::kNoSocket ? socket : own(from);
}

Device* DeviceSockets::device_at(const wire::IpAddress& address) const {
    for (const Socket& socket : sockets_) {
        if (socket.device && socket.address == address) {
            return socket.device;
        }
    }
    return nullptr;
}

void DeviceSockets::listen_to_groups(Device& device) {
    device.set_group_listener([this, &device](const wire::IpAddress& group, bool joined) {
        if (!on_a_network(device)) {
            return;
        }
        if (!joined) {
            network_.leave(own(device), group);
        } else if (Result r = network_.join(own(device), group); !r) {
            // Its members hear this daemon's devices only.
            log_warn("device %s: %s", device.name().c_str(), r.message.c_str());
        }
    });
}

bool DeviceSockets::open_frames(Device& device) {
    if (network_.has_frames(own(device)) || device.frames_refused()) {
        return !device.frames_refused();
    }
    const unsigned ifindex = if_nametoindex(device.config().netdev.c_str());
    Result r = ifindex ? network_.open_frames(own(device), static_cast<int>(ifindex))
                       : fail(ENODEV, "no interface %s", device.config().netdev.c_str());
    if (!r) {
        device.set_frames_refused();  // said once: a daemon without CAP_NET_RAW keeps frames inside
        log_warn("device %s: RAW_PACKET frames stay inside this daemon: %s", device.name().c_str(),
                 r.message.c_str());
    }
    return static_cast<bool>(r);
}

}  // namespace uroce
