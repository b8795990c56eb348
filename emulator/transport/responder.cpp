// The responder: checks each request's PSN, executes it against the
// receive queue and registered memory, and answers with ACKs, NAKs, READ
// responses and atomic acknowledgements (responder.h).
#include "transport/responder.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "keys/windows.h"
#include "memory/process_memory.h"
#include "transport/completion.h"
#include "transport/placements.h"
#include "transport/receive_queue.h"
#include "util/coverage.h"
#include "util/log.h"
#include "wire/psn.h"

namespace uroce::transport {
namespace {

using wire::Operation;
using wire::Position;

const char* flag_name(unsigned access) {
    return access == IBV_ACCESS_REMOTE_WRITE  ? "IBV_ACCESS_REMOTE_WRITE"
           : access == IBV_ACCESS_REMOTE_READ ? "IBV_ACCESS_REMOTE_READ"
                                              : "IBV_ACCESS_REMOTE_ATOMIC";
}

// Whether `fault` refuses a remote access; if so, keeps why on the QP for
// check mode (bad-remote-key), in the program's terms.
bool refused(const Device& device, Qp& qp, const char* operation, uint32_t rkey, uint64_t va,
             uint64_t length, int access, AccessFault fault) {
    if (fault == AccessFault::kNone) {
        return false;
    }
    // A window's permissions are its own, not its region's.
    const bool window = fault == AccessFault::kNoPermission && device.find_mw(rkey >> 8);
    char text[256];
    snprintf(text, sizeof(text), "%s of %llu bytes at 0x%llx with rkey 0x%x: %s%s%s", operation,
             static_cast<unsigned long long>(length), static_cast<unsigned long long>(va), rkey,
             window ? "the memory window does not allow this access" : access_fault_text(fault),
             fault == AccessFault::kNoPermission ? ", without " : "",
             fault == AccessFault::kNoPermission ? flag_name(access) : "");
    qp.responder.refused = text;
    return true;
}

// READ response packets sent per QP before the engine turns to other work
// (receiving, above all): pacing that keeps a long READ from overflowing the
// requester's socket.
constexpr uint32_t kReplyBurst = 32;
bool starts_message(Position p) {
    return p == Position::kFirst || p == Position::kOnly;
}
bool ends_message(Position p) {
    return p == Position::kLast || p == Position::kOnly;
}

// A READ of `reth` starting at `psn`: its responses take one PSN each.
ResponderResource read_request(const Device& device, const Qp& qp, uint32_t psn,
                               const wire::Reth& reth) {
    const uint64_t mtu = mtu_bytes(device, qp);
    const auto packets =
        static_cast<uint32_t>(std::max<uint64_t>(1, (reth.dma_length + mtu - 1) / mtu));
    return {psn, wire::psn_add(psn, packets - 1), false, reth, 0};
}

// UC: a message that cannot complete is dropped, and so is the rest of it
// up to the next first or only packet; a receive WQE it took stays for the
// next message.
void drop_message(Device& device, Qp& qp) {
    ResponderState& s = qp.responder;
    if (s.message.active && s.message.is_send) {
        s.unused_receive = std::move(s.message.receive);
    }
    s.message.clear();
    s.dropping = true;
    ++device.stats().rcvd_msg_dropped;
    coverage::responder(coverage::ResponderOutcome::kUnreliableMessageDropped);
}

// UC keeps no retransmission state: a packet is taken when it continues the
// message under way in sequence, or starts a message; a gap drops the
// message it falls in. The responder follows the sender's PSNs either way.
bool accept_unreliable(Device& device, Qp& qp, const wire::ParsedPacket& packet) {
    ResponderState& s = qp.responder;
    const bool gap = packet.hdr.bth.psn != s.expected_psn;
    s.expected_psn = wire::psn_add(packet.hdr.bth.psn, 1);
    if (gap) {
        ++device.stats().out_of_seq_request;
    }
    if (starts_message(packet.info->position)) {
        if (s.message.active) {
            drop_message(device, qp);  // its last packet never came
        }
        s.dropping = false;
        return true;
    }
    if (gap || s.dropping || !s.message.active) {
        if (!s.dropping) {
            drop_message(device, qp);
        }
        return false;
    }
    return true;
}

// The completion of the receive WQE a message took, as far as its status
// and length tell.
ibv_wc receive_wc(const Qp& qp, const InboundMessage& m, ibv_wc_status status) {
    ibv_wc wc{};
    wc.wr_id = m.receive.wqe.wr_id;
    wc.status = status;
    wc.qp_num = qp.qpn;
    wc.src_qp = qp.attr.dest_qp_num;
    wc.byte_len = static_cast<uint32_t>(m.offset);
    return wc;
}

// The receive of the message `m` ends, as `status` says.
void complete_message(Qp& qp, const InboundMessage& m, const wire::ParsedPacket& packet,
                      ibv_wc_status status, const std::optional<CarriedData>& data = {}) {
    ibv_wc wc = receive_wc(qp, m, status);
    const Operation op = wire::opcode_operation(packet.hdr.bth.opcode);
    wc.opcode = m.is_send ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
    if (packet.info->has(wire::ExtHeader::kImmDt)) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = htonl(packet.hdr.immdt.imm);
    }
    if (op == Operation::kSendLastInv || op == Operation::kSendOnlyInv) {
        wc.wc_flags |= IBV_WC_WITH_INV;
        wc.invalidated_rkey = packet.hdr.ieth.rkey;
    }
    if (Cq* cq = receive_cq(qp)) {
        complete_for(qp, *cq, wc, packet.hdr.bth.solicited, data);
    }
}

// Whether a request's payload fits the responder's path MTU as rxe's
// check_length has it (IBA C9-92): an only or last packet at most the MTU
// (a last one not empty), a first or middle one exactly the MTU. A sender
// whose path MTU is larger than this end's fails here, as it would on a NIC.
bool length_fits(const wire::ParsedPacket& packet, uint32_t mtu) {
    const size_t payload = packet.payload.size();
    switch (packet.info->position) {
        case Position::kOnly:
            return payload <= mtu;
        case Position::kFirst:
        case Position::kMiddle:
            return payload == mtu;
        case Position::kLast:
            return payload != 0 && payload <= mtu;
    }
    return false;
}

// Answers leave in the QP's own opcode space (RC or XRC).
uint8_t answer_opcode(const Qp& qp, Operation op) {
    return wire::make_opcode(*wire_service(qp.type), op);
}

}  // namespace

