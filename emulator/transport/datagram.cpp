// The UD responder: each datagram is a whole message. Its Q_Key must be the
// QP's; it fills one receive WQE with a GRH and its payload, or is lost
// (UD has no RNR NAK); nothing is answered.
#include <arpa/inet.h>

#include "memory/process_memory.h"
#include "transport/completion.h"
#include "transport/receive_queue.h"
#include "transport/responder.h"
#include "util/coverage.h"
#include "wire/grh.h"

namespace uroce::transport {
namespace {

// The TTL the GRH reports: the default hop limit, as no socket tells the
// sender's.
constexpr uint8_t kHopLimit = 64;

}  // namespace

void Responder::on_datagram(const Incoming& in) {
    Device& device = in.device;
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    // rxe's check_keys(): a wrong Q_Key is dropped and counted.
    if (packet.hdr.deth.qkey != qp.attr.qkey) {
        device.note_bad_qkey();
        return;
    }
    TakenReceive receive;
    if (!take_receive(qp, receive)) {
        ++device.stats().rcvd_msg_dropped;
        coverage::responder(coverage::ResponderOutcome::kDatagramDropped);
        return;
    }
    ibv_wc wc{};
    wc.wr_id = receive.wqe.wr_id;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp.qpn;
    wc.src_qp = packet.hdr.deth.src_qp;
    wc.wc_flags = IBV_WC_GRH;
    wc.sl = wire::roce_l3_header(in.src_ip);
    wc.byte_len = static_cast<uint32_t>(wire::kGrhBytes + packet.payload.size());
    if (packet.info->has(wire::ExtHeader::kImmDt)) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = htonl(packet.hdr.immdt.imm);
    }
    Extent target;
    std::optional<CarriedData> carried;
    if (resolve_local(device, qp.pd.get(), receive.sges, IBV_ACCESS_LOCAL_WRITE, target) !=
        AccessFault::kNone) {
        wc.status = IBV_WC_LOC_PROT_ERR;
    } else if (target.length < wc.byte_len) {
        wc.status = IBV_WC_LOC_LEN_ERR;  // the QP stays usable (IBA class D, as rxe)
    } else {
        const auto grh =
            wire::received_grh(in.src_ip, in.dest_ip,
                               wire::packet_size(*packet.info, packet.payload.size()), kHopLimit);
        std::vector<std::byte>& message = datagram_;
        message.resize(wc.byte_len);
        memcpy(message.data(), grh.data(), grh.size());
        memcpy(message.data() + grh.size(), packet.payload.data(), packet.payload.size());
        carried = carried_data(*qp.recv_cq.get(), target, message);
        if (!carried && write_process(target.pid, message, slice(target, 0, wc.byte_len)) != 0) {
            wc.status = IBV_WC_LOC_PROT_ERR;
        }
    }
    if (wc.status == IBV_WC_SUCCESS) {
        ++device.stats().rdma_recvs;
        coverage::responder(coverage::ResponderOutcome::kDatagramDelivered);
    }
    complete_for(qp, *qp.recv_cq.get(), wc, packet.hdr.bth.solicited, carried);
}

}  // namespace uroce::transport
