// The transport state of one QP: what its requester has in flight and what
// its responder expects next. Lives in the Qp object; only the data-plane
// engine touches it.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/process_memory.h"
#include "memory/stage_pool.h"
#include "objects/slot_ring.h"
#include "protocol/queues.h"
#include "protocol/work_requests.h"
#include "wire/ip_address.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace uroce {
struct Srq;
}

namespace uroce::transport {

using Clock = std::chrono::steady_clock;
inline constexpr Clock::time_point kNever = Clock::time_point::max();

// RC and XRC acknowledge, retransmit and NAK; UC and UD send and forget.
constexpr bool is_reliable(ibv_qp_type type) {
    return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

// The states in which a QP's responder takes requests.
constexpr bool takes_requests(ibv_qp_state state) {
    return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD ||
           state == IBV_QPS_SQE;
}

// The opcode space a QP type's packets use (nullopt: no IBA transport).
constexpr std::optional<wire::Service> wire_service(ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return wire::Service::kRc;
        case IBV_QPT_UC:
            return wire::Service::kUc;
        case IBV_QPT_UD:
            return wire::Service::kUd;
        case IBV_QPT_XRC_SEND:
        case IBV_QPT_XRC_RECV:
            return wire::Service::kXrc;
        default:
            return std::nullopt;
    }
}

// The row of a WQE whose opcode the provider could not have written: it
// fails before it is sent, and completes as a send.
inline constexpr wr::OpcodeInfo kUnknownOpcode{
    "unknown", 0, 0, wr::Kind::kSend, IBV_WC_SEND, 0, false, false, false, false};

// A send WQE taken from the send queue, until it completes.
struct SendWork {
    queues::SendWqe wqe{};
    // The opcode's row, looked up once when the WQE is taken (every packet
    // and acknowledgement asks it).
    const wr::OpcodeInfo* row = &kUnknownOpcode;
    std::vector<ibv_sge> sges;
    std::vector<std::byte> inline_data;  // with IBV_SEND_INLINE
    uint64_t length = 0;                 // message bytes
    uint32_t packets = 0;                // request packets (read: response packets)
    uint32_t first_psn = 0;              // assigned when first sent
    uint32_t sent = 0;                   // packets sent in the current attempt
    bool started = false;                // PSNs assigned
    bool done = false;                   // acknowledged, or answered in full
    uint64_t received = 0;               // read: response bytes placed
    Extent source;                       // the gather list (read, atomic: where results go)
    std::vector<std::byte> prefetched;   // the message, copied by the provider when posted
    StageBuffer staged;                  // message bytes read ahead of sending them
    uint64_t staged_offset = 0;          // where in the message staged[0] is
    uint64_t staged_size = 0;
    std::optional<ibv_wc_status> error;  // failed locally: completes so when at the front
    // UD: where the address handle points, resolved when the WQE is taken.
    wire::IpAddress dest_ip;
    uint8_t sgid = 0;  // the handle's source GID index
    uint32_t dest_qpn = 0;
    uint32_t qkey = 0;
    // UD: longer than the MTU. No packet leaves, and the WQE completes
    // without error (IBA C10-93.1.1).
    bool oversize = false;

