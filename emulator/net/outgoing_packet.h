// A packet on its way out of a device, once built: what each stage of the
// send path (engine/send_path.h) passes on and step mode's gate holds. The
// device it leaves travels beside it.
#pragma once

#include <stdint.h>

#include <vector>

#include "wire/ip_address.h"

namespace uroce {

struct OutgoingPacket {
    uint8_t sgid = 0;         // the source GID's index: its address sends it
    wire::IpAddress dest_ip;  // a device's address, or a multicast group's
    uint16_t src_port = 0;
    uint32_t src_qpn = 0;
    std::vector<uint8_t> bytes;  // the UDP payload
};

}  // namespace uroce
