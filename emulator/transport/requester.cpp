// The requester: send WQEs become request packets (requester.h).
#include "transport/requester.h"

#include <arpa/inet.h>
#include <string.h>

#include <algorithm>

#include "keys/regions.h"
#include "keys/windows.h"
#include "memory/process_memory.h"
#include "transport/invariants.h"
#include "transport/write_races.h"
#include "util/coverage.h"
#include "util/log.h"
#include "wire/psn.h"
#include "wire/rnr_timer.h"

namespace uroce::transport {
namespace {

using wire::Operation;

// A request packet is acknowledged explicitly at least this often.
constexpr uint32_t kAckRequestInterval = 16;
// PSNs sent and not yet acknowledged, at most (rxe's RXE_MAX_UNACKED_PSNS):
// a window that keeps a long message from flooding the responder's socket
// and bounds what go-back-N sends again.
constexpr uint32_t kMaxUnackedPsns = 128;
// UC and UD have no acknowledgements to pace them: a QP sends at most this
// many packets per engine turn, and the engine reads its sockets between
// turns, so that a long UC message does not overflow the receiver's socket.
constexpr uint32_t kUnreliableBurst = 32;

bool in_window(const RequesterState& r, uint32_t psn) {
    return wire::psn_diff(psn, r.unacked_psn) < static_cast<int32_t>(kMaxUnackedPsns);
}

// The request packets of a WQE: a READ or an atomic asks once, whatever
// the responses that answer it.
uint32_t request_packets(const SendWork& w) {
    return w.is_read_or_atomic() ? 1 : w.packets;
}

// A send's or a write's wire operations by the packet's place in the
// message; the last (or only) packet carries the immediate data or the
// rkey to invalidate.
struct Positions {
    Operation first, middle, last, only;
};
constexpr Positions kSendPositions{Operation::kSendFirst, Operation::kSendMiddle,
                                   Operation::kSendLast, Operation::kSendOnly};
constexpr Positions kSendImmPositions{Operation::kSendFirst, Operation::kSendMiddle,
                                      Operation::kSendLastImm, Operation::kSendOnlyImm};
constexpr Positions kSendInvPositions{Operation::kSendFirst, Operation::kSendMiddle,
                                      Operation::kSendLastInv, Operation::kSendOnlyInv};
constexpr Positions kWritePositions{Operation::kWriteFirst, Operation::kWriteMiddle,
                                    Operation::kWriteLast, Operation::kWriteOnly};
constexpr Positions kWriteImmPositions{Operation::kWriteFirst, Operation::kWriteMiddle,
                                       Operation::kWriteLastImm, Operation::kWriteOnlyImm};

const Positions& positions(const wr::OpcodeInfo& info) {
    if (info.kind == wr::Kind::kSend) {
        return info.immediate    ? kSendImmPositions
               : info.invalidate ? kSendInvPositions
                                 : kSendPositions;
    }
    return info.immediate ? kWriteImmPositions : kWritePositions;
}

// The wire operation of packet `index` of a WQE that goes on the wire.
Operation send_operation(const SendWork& w, uint32_t index) {
    const wr::OpcodeInfo& info = w.info();
    switch (info.kind) {
        case wr::Kind::kRead:
            return Operation::kReadRequest;
        case wr::Kind::kAtomic:
            return w.wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? Operation::kCompareSwap
                                                             : Operation::kFetchAdd;
        case wr::Kind::kAtomicWrite:
            return Operation::kAtomicWrite;
        default: {
            const Positions& p = positions(info);
            return w.packets == 1           ? p.only
                   : index == 0             ? p.first
                   : index + 1 == w.packets ? p.last
                                            : p.middle;
        }
    }
}

// A UD WQE's destination, from the address handle it names; false when
// the handle is not one of the client's, or belongs to another PD.
bool address_datagram(const Qp& qp, SendWork& w) {
    const std::shared_ptr<Ah> ah = qp.ahs ? qp.ahs->find(w.wqe.ah) : nullptr;
    if (!ah || ah->pd.get() != qp.pd.get()) {
        return false;
    }
    w.dest_ip = wire::IpAddress(ah->attr.grh.dgid.raw);
    w.sgid = ah->attr.grh.sgid_index;
    w.dest_qpn = w.wqe.remote_qpn & wire::kQpnMask;
    // A Q_Key with the high bit set asks for the QP's own (IBA 10.2.4.2).
    w.qkey = (w.wqe.remote_qkey & wire::kControlledQkey) ? qp.attr.qkey : w.wqe.remote_qkey;
    return true;
}

// BIND_MW and LOCAL_INV act on the device's keys when the requester
// reaches them, in order with the rest of the queue (as in Soft-RoCE).
std::optional<ibv_wc_status> run_local_operation(Device& device, const Qp& qp,
                                                 const queues::SendWqe& wqe) {
    const bool bind = wqe.opcode == IBV_WR_BIND_MW;
    const char* why =
        bind ? bind_window(device, qp, wqe) : invalidate_window(device, qp.pd.get(), wqe.imm_data);
    if (!why) {
        return std::nullopt;
    }
    const InCase tagged(qp.owner_case.get());
    log_info("%s: QP 0x%x: %s of rkey 0x%x failed: %s", device.name().c_str(), qp.qpn,
             bind ? "binding a memory window" : "local invalidation",
             bind ? wqe.mw_rkey : wqe.imm_data, why);
    return bind ? IBV_WC_MW_BIND_ERR : IBV_WC_LOC_QP_OP_ERR;
}

// The message the provider copied after the gather list when posting it
// becomes the staged bytes, as if read from the application; the gather
// list is still checked before it is sent. A copy that is not the whole
// message is a WQE the provider could not have written.
void take_prefetched(SendWork& w, const std::byte* bytes, size_t room) {
    const uint32_t length = w.wqe.inline_length;
    if (length == 0) {
        return;
    }
    if (length != w.length || length > room || length > queues::kPrefetchBytes) {
        w.error = IBV_WC_LOC_QP_OP_ERR;
        return;
    }
    w.prefetched.assign(bytes, bytes + length);
}

}  // namespace

uint32_t SendWork::last_psn() const {
    return wire::psn_add(first_psn, std::max<uint32_t>(packets, 1) - 1);
}

bool Requester::take_work(const QpOf& at) {
    Qp& qp = at.qp;
    bool took = false;
    std::vector<std::byte>& entry = entry_;
    entry.resize(qp.send_queue.entry_size());
    while (qp.send_queue.has_pending()) {
        qp.send_queue.take(entry);  // the slot is released when the WQE completes
        SendWork& w = qp.requester.window.emplace_back();
        memcpy(&w.wqe, entry.data(), sizeof(w.wqe));
        coverage::work_request(qp.type, w.wqe.opcode);
        if (planted_bug) [[unlikely]] {
            planted_bug(at.device, qp, w);
        }
        if (const wr::OpcodeInfo* row = wr::opcode_info(w.wqe.opcode)) {
            w.row = row;
        }
        const std::byte* data = entry.data() + queues::kSendWqeFixed;
        const size_t room = entry.size() - queues::kSendWqeFixed;
        const bool is_inline = w.wqe.send_flags & IBV_SEND_INLINE;
        if (!wr::allowed(qp.type, w.wqe.opcode) ||
            (is_inline
                 ? w.wqe.inline_length > room
                 : w.wqe.num_sge > qp.cap.max_send_sge || w.wqe.num_sge * sizeof(ibv_sge) > room)) {
            w.error = IBV_WC_LOC_QP_OP_ERR;
        } else if (is_inline) {
            w.inline_data.assign(data, data + w.wqe.inline_length);
            w.length = w.wqe.inline_length;
        } else {
            const auto* sges = reinterpret_cast<const ibv_sge*>(data);
            w.sges.assign(sges, sges + w.wqe.num_sge);
            for (const ibv_sge& sge : w.sges) {
                w.length += sge.length;
            }
            take_prefetched(w, data + w.sges.size() * sizeof(ibv_sge),
                            room - w.sges.size() * sizeof(ibv_sge));
        }
        const wr::Kind kind = w.info().kind;  // kUnknownOpcode's: failed above
        const bool atomic = kind == wr::Kind::kAtomic;
        if (!w.error && w.length > kMaxMessage) {
            w.error = IBV_WC_LOC_LEN_ERR;
        }
        // An atomic write carries its 8 bytes inline (the provider copies them).
        if (!w.error && wr::eight_bytes(kind) && (w.length != 8 || (w.wqe.remote_addr & 7))) {
            w.error = w.length != 8 ? IBV_WC_LOC_LEN_ERR : IBV_WC_REM_INV_REQ_ERR;
        }
        if (!w.error && qp.type == IBV_QPT_UD && !address_datagram(qp, w)) {
            w.error = IBV_WC_LOC_QP_OP_ERR;
        }
        const uint32_t mtu = mtu_bytes(at.device, qp);
        w.oversize = qp.type == IBV_QPT_UD && w.length > mtu;
        w.packets =
            w.sends_nothing() || atomic ? 1 : std::max<uint32_t>(1, (w.length + mtu - 1) / mtu);
        claim_write_target(at, w);
        took = true;
    }
    return took;
}

void Requester::send_packet(const QpOf& at, SendWork& w, uint32_t index, bool ask_ack) {
    const Qp& qp = at.qp;
    const uint32_t mtu = mtu_bytes(at.device, qp);
    const Operation operation = send_operation(w, index);
    const uint8_t opcode = wire::make_opcode(*wire_service(qp.type), operation);
    const wire::OpcodeInfo& info = *wire::opcode_info(opcode);
    const bool last = index + 1 == w.packets;
    const bool datagram = qp.type == IBV_QPT_UD;

    wire::PacketHeaders h{};
    h.bth.opcode = opcode;
    h.bth.dest_qp = datagram ? w.dest_qpn : qp.attr.dest_qp_num;
    h.bth.psn = wire::psn_add(w.first_psn, index);
    h.bth.solicited = last && (w.wqe.send_flags & IBV_SEND_SOLICITED);
    h.bth.ack_req =
        is_reliable(qp.type) && (ask_ack || last || (index + 1) % kAckRequestInterval == 0);
    h.deth = {w.qkey, qp.qpn};
    h.xrceth.xrc_srq = w.wqe.remote_srqn & wire::kQpnMask;
    h.reth = {w.wqe.remote_addr, w.wqe.rkey, static_cast<uint32_t>(w.length)};
    h.immdt.imm = ntohl(w.wqe.imm_data);
    h.ieth.rkey = w.wqe.imm_data;  // the rkey to invalidate shares the field
    // AtomicETH carries the swap value (or the addend), then the compare value.
    h.atomic_eth =
        w.wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP
            ? wire::AtomicEth{w.wqe.remote_addr, w.wqe.rkey, w.wqe.swap, w.wqe.compare_add}
            : wire::AtomicEth{w.wqe.remote_addr, w.wqe.rkey, w.wqe.compare_add, 0};

    std::span<const std::byte> payload;
    if (info.payload) {
        const uint64_t offset = uint64_t{index} * mtu;
        const uint64_t bytes = std::min<uint64_t>(mtu, w.length - offset);
        if (!w.inline_data.empty()) {
            payload = std::span(w.inline_data).subspan(offset, bytes);
        } else if (bytes) {
            payload = stage(w, offset, bytes);
            if (payload.empty()) {
                w.error = IBV_WC_LOC_PROT_ERR;
                return;
            }
        }
    }
    output_.send(at.device, qp, datagram ? w.sgid : source_gid(qp),
                 datagram ? w.dest_ip : destination_ip(qp), h, payload);
}

std::span<const std::byte> Requester::stage(SendWork& w, uint64_t offset, uint64_t bytes) {
    if (!w.prefetched.empty()) {
        return std::span(w.prefetched).subspan(offset, bytes);
    }
    if (bytes > kStageBytes) {
        return {};
    }
    if (!w.staged || offset < w.staged_offset || offset + bytes > w.staged_offset + w.staged_size) {
        const uint64_t chunk = std::min(kStageBytes, w.length - offset);
        if (!w.staged) {
            w.staged = stages_.take();
        }
        w.staged_offset = offset;
        w.staged_size = 0;
        if (read_process(w.source.pid, slice(w.source, offset, chunk),
                         std::span(w.staged.get(), chunk)) != 0) {
            return {};
        }
        w.staged_size = chunk;
    }
    return {w.staged.get() + (offset - w.staged_offset), bytes};
}

void Requester::release_stage(SendWork& w) {
    stages_.give(std::move(w.staged));
    w.staged_size = 0;
}

// Starts the next WQE when the ordering rules let it (max_rd_atomic,
// fences, the PSN window): its gather list resolved, a local operation
// run, its PSNs assigned. False when it must wait, or failed (w.error: it
// completes in order, then fails the QP).
bool Requester::start_work(const QpOf& at, SendWork& w) {
    Device& device = at.device;
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    const uint32_t max_reads = std::max<uint32_t>(qp.attr.max_rd_atomic, 1);
    if (w.is_read_or_atomic() && r.reads_in_flight >= max_reads) {
        return false;
    }
    if ((w.wqe.send_flags & IBV_SEND_FENCE) && r.reads_in_flight) {
        return false;
    }
    if (is_reliable(qp.type) && !w.sends_nothing() && !in_window(r, r.next_psn)) {
        return false;
    }
    if (!w.sends_nothing() && w.inline_data.empty()) {
        // Reads and atomics write their answer into the gather list.
        const int access = wr::returns_data(w.info().kind) ? IBV_ACCESS_LOCAL_WRITE : 0;
        if (resolve_local(device, qp.pd.get(), w.sges, access, w.source) != AccessFault::kNone) {
            w.error = IBV_WC_LOC_PROT_ERR;
            return false;
        }
    }
    if (w.is_local_operation() && (w.error = run_local_operation(device, qp, w.wqe)).has_value()) {
        return false;
    }
    w.started = true;
    if (w.oversize) {
        ++device.stats().ud_oversize;
    }
    if (w.sends_nothing()) {
        return true;
    }
    w.first_psn = r.next_psn;
    r.next_psn = wire::psn_add(r.next_psn, w.packets);
    ++device.stats().rdma_sends;
    if (w.is_read_or_atomic()) {
        ++r.reads_in_flight;
    }
    return true;
}

// Sends the started WQE's request packets while the budget and the PSN
// window allow (a READ or an atomic is one request). Whether it sent any.
bool Requester::send_requests(const QpOf& at, SendWork& w, uint32_t& budget) {
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    const bool reliable = is_reliable(qp.type);
    bool did = false;
    while (w.sent < request_packets(w) && !w.error && budget > 0 &&
           (!reliable || in_window(r, wire::psn_add(w.first_psn, w.sent)))) {
        const uint32_t index = w.sent++;
        // The packet after which the requester stops for now (the turn's
        // budget or the window is used up) asks for an ACK: what it sent is
        // not left unacknowledged, its retransmission timer running, until
        // the QP's next turn, which may come long after when many QPs share
        // the budget.
        const bool stopping =
            reliable && (budget == 1 || !in_window(r, wire::psn_add(w.first_psn, w.sent)));
        send_packet(at, w, index, stopping);
        const uint32_t newest =
            w.is_read_or_atomic() ? w.last_psn() : wire::psn_add(w.first_psn, w.sent - 1);
        if (!wire::psn_before(newest, r.sent_psn_end)) {
            r.sent_psn_end = wire::psn_add(newest, 1);
        }
        --budget;
        did = true;
    }
    return did;
}

bool Requester::run(const QpOf& at, Clock::time_point now, uint32_t& turn_budget) {
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    bool did = take_work(at);
    if (r.rnr_resume_at != kNever && now < r.rnr_resume_at) {
        return did;  // waiting out an RNR NAK
    }
    const bool reliable = is_reliable(qp.type);
    const uint32_t given = reliable ? turn_budget : std::min(turn_budget, kUnreliableBurst);
    uint32_t budget = given;
    while (r.next_to_send < r.window.size() && budget > 0) {
        SendWork& w = r.window[r.next_to_send];
        if (w.error || (!w.started && !start_work(at, w))) {
            break;
        }
        if (w.sends_nothing()) {
            w.done = true;
            ++r.next_to_send;
            continue;
        }
        did |= send_requests(at, w, budget);
        if (w.error || w.sent < request_packets(w)) {
            break;  // the rest when acknowledgements open the window, or next turn
        }
        release_stage(w);
        if (!reliable) {
            r.unacked_psn = r.next_psn;  // nothing is acknowledged: sent is done
        }
        ++r.next_to_send;
        did = true;
    }
    if (reliable && r.retransmit_at == kNever && r.next_psn != r.unacked_psn) {
        const auto timeout = wire::local_ack_timeout(qp.attr.timeout);
        if (timeout) {
            r.retransmit_at = now + *timeout;
        }
    }
    turn_budget -= given - budget;
    return did;
}

void prepare_transport(Qp& qp, ibv_qp_state from, int mask) {
    const ibv_qp_state to = qp.attr.qp_state;
    if (to == IBV_QPS_RESET) {
        qp.requester = {};
        qp.responder = {};
        qp.send_queue.discard_pending();
        qp.recv_queue.discard_pending();
        return;
    }
    if (to == IBV_QPS_RTR && from == IBV_QPS_INIT) {
        qp.responder = {};
        qp.responder.expected_psn = qp.attr.rq_psn;
    }
    if (to == IBV_QPS_RTS && (from == IBV_QPS_RTR || (mask & IBV_QP_SQ_PSN))) {
        qp.requester.next_psn = qp.requester.unacked_psn = qp.requester.sent_psn_end =
            qp.attr.sq_psn;
    }
    if (mask & IBV_QP_RETRY_CNT) {
        qp.requester.retries_left = qp.attr.retry_cnt;
    }
    if (mask & IBV_QP_RNR_RETRY) {
        qp.requester.rnr_retries_left = qp.attr.rnr_retry;
    }
}

}  // namespace uroce::transport
