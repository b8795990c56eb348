// The receive path, in one place and in order, as the kernel's rxe_recv.c:
// every check between "a datagram arrived for a device" and "the
// completer, the responder or the datagram receiver takes it". A packet
// that fails a check is counted where `uroce stats` shows it and goes no
// further.
#include <arpa/inet.h>

#include "transport/transport.h"
#include "util/coverage.h"

namespace uroce::transport {
namespace {

bool is_iba_service(wire::Service service) {
    return service == wire::Service::kRc || service == wire::Service::kUc ||
           service == wire::Service::kUd || service == wire::Service::kXrc;
}

}  // namespace

bool joined(const Qp& qp, const wire::IpAddress& group_ip) {
    const auto& gid = group_ip.bytes();
    const auto it = qp.mcast_groups.lower_bound({gid, 0});
    return it != qp.mcast_groups.end() && it->first == gid;
}

void Transport::receive(Device& to, std::span<const uint8_t> bytes, const Arrival& arrival,
                        ReceiveSink& sink) {
    // 1. Every packet is counted and traced as it arrived.
    ++to.stats().rcvd_pkts;
    if (!bytes.empty()) {
        coverage::packet(false, bytes[0]);
    }
    to.trace().record(bytes, arrival.src_ip, arrival.dest_ip, arrival.src_port, arrival.dest_port);
    // 2. Headers, and the ICRC of what came over UDP (a local delivery has none).
    wire::ParsedPacket packet;
    const wire::ParseError error =
        arrival.from_udp
            ? wire::parse_packet(bytes,
                                 wire::IcrcAddresses::between(arrival.src_ip, arrival.dest_ip,
                                                              arrival.src_port, arrival.dest_port),
                                 packet)
            : wire::parse_headers(bytes, packet);
    if (error != wire::ParseError::kOk) {
        ++(error == wire::ParseError::kIcrcMismatch ? to.stats().rcvd_icrc_err
                                                    : to.stats().rcvd_malformed);
        return;
    }
    // 3. An IBA transport service uroce implements (no RD, CNP or manufacturer opcodes).
    const wire::Service service = packet.info->service();
    if (!is_iba_service(service)) {
        ++to.stats().rcvd_malformed;
        return;
    }
    // 4. rxe's check_keys: one partition, the default, whose members may be
    // full or limited.
    if ((packet.hdr.bth.pkey & 0x7fff) != (wire::kDefaultPkey & 0x7fff)) {
        to.note_bad_pkey();
        return;
    }
    // 5. A multicast datagram goes to every UD QP of the device that joined
    // the group.
    if (service == wire::Service::kUd && packet.hdr.bth.dest_qp == wire::kMulticastQpn) {
        bool delivered = false;
        for (auto& [qpn, qp] : to.qps()) {
            if (qp->type == IBV_QPT_UD && qp->attr.qp_state >= IBV_QPS_RTR &&
                joined(*qp, arrival.dest_ip)) {
                deliver(to, *qp, packet, arrival);
                sink.qp_touched(*qp);
                delivered = true;
            }
        }
        if (!delivered) {
            ++to.stats().rcvd_unknown_qp;
        }
        return;
    }
    // 6. QP1 takes only GSI datagrams, with the well-known Q_Key: MADs for
    // the connection manager.
    if (packet.hdr.bth.dest_qp == wire::kGsiQpn) {
        if (service == wire::Service::kUd && packet.hdr.deth.qkey != wire::kGsiQkey) {
            to.note_bad_qkey();
        } else if (service == wire::Service::kUd) {
            sink.receive_mad(to, arrival.src_ip, arrival.dest_ip, packet.payload);
        } else {
            ++to.stats().rcvd_unknown_qp;
        }
        return;
    }
    // 7. A QP of the device, of the packet's transport service.
    Qp* const found = to.qps().find(packet.hdr.bth.dest_qp);
    if (!found || wire_service(found->type) != service) {
        ++to.stats().rcvd_unknown_qp;
        return;
    }
    Qp& qp = *found;
    // 8. Receiving, and for a connected QP, from its peer only.
    const bool connected = qp.type != IBV_QPT_UD;
    if (qp.attr.qp_state < IBV_QPS_RTR || (connected && destination_ip(qp) != arrival.src_ip)) {
        ++to.stats().rcvd_dropped;
        return;
    }
    deliver(to, qp, packet, arrival);
    sink.qp_touched(qp);
}

// 9. To the part of the QP that takes the packet.
void Transport::deliver(Device& device, Qp& qp, const wire::ParsedPacket& packet,
                        const Arrival& arrival) {
    const coverage::CaseScope its_case(qp.owner_case->coverage.get());
    coverage::packet_delivered(packet.hdr.bth.opcode);
    const Incoming in{{device, qp},    packet,      arrival.src_ip,
                      arrival.dest_ip, arrival.now, arrival.lent};
    if (qp.type == IBV_QPT_UD) {
        if (takes_requests(qp.attr.qp_state)) {
            responder_.on_datagram(in);
        } else {
            ++device.stats().rcvd_dropped;
        }
        return;
    }
    const bool is_response = packet.info->direction() == wire::Direction::kResponse;
    // An XRC_INI QP only sends requests; an XRC_TGT QP only answers them.
    if ((qp.type == IBV_QPT_XRC_SEND && !is_response) ||
        (qp.type == IBV_QPT_XRC_RECV && is_response)) {
        ++device.stats().rcvd_dropped;
        return;
    }
    // Responses go to the completer while the send queue is live.
    if (is_response) {
        if (qp.attr.qp_state == IBV_QPS_RTS || qp.attr.qp_state == IBV_QPS_SQD) {
            completer_.on_response(in);
        }
        return;
    }
    deliver_request(in);
}

// 10. Requests go to the responder, in order behind a READ response it is
// still sending.
void Transport::deliver_request(const Incoming& in) {
    Qp& qp = in.qp;
    const ibv_qp_state state = qp.attr.qp_state;
    if (!takes_requests(state)) {
        ++in.device.stats().rcvd_dropped;
        return;
    }
    ResponderState& s = qp.responder;
    if (state == IBV_QPS_RTR && !s.comm_established) {
        s.comm_established = true;
        qp.post_event(IBV_EVENT_COMM_EST);
    }
    if (s.reply || !s.waiting.empty()) {
        if (s.waiting.size() == kMaxWaitingRequests) {
            ++in.device.stats().rcvd_backlog_full;
            return;
        }
        s.waiting.push_back(
            {in.packet.info, in.packet.hdr,
             std::vector<uint8_t>(in.packet.payload.begin(), in.packet.payload.end())});
        return;
    }
    responder_.on_request(in);
}

}  // namespace uroce::transport
