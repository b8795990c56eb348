// What the parts of the transport pass one another: the QP a step works on,
// a received packet on its way (rxe's rxe_pkt_info), and where packets
// leave.
#pragma once

#include <stdint.h>

#include <span>

#include "device/device.h"
#include "objects/objects.h"
#include "objects/qp_state.h"
#include "wire/packet.h"

namespace uroce::transport {

// Where packets leave a device; the engine routes them (to a device of this
// daemon, or to UDP), and traces and faults see them there.
class PacketOutput {
  public:
    virtual ~PacketOutput() = default;
    // A packet of `qp` (whose number picks the UDP source port), from the
    // address of the device's GID `sgid`.
    virtual void send(Device& from, const Qp& qp, uint8_t sgid, const wire::IpAddress& dest_ip,
                      const wire::PacketHeaders& headers, std::span<const std::byte> payload) = 0;
    // A whole Ethernet frame a RAW_PACKET QP sends onto the emulated segment.
    virtual void send_frame(Device& from, const Qp& sender, std::span<const std::byte> frame) = 0;
};

// A QP and the device it belongs to (rxe reaches the device through its
// rxe_qp): what every step of the requester, completer and responder takes.
struct QpOf {
    Device& device;
    Qp& qp;
};

// One received packet on its way to the completer or the responder (what
// rxe's rxe_pkt_info is): the QP it is for, the packet, the addresses it
// came from and to, and when it arrived.
struct Incoming : QpOf {
    const wire::ParsedPacket& packet;
    wire::IpAddress src_ip;   // network order
    wire::IpAddress dest_ip;  // the device's address, or a multicast group
    Clock::time_point now;
    // The packet's bytes stay where they are until the queued writes into
    // applications are made (Transport::finish_placements): its payload is
    // written from there, not copied first.
    bool payload_lent = false;
};

// The address of the QP's destination GID: a connected QP's peer, where its
// requests and its answers go (the receive path takes its packets from
// there only).
inline wire::IpAddress destination_ip(const Qp& qp) {
    return wire::IpAddress(qp.attr.ah_attr.grh.dgid.raw);
}

// The index of a connected QP's source GID, whose address its packets
// leave from.
inline uint8_t source_gid(const Qp& qp) {
    return qp.attr.ah_attr.grh.sgid_index;
}

// Requests that may wait behind a READ response. A requester keeps at most
// 128 PSNs unacknowledged, so only a misbehaving one exceeds this.
inline constexpr size_t kMaxWaitingRequests = 512;

// The largest payload of a QP's packet: its path MTU, or for UD (which has
// no path) the port's.
inline uint32_t mtu_bytes(const Device& device, const Qp& qp) {
    return 128u << (qp.type == IBV_QPT_UD ? device.port_attr().active_mtu : qp.attr.path_mtu);
}

}  // namespace uroce::transport