bool Responder::place(const Incoming& in, std::span<const std::byte> payload, RequestError error) {
    const InboundMessage& m = in.qp.responder.message;
    return payload.empty() ||
           placements_.queue({&in.device, &in.qp, in.packet.hdr.bth.psn, error, false},
                             m.target.pid, payload, slice(m.target, m.offset, payload.size()),
                             in.payload_lent);
}

bool Responder::placed(const Qp& qp) {
    return placements_.placed(&qp);
}

// The application unmapped memory that a queued write was for: the request
// fails as it would have had the write been made at once. Its answer and
// its completion had waited for the write.
void Responder::write_failed(const QpOf& at, uint32_t psn, RequestError error) {
    Qp& qp = at.qp;
    if (!takes_requests(qp.attr.qp_state)) {
        return;  // failed already
    }
    InboundMessage& m = qp.responder.message;
    if (m.active && m.is_send) {
        if (Cq* cq = receive_cq(qp)) {
            complete_for(qp, *cq, receive_wc(qp, m, IBV_WC_LOC_PROT_ERR), false);
        }
        m.clear();
    }
    responder_error(at, psn, error);
}

void Responder::acknowledge(const QpOf& at, uint32_t psn, wire::Aeth aeth) {
    Qp& qp = at.qp;
    if (!is_reliable(qp.type) || !placed(qp)) {
        return;  // UC answers nothing; a write that failed answered in its place
    }
    using coverage::ResponderOutcome;
    coverage::responder(
        aeth.type() == wire::AethType::kAck      ? ResponderOutcome::kAck
        : aeth.type() == wire::AethType::kRnrNak ? ResponderOutcome::kRnrNak
        : aeth.value() <= uint8_t(wire::NakCode::kInvalidRdRequest)
            ? ResponderOutcome(uint8_t(ResponderOutcome::kNakPsnSequenceError) + aeth.value())
            : ResponderOutcome::kCount);
    if (aeth.type() != wire::AethType::kAck) {
        qp.journal.last_nak = {Clock::now(), true, aeth.type() == wire::AethType::kRnrNak,
                               aeth.value(), psn};
    }
    wire::PacketHeaders h{};
    h.bth.opcode = answer_opcode(qp, Operation::kAck);
    h.bth.dest_qp = qp.attr.dest_qp_num;
    h.bth.psn = psn;
    h.aeth = aeth;
    output_.send(at.device, qp, source_gid(qp), destination_ip(qp), h, {});
}