    uint32_t last_psn() const;
    const wr::OpcodeInfo& info() const { return *row; }
    // A READ or an atomic: answered with data, holds a max_rd_atomic slot.
    bool is_read_or_atomic() const { return row->uses_rd_atomic; }
    // Acts on the device's memory keys, not on the wire.
    bool is_local_operation() const { return row->kind == wr::Kind::kLocal; }
    // What its completion says; a WQE without a row completes as a send.
    ibv_wc_opcode wc_opcode() const { return row->wc_opcode; }
    // Completes without a packet on the wire.
    bool sends_nothing() const { return is_local_operation() || oversize; }
    // Back to a new WQE's state (the staged buffer returns to its pool);
    // the vectors keep their memory for the next WQE in this slot.
    void recycle() {
        std::vector<ibv_sge> kept_sges = std::move(sges);
        std::vector<std::byte> kept_inline = std::move(inline_data);
        std::vector<std::byte> kept_prefetched = std::move(prefetched);
        std::vector<Segment> kept_segments = std::move(source.segments);
        *this = SendWork{};
        kept_sges.clear();
        kept_inline.clear();
        kept_prefetched.clear();
        kept_segments.clear();
        sges = std::move(kept_sges);
        inline_data = std::move(kept_inline);
        prefetched = std::move(kept_prefetched);
        source.segments = std::move(kept_segments);
    }
};

// The largest message: the port's max_msg_sz.
inline constexpr uint64_t kMaxMessage = 1ull << 31;
struct RequesterState {
    SlotRing<SendWork> window;  // in posting order; the front completes first
    size_t next_to_send = 0;    // index into window
    uint32_t next_psn = 0;      // for the next new packet
    uint32_t unacked_psn = 0;   // oldest PSN not yet acknowledged
    // One past the newest PSN that has left (a READ request covers all its
    // response PSNs). next_psn runs ahead of it by the rest of a message
    // being sent; a response can only answer what has left.
    uint32_t sent_psn_end = 0;
    uint32_t reads_in_flight = 0;
    int retries_left = 0;
    int rnr_retries_left = 0;
    // A retransmission is under way: until the responder acknowledges
    // something new, further NAKs and gaps do not start another (rxe's
    // started_retry), or duplicate answers would multiply the traffic.
    bool retry_started = false;
    Clock::time_point retransmit_at = kNever;
    Clock::time_point rnr_resume_at = kNever;
    // Check mode's write-race (transport/write_races.h): the QP's first
    // WRITE found racing another QP's, for its provider to ask for, and
    // that WRITE's SendWqe::check_seq.
    std::string write_race;
    uint32_t write_race_seq = 0;
    // And rnr-settings' (transport/completer.cpp): the first RNR NAK that
    // made it wait long, and the WQE it held back.
    std::string rnr_wait;
    uint32_t rnr_wait_seq = 0;
};

// A READ or atomic the responder answered: duplicates are answered again
// from here (an atomic is never executed twice).
struct ResponderResource {
    uint32_t psn = 0;
    uint32_t last_psn = 0;
    bool atomic = false;
    wire::Reth reth{};
    uint64_t original = 0;  // atomic: the value before the operation
};

// A receive WQE the responder took off its queue, with its scatter list.
struct TakenReceive {
    queues::RecvWqe wqe{};
    std::vector<ibv_sge> sges;
};

// The message the responder is receiving.
struct InboundMessage {
    bool active = false;
    bool is_send = false;
    TakenReceive receive;  // send, write with immediate: the receive WQE it consumes
    Extent target;         // where its data goes
    uint64_t offset = 0;   // bytes placed so far

    // Ends the message. The scatter lists keep their memory for the next
    // one: no allocation per message on the responder's path.
    void clear() {
        active = false;
        is_send = false;
        receive.wqe = {};
        receive.sges.clear();
        target.pid = 0;
        target.segments.clear();
        target.length = 0;
        offset = 0;
    }
};

// A READ being answered: its response packets go out a burst at a time
// (rxe's responder resumes qp->resp.res the same way).
struct ReadReply {
    ResponderResource request;
    Extent source;
    uint32_t next = 0;  // the next response packet, from 0
};

// A request that arrived while a READ was being answered: it waits its turn,
// so that the answers leave in PSN order.
struct WaitingRequest {
    const wire::OpcodeInfo* info = nullptr;
    wire::PacketHeaders hdr{};
    std::vector<uint8_t> payload;
};

struct ResponderState {
    uint32_t expected_psn = 0;
    uint32_t msn = 0;
    bool nak_sent = false;  // a PSN sequence NAK waits for the right PSN
    // UC: a packet went missing, the rest of the message is dropped until
    // the next first or only packet.
    bool dropping = false;
    // UC: the receive WQE of a dropped message, which the next one fills
    // (a message that never arrived consumes none).
    std::optional<TakenReceive> unused_receive;
    bool last_wqe_reached = false;  // IBV_EVENT_QP_LAST_WQE_REACHED reported
    // Why the last remote access was refused, for check mode's
    // bad-remote-key (control/check_peer.cpp); at most 255 characters.
    std::string refused;
    // XRC_TGT: the XRC SRQ the request being executed named (its XRCETH),
    // whose WQEs, PD and CQ serve it. Weak: destroying the SRQ is not held up.
    std::weak_ptr<Srq> xrc_srq;
    bool comm_established = false;
    InboundMessage message;
    std::deque<ResponderResource> resources;  // at most max_dest_rd_atomic
    std::optional<ReadReply> reply;
    std::deque<WaitingRequest> waiting;
};

}  // namespace uroce::transport