// An atomic's answer: the value before the operation, with the MSN now.
void Responder::atomic_acknowledge(const QpOf& at, uint32_t psn, uint64_t original) {
    const Qp& qp = at.qp;
    coverage::responder(coverage::ResponderOutcome::kAtomicAck);
    wire::PacketHeaders h{};
    h.bth.opcode = answer_opcode(qp, Operation::kAtomicAck);
    h.bth.dest_qp = qp.attr.dest_qp_num;
    h.bth.psn = psn;
    h.aeth = wire::Aeth::ack(qp.responder.msn);
    h.atomic_ack_eth.original = original;
    output_.send(at.device, qp, source_gid(qp), destination_ip(qp), h, {});
}

// No receive WQE for `psn`: the requester waits and sends it again. Until it
// does, the packets behind it are dropped without a sequence NAK, which would
// spend the requester's retries on what is only a wait.
void Responder::rnr_nak(const QpOf& at, uint32_t psn) {
    Qp& qp = at.qp;
    if (!is_reliable(qp.type)) {
        drop_message(at.device, qp);  // UC cannot ask for the message again
        return;
    }
    ++at.device.stats().send_rnr_err;
    qp.responder.nak_sent = true;
    acknowledge(at, psn, wire::Aeth::rnr_nak(qp.responder.msn, qp.attr.min_rnr_timer));
}

// Application memory the responder could not reach. A client that is gone
// (ESRCH) gets silence, as a host whose QP vanished would give: its peer
// times out. Otherwise the request fails with `code`.
bool Responder::memory_failed(const QpOf& at, int error, uint32_t psn, RequestError failure) {
    if (error == 0) {
        return false;
    }
    if (error != ESRCH) {
        responder_error(at, psn, failure);
    }
    return true;
}

// A request the responder cannot execute: the one place its errors take
// effect, as kRequestErrors says.
void Responder::responder_error(const QpOf& at, uint32_t psn, RequestError error) {
    Qp& qp = at.qp;
    coverage::responder(coverage::ResponderOutcome(
        uint8_t(coverage::ResponderOutcome::kInvalidRequestError) + uint8_t(error)));
    if (!is_reliable(qp.type)) {
        drop_message(at.device, qp);  // UC: the message is lost, the QP stays (IBA class E)
        return;
    }
    const wire::NakCode code = info(error).nak;
    acknowledge(at, psn, wire::Aeth::nak(qp.responder.msn, code));
    qp.post_event(info(error).event);
    qp.move_to(IBV_QPS_ERR, 0,
               std::string("responder: NAK ") + wire::nak_code_name(static_cast<uint8_t>(code)) +
                   " sent for PSN " + std::to_string(psn));
}

// A request longer than the path MTU (rxe's RESPST_ERR_LENGTH): on RC and
// XRC the receive a SEND takes (or took) completes with
// IBV_WC_REM_INV_REQ_ERR and the request is NAKed as invalid, the QP going
// to ERR; on UC the message is lost.
void Responder::refuse_length(const Incoming& in, uint32_t psn) {
    Qp& qp = in.qp;
    InboundMessage& m = qp.responder.message;
    if (lengths_logged_.allow(RateLimit::Clock::now())) {
        if (lengths_logged_.suppressed()) {
            log_info("%llu more requests refused for their length not logged",
                     static_cast<unsigned long long>(lengths_logged_.suppressed()));
        }
        const InCase tagged(qp.owner_case.get());
        const Position position = in.packet.info->position;
        log_info(
            "%s: QP 0x%x: the request at PSN %u carries %zu bytes in a packet its path MTU "
            "of %u refuses (%s): refused as invalid",
            in.device.name().c_str(), qp.qpn, psn, in.packet.payload.size(),
            mtu_bytes(in.device, qp),
            position == Position::kFirst || position == Position::kMiddle
                ? "a first or middle packet carries exactly the MTU"
                : "a packet carries at most the MTU");
    }
    if (is_reliable(qp.type) && in.packet.info->family == wire::Family::kSend &&
        (m.active || take_receive(qp, m.receive))) {
        // The WQE taken is the message's: completed here, or (its earlier
        // packets' data still being placed) flushed with the QP.
        m.active = m.is_send = true;
        if (placed(qp)) {
            complete_message(qp, m, in.packet, IBV_WC_REM_INV_REQ_ERR);
            m.clear();
        }
    }
    responder_error(in, psn, RequestError::kInvalidRequest);
}

bool Responder::run(const QpOf& at) {
    Qp& qp = at.qp;
    if (!busy(qp)) {
        return false;
    }
    ResponderState& s = qp.responder;
    if (!takes_requests(qp.attr.qp_state)) {
        s.reply.reset();
        s.waiting.clear();
        return false;
    }
    if (s.reply) {
        send_read_responses(at);
    }
    while (!s.reply && !s.waiting.empty() && takes_requests(qp.attr.qp_state)) {
        const WaitingRequest request = std::move(s.waiting.front());
        s.waiting.pop_front();
        const wire::ParsedPacket packet{request.info, request.hdr, request.payload};
        on_request({at, packet, destination_ip(qp), at.device.config().address, Clock::now()});
    }
    return true;
}

// Whether the QP takes the request before any key is looked at: its own
// access flags allow the operation (rxe's check_qp_attr_access()), and its
// payload fits the path MTU (check_length). Otherwise it is refused here.
bool Responder::admits(const Incoming& in, uint32_t psn) {
    Qp& qp = in.qp;
    const Position position = in.packet.info->position;
    const wire::Family family = in.packet.info->family;
    const unsigned needed = (family == wire::Family::kWrite && starts_message(position)) ||
                                    family == wire::Family::kAtomicWrite
                                ? IBV_ACCESS_REMOTE_WRITE
                            : family == wire::Family::kReadRequest ? IBV_ACCESS_REMOTE_READ
                            : family == wire::Family::kAtomic      ? IBV_ACCESS_REMOTE_ATOMIC
                                                                   : 0;
    if ((qp.attr.qp_access_flags & needed) != needed) {
        qp.responder.refused = std::string("a request whose operation its qp_access_flags lack (") +
                               flag_name(needed) + ")";
        responder_error(in, psn, RequestError::kInvalidRequest);
        return false;
    }
    if (!length_fits(in.packet, mtu_bytes(in.device, qp))) {
        ++in.device.stats().rcvd_length_err;
        refuse_length(in, psn);
        return false;
    }
    return true;
}

void Responder::on_request(const Incoming& in) {
    Device& device = in.device;
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    ResponderState& s = qp.responder;
    const uint32_t psn = packet.hdr.bth.psn;
    // XRC: every request names the XRC SRQ that serves it, which must be in
    // the QP's XRC domain.
    if (qp.type == IBV_QPT_XRC_RECV &&
        !select_xrc_srq(device, qp, packet.hdr.xrceth.xrc_srq & wire::kQpnMask)) {
        ++device.stats().rcvd_xrc_srq_err;
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    const int32_t distance = wire::psn_diff(psn, s.expected_psn);
    if (!is_reliable(qp.type)) {
        if (!accept_unreliable(device, qp, packet)) {
            return;
        }
    } else if (distance < 0) {
        ++device.stats().duplicate_request;
        answer_duplicate(in);
        return;
    } else if (distance > 0) {
        ++device.stats().out_of_seq_request;
        if (!s.nak_sent) {
            s.nak_sent = true;
            acknowledge(in, s.expected_psn,
                        wire::Aeth::nak(s.msn, wire::NakCode::kPsnSequenceError));
        }
        return;
    }
    s.nak_sent = false;
    const Position position = packet.info->position;
    const bool continuing = position == Position::kMiddle || position == Position::kLast;
    if (continuing != s.message.active ||
        (continuing && s.message.is_send != (packet.info->family == wire::Family::kSend))) {
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    if (!admits(in, psn)) {
        return;
    }
    const wire::Family family = packet.info->family;
    switch (family) {
        case wire::Family::kSend:
            execute_send(in);
            break;
        case wire::Family::kWrite:
            execute_write(in);
            break;
        case wire::Family::kReadRequest: {
            if (qp.attr.max_dest_rd_atomic == 0) {
                responder_error(in, psn, RequestError::kInvalidRequest);
                return;
            }
            execute_read(in, read_request(device, qp, psn, packet.hdr.reth));
            break;
        }
        case wire::Family::kAtomic:
            execute_atomic(in);
            break;
        case wire::Family::kAtomicWrite:
            execute_atomic_write(in);
            break;
        default:
            responder_error(in, psn, RequestError::kInvalidRequest);
    }
}

bool Responder::remote_access(const Incoming& in, uint32_t psn, const char* operation,
                              uint32_t rkey, uint64_t va, uint64_t length, int access,
                              Extent& extent) {
    const AccessFault fault =
        resolve_remote(in.device, in.qp, request_pd(in.qp), rkey, va, length, access, extent);
    if (!refused(in.device, in.qp, operation, rkey, va, length, access, fault)) {
        return true;
    }
    responder_error(in, psn, RequestError::kRemoteAccess);
    return false;
}

void Responder::hold_resource(Qp& qp, const ResponderResource& resource) {
    ResponderState& s = qp.responder;
    s.resources.push_back(resource);
    while (s.resources.size() > qp.attr.max_dest_rd_atomic) {
        s.resources.pop_front();
    }
    s.expected_psn = wire::psn_add(resource.last_psn, 1);
    s.msn = wire::psn_add(s.msn, 1);
}

void Responder::execute_send(const Incoming& in) {
    Device& device = in.device;
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    ResponderState& s = qp.responder;
    InboundMessage& m = s.message;
    const uint32_t psn = packet.hdr.bth.psn;
    if (starts_message(packet.info->position)) {
        if (!take_receive(qp, m.receive)) {
            rnr_nak(in, psn);
            return;
        }
        m.active = true;
        m.is_send = true;
        m.offset = 0;
        if (resolve_local(device, request_pd(qp), m.receive.sges, IBV_ACCESS_LOCAL_WRITE,
                          m.target) != AccessFault::kNone) {
            complete_message(qp, m, packet, IBV_WC_LOC_PROT_ERR);
            m.clear();
            responder_error(in, psn, RequestError::kRemoteOperational);
            return;
        }
    }
    const auto payload = std::as_bytes(packet.payload);
    if (m.offset + payload.size() > m.target.length) {
        if (!placed(qp)) {
            return;  // what was placed lands before the completion
        }
        m.offset += payload.size();
        complete_message(qp, m, packet, IBV_WC_LOC_LEN_ERR);
        m.clear();
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    // A message of one packet may travel in its completion instead.
    const Cq* cq = receive_cq(qp);
    const std::optional<CarriedData> carried =
        starts_message(packet.info->position) && ends_message(packet.info->position) && cq
            ? carried_data(*cq, m.target, payload)
            : std::nullopt;
    if (!carried && !place(in, payload, RequestError::kRemoteOperational)) {
        return;
    }
    m.offset += payload.size();
    // The message's data lands before its completion, whatever its status.
    if (ends_message(packet.info->position) && !placed(qp)) {
        return;
    }
    if (ends_message(packet.info->position) && packet.info->has(wire::ExtHeader::kIeth)) {
        if (const char* why = invalidate_window(device, request_pd(qp), packet.hdr.ieth.rkey)) {
            const InCase tagged(qp.owner_case.get());
            log_info("%s: QP 0x%x: SEND with invalidate of rkey 0x%x failed: %s",
                     device.name().c_str(), qp.qpn, packet.hdr.ieth.rkey, why);
            complete_message(qp, m, packet, IBV_WC_REM_INV_REQ_ERR);
            m.clear();
            responder_error(in, psn, RequestError::kInvalidRequest);
            return;
        }
    }
    s.expected_psn = wire::psn_add(psn, 1);
    if (ends_message(packet.info->position)) {
        complete_message(qp, m, packet, IBV_WC_SUCCESS, carried);
        ++device.stats().rdma_recvs;
        m.clear();
        s.msn = wire::psn_add(s.msn, 1);
    }
    if (packet.hdr.bth.ack_req) {
        acknowledge(in, psn, wire::Aeth::ack(s.msn));
    }
}

// IBA 1.5's ATOMIC WRITE: 8 bytes placed at once at an 8-byte aligned
// address the rkey opens for remote write, then acknowledged; a duplicate is
// acknowledged again, as a write's (rxe's atomic_write_reply).
void Responder::execute_atomic_write(const Incoming& in) {
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    ResponderState& s = qp.responder;
    const uint32_t psn = packet.hdr.bth.psn;
    const wire::Reth& reth = packet.hdr.reth;
    if (!placed(qp)) {
        return;  // in order after the writes before it
    }
    if (packet.payload.size() != 8 || reth.dma_length != 8 || (reth.va & 7)) {
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    Extent target;
    if (!remote_access(in, psn, "an atomic write", reth.rkey, reth.va, 8, IBV_ACCESS_REMOTE_WRITE,
                       target)) {
        return;
    }
    if (const int error = write_process(target.pid, std::as_bytes(packet.payload), target.segments);
        memory_failed(in, error, psn, RequestError::kRemoteAccess)) {
        return;
    }
    s.expected_psn = wire::psn_add(psn, 1);
    s.msn = wire::psn_add(s.msn, 1);
    acknowledge(in, psn, wire::Aeth::ack(s.msn));
}

void Responder::execute_write(const Incoming& in) {
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    ResponderState& s = qp.responder;
    InboundMessage& m = s.message;
    const uint32_t psn = packet.hdr.bth.psn;
    const bool with_imm = packet.info->has(wire::ExtHeader::kImmDt);
    // The receive WQE an immediate consumes must exist before any data lands,
    // so that an RNR retry finds the message as it was.
    if (with_imm && !has_receive(qp)) {
        rnr_nak(in, psn);
        return;
    }
    if (starts_message(packet.info->position)) {
        const wire::Reth& reth = packet.hdr.reth;
        m.clear();
        m.active = true;
        if (reth.dma_length && !remote_access(in, psn, "an RDMA WRITE", reth.rkey, reth.va,
                                              reth.dma_length, IBV_ACCESS_REMOTE_WRITE, m.target)) {
            m.clear();
            return;
        }
    }
    const auto payload = std::as_bytes(packet.payload);
    if (m.offset + payload.size() > m.target.length) {
        m.clear();
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    if (!place(in, payload, RequestError::kRemoteAccess)) {
        return;
    }
    m.offset += payload.size();
    s.expected_psn = wire::psn_add(psn, 1);
    if (ends_message(packet.info->position)) {
        if (with_imm) {
            if (!placed(qp)) {
                return;
            }
            take_receive(qp, m.receive);
            complete_message(qp, m, packet, IBV_WC_SUCCESS);
        }
        m.clear();
        s.msn = wire::psn_add(s.msn, 1);
    }
    if (packet.hdr.bth.ack_req) {
        acknowledge(in, psn, wire::Aeth::ack(s.msn));
    }
}

// Answers a READ (new or repeated) with response packets from
// `request.psn`: the first burst now, the rest from run().
void Responder::execute_read(const Incoming& in, const ResponderResource& request) {
    Qp& qp = in.qp;
    ResponderState& s = qp.responder;
    const wire::Reth& reth = request.reth;
    Extent source;
    if (reth.dma_length &&
        !remote_access(in, in.packet.hdr.bth.psn, "an RDMA READ", reth.rkey, reth.va,
                       reth.dma_length, IBV_ACCESS_REMOTE_READ, source)) {
        return;
    }
    const bool repeated = wire::psn_before(request.psn, s.expected_psn);
    if (!repeated) {
        hold_resource(qp, request);
    }
    s.reply = ReadReply{request, std::move(source), 0};
    coverage::responder(coverage::ResponderOutcome::kReadResponse);
    send_read_responses(in);
}

// Sends the next burst of the READ response under way.
void Responder::send_read_responses(const QpOf& at) {
    Qp& qp = at.qp;
    ResponderState& s = qp.responder;
    if (!placed(qp)) {
        return;  // a READ sees the writes before it
    }
    ReadReply& reply = *s.reply;
    const ResponderResource& request = reply.request;
    const uint64_t length = request.reth.dma_length;
    const uint32_t mtu = mtu_bytes(at.device, qp);
    const uint32_t packets = wire::psn_diff(request.last_psn, request.psn) + 1;
    if (!reply_stage_) {
        reply_stage_ = std::make_unique_for_overwrite<std::byte[]>(kStageBytes);
    }
    // The memory is read a stage (several packets of this burst) at a time.
    const uint64_t burst_end =
        std::min<uint64_t>(length, uint64_t{std::min(packets, reply.next + kReplyBurst)} * mtu);
    uint64_t staged_from = 0;
    uint64_t staged_to = 0;
    for (uint32_t burst = 0; burst < kReplyBurst && reply.next < packets; ++burst) {
        const uint32_t i = reply.next++;
        const uint64_t offset = uint64_t{i} * mtu;
        const uint64_t bytes = std::min<uint64_t>(mtu, length - offset);
        if (offset + bytes > staged_to) {
            staged_from = offset;
            staged_to = std::min(offset + kStageBytes, burst_end);
            if (memory_failed(
                    at,
                    read_process(reply.source.pid,
                                 slice(reply.source, staged_from, staged_to - staged_from),
                                 {reply_stage_.get(), staged_to - staged_from}),
                    request.psn, RequestError::kRemoteAccess)) {
                s.reply.reset();
                return;
            }
        }
        const std::span<const std::byte> chunk(reply_stage_.get() + (offset - staged_from), bytes);
        const Operation op = packets == 1       ? Operation::kReadResponseOnly
                             : i == 0           ? Operation::kReadResponseFirst
                             : i + 1 == packets ? Operation::kReadResponseLast
                                                : Operation::kReadResponseMiddle;
        wire::PacketHeaders h{};
        h.bth.opcode = answer_opcode(qp, op);
        h.bth.dest_qp = qp.attr.dest_qp_num;
        h.bth.psn = wire::psn_add(request.psn, i);
        h.aeth = wire::Aeth::ack(s.msn);
        output_.send(at.device, qp, source_gid(qp), destination_ip(qp), h, chunk);
    }
    if (reply.next == packets) {
        s.reply.reset();
    }
}

void Responder::execute_atomic(const Incoming& in) {
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    const uint32_t psn = packet.hdr.bth.psn;
    const wire::AtomicEth& a = packet.hdr.atomic_eth;
    if (!placed(qp)) {
        return;  // in order after the writes before it
    }
    if (qp.attr.max_dest_rd_atomic == 0 || (a.va & 7)) {
        responder_error(in, psn, RequestError::kInvalidRequest);
        return;
    }
    Extent target;
    if (!remote_access(in, psn, "an atomic", a.rkey, a.va, sizeof(uint64_t),
                       IBV_ACCESS_REMOTE_ATOMIC, target)) {
        return;
    }
    // The data plane is one thread: atomics are serialised per device.
    uint64_t original = 0;
    const bool compare_swap =
        wire::opcode_operation(packet.hdr.bth.opcode) == Operation::kCompareSwap;
    if (memory_failed(in,
                      read_process(target.pid, target.segments,
                                   std::as_writable_bytes(std::span(&original, 1))),
                      psn, RequestError::kRemoteAccess)) {
        return;
    }
    const uint64_t result =
        compare_swap ? (original == a.compare ? a.swap_add : original) : original + a.swap_add;
    if (result != original &&
        memory_failed(
            in, write_process(target.pid, std::as_bytes(std::span(&result, 1)), target.segments),
            psn, RequestError::kRemoteAccess)) {
        return;
    }
    hold_resource(qp, {psn, psn, true, {}, original});
    atomic_acknowledge(in, psn, original);
}

// A request seen before: answer again without executing it again.
void Responder::answer_duplicate(const Incoming& in) {
    coverage::responder(coverage::ResponderOutcome::kDuplicate);
    Device& device = in.device;
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    ResponderState& s = qp.responder;
    const uint32_t psn = packet.hdr.bth.psn;
    const wire::Family family = packet.info->family;
    if (family == wire::Family::kReadRequest || family == wire::Family::kAtomic) {
        for (const ResponderResource& r : s.resources) {
            // A repeated READ may resume in the middle of the original's
            // responses, asking only for the rest.
            const bool read_match = !r.atomic && family == wire::Family::kReadRequest &&
                                    wire::psn_in_range(psn, r.psn, r.last_psn);
            const bool atomic_match = r.atomic && family == wire::Family::kAtomic && r.psn == psn;
            if (read_match) {
                execute_read(in, read_request(device, qp, psn, packet.hdr.reth));
                return;
            }
            if (!atomic_match) {
                continue;
            }
            atomic_acknowledge(in, psn, r.original);
            return;
        }
        return;  // older than the responder resources remember
    }
    acknowledge(in, wire::psn_add(s.expected_psn, wire::kPsnMask), wire::Aeth::ack(s.msn));
}

}  // namespace uroce::transport
