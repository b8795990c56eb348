// The IB CM on the wire (IBA chapter 12): MADs sent and retried, MADs
// received and matched to their connection, and each message's effect.
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "cm/connection_manager.h"
#include "cm/internal.h"
#include "util/log.h"
#include "util/ownership.h"
#include "wire/byte_order.h"
#include "wire/headers.h"

namespace uroce::cm {

using namespace internal;

// ---- the wire ----------------------------------------------------------------

namespace {

// What an ID does counts in the case of the program whose channel it is on.
const CaseTag* case_of(const Id& id) {
    return id.channel ? id.channel->case_tag.get() : nullptr;
}

}  // namespace

void ConnectionManager::send(Id& id, const Message& message, bool retransmit) {
    const auto mad = encode(id.transaction_id, message);
    ++id.device->stats().cm_mads_sent;
    send_mad_(*id.device, source_gid(id), id.peer_ip, mad);
    if (retransmit) {
        id.pending_mad = std::make_unique<std::array<std::byte, kMadSize>>(mad);
        id.retries_left = kMaxCmRetries;
        arm_retry(id);
    } else {
        stop_retransmitting(id);
    }
}

void ConnectionManager::send_mra(Id& id, Answered answered) {
    Mra mra;
    mra.local_comm_id = id.local_comm_id;
    mra.remote_comm_id = id.remote_comm_id;
    mra.message_mraed = answered;
    mra.service_timeout = kMraServiceTimeout;
    send(id, mra, false);
}

// The listener's backlog, and the ID tables (the daemon's and the listener's
// client's share), have room for one more request's ID.
bool ConnectionManager::room_for_request(const Id& listener) const {
    return listener.backlog > 0 && ids_.size() < kMaxIds &&
           ids_.held_by(listener.channel->pid) < kMaxIdsPerClient;
}

Id& ConnectionManager::requested_id(const Id& listener, Device& to, const IpCmHeader& header) {
    Id& id = new_id(*listener.channel, 0, listener.ps, listener.qp_type);
    const sa_family_t family = listener.src.ss_family;
    id.reporting = false;
    set_state(id, IdState::kConnect);
    id.device = &to;
    id.src = make_address(family, header.dst_ip, port_of(listener.src));
    id.dst = make_address(family, header.src_ip, header.src_port);
    id.listener = listener.handle;
    return id;
}

void ConnectionManager::send_reply(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                                   uint64_t transaction_id, const Message& message) {
    ++from.stats().cm_mads_sent;
    send_mad_(from, sgid, dest_ip, encode(transaction_id, message));
}

void ConnectionManager::arm_retry(Id& id) {
    start_timer(id, id.retry_interval);
}

// An ID's timer exists only once it retransmits or waits in timewait, so
// that an idle ID costs little memory.
void ConnectionManager::start_timer(Id& id, std::chrono::milliseconds after) {
    if (!id.timer) {
        id.timer = std::make_unique<boost::asio::steady_timer>(io_);
    }
    id.timer->expires_after(after);
    id.timer->async_wait(
        in_control_turn([this, handle = id.handle](const boost::system::error_code& error) {
            if (!error) {
                on_retry_timer(handle);
            }
        }));
}

void ConnectionManager::stop_retransmitting(Id& id) {
    id.pending_mad.reset();
    if (id.timer) {
        id.timer->cancel();
    }
}

void ConnectionManager::on_retry_timer(uint32_t handle) {
    Id* id = ids_.find(handle);
    if (!id) {
        return;
    }
    const InCase tagged(case_of(*id));
    if (id->cm == CmState::kTimewait) {
        set_cm(*id, CmState::kIdle);
        ids_.forget_connection(*id);
        report(*id, RDMA_CM_EVENT_TIMEWAIT_EXIT);
        return;
    }
    if (!id->pending_mad) {
        return;
    }
    if (id->retries_left > 0) {
        --id->retries_left;
        ++id->device->stats().cm_mads_sent;
        ++id->device->stats().cm_mads_retried;
        send_mad_(*id->device, source_gid(*id), id->peer_ip, *id->pending_mad);
        arm_retry(*id);
        return;
    }
    // Out of retries: what cm.c reports for each message that went unanswered.
    id->pending_mad.reset();
    log_info("rdma_cm ID %u: no answer from %s after %d retries (%s)", id->handle,
             to_string(id->dst).c_str(), kMaxCmRetries, name(id->cm));
    switch (id->cm) {
        case CmState::kReqSent:
        case CmState::kRepSent:
        case CmState::kSidrReqSent:
            set_cm(*id, CmState::kIdle);
            id->has_cm = false;
            report(*id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
            break;
        case CmState::kDreqSent:
            report(*id, RDMA_CM_EVENT_DISCONNECTED);
            set_state(*id, IdState::kDisconnect);
            enter_timewait(*id);
            break;
        default:
            break;
    }
}

void ConnectionManager::enter_timewait(Id& id) {
    set_cm(id, CmState::kTimewait);
    id.pending_mad.reset();
    start_timer(id, iba_time(kAckTimeout));
}

void ConnectionManager::abandon_connection(Id& id) {
    if (!id.device) {
        return;
    }
    auto rej = [&](RejectReason reason) {
        Rej message = rej_of(id, reason);
        if (reason == RejectReason::kTimeout) {
            // cm_destroy_id: the peer finds the connection by our CA GUID.
            const uint64_t guid = htobe64(id.device->node_guid());
            memcpy(message.ari.data(), &guid, sizeof(guid));
            message.reject_info_length = sizeof(guid);
        }
        send(id, message, false);
    };
    switch (id.cm) {
        case CmState::kReqSent:
            rej(RejectReason::kTimeout);
            break;
        case CmState::kReqRcvd:
        case CmState::kMraReqSent:
        case CmState::kRepSent:
        case CmState::kRepRcvd:
        case CmState::kMraRepSent:
            rej(RejectReason::kConsumerDefined);
            break;
        case CmState::kEstablished: {
            Dreq dreq;
            dreq.local_comm_id = id.local_comm_id;
            dreq.remote_comm_id = id.remote_comm_id;
            dreq.remote_qpn_eecn = id.remote_qpn;
            send(id, dreq, false);
            break;
        }
        case CmState::kDreqRcvd: {
            Drep drep;
            drep.local_comm_id = id.local_comm_id;
            drep.remote_comm_id = id.remote_comm_id;
            send(id, drep, false);
            break;
        }
        case CmState::kSidrReqRcvd: {
            SidrRep rep;
            rep.request_id = id.remote_comm_id;
            rep.status = SidrStatus::kReject;
            rep.service_id = service_id(port_space(id.ps), port_of(id.src));
            send(id, rep, false);
            break;
        }
        default:
            break;
    }
    set_cm(id, CmState::kIdle);
}

void ConnectionManager::receive_mad(Device& to, const wire::IpAddress& src_ip,
                                    const wire::IpAddress& dest_ip,
                                    std::span<const uint8_t> bytes) {
    ++to.stats().cm_mads_rcvd;
    Mad mad;
    if (decode(std::as_bytes(bytes), mad) != DecodeError::kOk) {
        ++to.stats().cm_mads_dropped;
        return;
    }
    handle(to, src_ip, gid_index_at(to, dest_ip), mad);
}

Id* ConnectionManager::by_comm_id(uint32_t local_comm_id, const wire::IpAddress& src_ip) {
    Id* id = ids_.by_comm_id(local_comm_id);
    // Only the peer the connection was made with speaks for it.
    return id && id->peer_ip == src_ip ? id : nullptr;
}

void ConnectionManager::handle(Device& to, const wire::IpAddress& src_ip, uint8_t at,
                               const Mad& mad) {
    const uint64_t tid = mad.header.transaction_id;
    if (const auto* req = std::get_if<Req>(&mad.message)) {
        on_req(to, src_ip, at, tid, *req);
        return;
    }
    if (const auto* req = std::get_if<SidrReq>(&mad.message)) {
        on_sidr_req(to, src_ip, at, tid, *req);
        return;
    }
    Id* const id = addressed(to, src_ip, mad);
    if (!id) {
        const auto* dreq = std::get_if<Dreq>(&mad.message);
        if (dreq &&
            (by_comm_id(dreq->remote_comm_id, src_ip) || !ids_.by_comm_id(dreq->remote_comm_id))) {
            // cm_issue_drep: a DREQ for no connection is answered (a peer
            // whose DREP was lost stops asking); one from another address not.
            Drep drep;
            drep.local_comm_id = dreq->remote_comm_id;
            drep.remote_comm_id = dreq->local_comm_id;
            send_reply(to, at, src_ip, tid, drep);
        }
        ++to.stats().cm_mads_dropped;
        return;
    }
    const InCase tagged(case_of(*id));
    coverage::cm_message_delivered(static_cast<uint32_t>(mad.header.attribute));
    std::visit(
        [&](const auto& message) {
            using T = std::decay_t<decltype(message)>;
            if constexpr (std::is_same_v<T, Rep>) {
                on_rep(*id, message);
            } else if constexpr (std::is_same_v<T, Rtu>) {
                on_rtu(*id);
            } else if constexpr (std::is_same_v<T, Rej>) {
                on_rej(*id, message);
            } else if constexpr (std::is_same_v<T, Mra>) {
                on_mra(*id, message);
            } else if constexpr (std::is_same_v<T, Dreq>) {
                on_dreq(*id, message);
            } else if constexpr (std::is_same_v<T, Drep>) {
                on_drep(*id);
            } else if constexpr (std::is_same_v<T, SidrRep>) {
                on_sidr_rep(*id, message);
            }
        },
        mad.message);
}

Id* ConnectionManager::addressed(Device& to, const wire::IpAddress& src_ip, const Mad& mad) {
    // Every message but a request names our side's communication ID and, as
    // the kernel's cm.c matches them, the peer's too once it is known:
    // anything else is stale or forged, and changes nothing.
    auto ours = [&](uint32_t local) -> Id* {
        Id* id = by_comm_id(local, src_ip);
        return id && id->device == &to ? id : nullptr;
    };
    auto both = [&](uint32_t local, uint32_t remote) -> Id* {
        Id* id = ours(local);
        return id && id->remote_comm_id == remote ? id : nullptr;
    };
    // REP and MRA before the peer's ID is known (cm_rep_handler,
    // cm_mra_handler), both once it is (cm_dup_rep_handler).
    auto ours_then_both = [&](uint32_t local, uint32_t remote) -> Id* {
        Id* id = ours(local);
        return id && (!id->remote_comm_id || id->remote_comm_id == remote) ? id : nullptr;
    };
    return std::visit(
        [&](const auto& message) -> Id* {
            using T = std::decay_t<decltype(message)>;
            if constexpr (std::is_same_v<T, Rep> || std::is_same_v<T, Mra>) {
                return ours_then_both(message.remote_comm_id, message.local_comm_id);
            } else if constexpr (std::is_same_v<T, Rtu> || std::is_same_v<T, Dreq> ||
                                 std::is_same_v<T, Drep>) {
                return both(message.remote_comm_id, message.local_comm_id);
            } else if constexpr (std::is_same_v<T, Rej>) {
                // cm_acquire_rejected_id: a REJ for a timeout names the peer's
                // side alone; any other, ours (and theirs once known).
                return message.reason == RejectReason::kTimeout
                           ? gave_up(to, src_ip, message)
                           : ours_then_both(message.remote_comm_id, message.local_comm_id);
            } else if constexpr (std::is_same_v<T, SidrRep>) {
                return ours(message.request_id);
            } else {
                return nullptr;
            }
        },
        mad.message);
}

// An active side that gave up before it knew our communication ID (its
// REJ for a timeout, cm_destroy_id) names its own, with its CA GUID in the
// ARI: both must be those of the connection's peer.
Id* ConnectionManager::gave_up(Device& to, const wire::IpAddress& src_ip, const Rej& rej) {
    Id* id = ids_.by_peer(&to, src_ip, rej.local_comm_id);
    const bool guid =
        id && rej.reject_info_length >= sizeof(uint64_t) &&
        wire::load_be64(reinterpret_cast<const uint8_t*>(rej.ari.data())) == id->remote_ca_guid;
    return guid ? id : nullptr;
}

Id* ConnectionManager::find_listener(Device& to, uint16_t ps, uint16_t port,
                                     const wire::IpAddress& dest_ip) {
    Id* wildcard = nullptr;
    for (Id* id : ids_.listeners(ps, port)) {
        if (id->state != IdState::kListen) {
            continue;
        }
        if (is_any(id->src)) {
            // An IPv6-only wildcard does not hear IPv4, nor an IPv4 one IPv6.
            const bool hears = dest_ip.is_v4() ? !(id->src.ss_family == AF_INET6 && id->afonly)
                                               : id->src.ss_family == AF_INET6;
            if (hears) {
                wildcard = wildcard ? wildcard : id;
            }
            continue;
        }
        if (ip_of(id->src) == dest_ip && (!id->device || id->device == &to)) {
            return id;
        }
    }
    return wildcard;
}

namespace {

// The CONNECT_REQUEST event a listener's channel gets for a REQ.
Channel::Event connect_request(const Id& listener, const Id& id, const Req& req) {
    Channel::Event event{listener.handle, id.handle, {}};
    event.resp.uid = listener.uid;
    event.resp.id = id.handle;
    event.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    rdma_ucm_conn_param& conn = event.resp.param.conn;
    copy_conn_private(conn, std::span(req.private_data).subspan(kUserPrivateOffset));
    conn.responder_resources = id.responder_resources;
    conn.initiator_depth = id.initiator_depth;
    conn.flow_control = req.end_to_end_flow_control;
    conn.retry_count = req.retry_count;
    conn.rnr_retry_count = req.rnr_retry_count;
    conn.srq = req.srq;
    conn.qp_num = req.local_qpn;
    return event;
}

}  // namespace

// A REQ again (cm_dup_req_handler): while the program decides, an MRA says
// so; in timewait the connection is stale; otherwise nothing.
void ConnectionManager::on_repeated_req(Id& id, Device& to, const wire::IpAddress& src_ip,
                                        uint64_t tid) {
    if (id.cm == CmState::kMraReqSent) {
        send_mra(id, Answered::kReq);
    } else if (id.cm == CmState::kTimewait) {
        send_reply(to, source_gid(id), src_ip, tid, rej_of(id, RejectReason::kStaleConnection));
    } else {
        ++to.stats().cm_mads_dropped;
    }
}

void ConnectionManager::on_req(Device& to, const wire::IpAddress& src_ip, uint8_t at, uint64_t tid,
                               const Req& req) {
    if (Id* id = ids_.by_peer(&to, src_ip, req.local_comm_id)) {
        on_repeated_req(*id, to, src_ip, tid);
        return;
    }
    const auto header = decode_ip_cm_header(req.private_data);
    const PortSpace ps = port_space_of(req.service_id);
    auto refuse = [&](RejectReason reason) {
        Rej rej;
        rej.remote_comm_id = req.local_comm_id;
        rej.message_rejected = Answered::kReq;
        rej.reason = reason;
        send_reply(to, at, src_ip, tid, rej);
    };
    if (!header || !to.gid_table().index_of(header->dst_ip) ||
        (ps != PortSpace::kTcp && ps != PortSpace::kIb)) {
        refuse(RejectReason::kInvalidServiceId);
        return;
    }
    Id* listener =
        find_listener(to, static_cast<uint16_t>(ps), cm::port_of(req.service_id), header->dst_ip);
    if (!listener || listener->qp_type == IBV_QPT_UD) {
        refuse(RejectReason::kInvalidServiceId);
        return;
    }
    if (req.path_mtu < IBV_MTU_256 || req.path_mtu > IBV_MTU_4096) {
        refuse(RejectReason::kInvalidMtu);  // rdma_accept could not use it
        return;
    }
    if (!room_for_request(*listener)) {
        // Not refused: the peer sends its REQ again, and by then the program
        // may have taken a request (cm.c resets to idle "to allow future
        // retries").
        log_info("rdma_cm: a connection request to %s waits: its listener's backlog is full",
                 to_string(listener->src).c_str());
        return;
    }
    Id& id = requested_id(*listener, to, *header);
    const InCase tagged(case_of(id));
    coverage::cm_message_delivered(static_cast<uint32_t>(Attribute::kReq));
    id.has_cm = true;
    set_cm(id, CmState::kReqRcvd);
    ids_.assign_comm_id(id);
    id.transaction_id |= id.local_comm_id;
    id.remote_comm_id = req.local_comm_id;
    id.remote_ca_guid = req.local_ca_guid;
    id.peer_ip = src_ip;
    ids_.index_peer(id);
    id.remote_qpn = req.local_qpn;
    id.sq_psn = req.starting_psn;
    id.path_mtu = std::min<uint8_t>(req.path_mtu, path_mtu_of(to));
    id.responder_resources = req.initiator_depth;
    id.initiator_depth = req.responder_resources;
    id.retry_count = req.retry_count;
    id.rnr_retry_count = req.rnr_retry_count;
    id.tos = req.primary.traffic_class;

    if (!queue_event(*listener->channel, connect_request(*listener, id, req))) {
        abandon_connection(id);
        erase(id);
        return;
    }
    --listener->backlog;
    // rdma_cm's MRA waits (IB_CM_MRA_FLAG_DELAY): it goes only in answer to
    // the REQ sent again while the program still decides.
    set_cm(id, CmState::kMraReqSent);
}

void ConnectionManager::on_sidr_req(Device& to, const wire::IpAddress& src_ip, uint8_t at,
                                    uint64_t tid, const SidrReq& req) {
    if (ids_.sidr_request(&to, src_ip, req.request_id)) {
        return;  // the program has not answered the first one yet
    }
    auto refuse = [&](SidrStatus status) {
        SidrRep rep;
        rep.request_id = req.request_id;
        rep.status = status;
        rep.service_id = req.service_id;
        send_reply(to, at, src_ip, tid, rep);
    };
    const auto header = decode_ip_cm_header(req.private_data);
    const PortSpace ps = port_space_of(req.service_id);
    if (!header || !to.gid_table().index_of(header->dst_ip)) {
        refuse(SidrStatus::kUnsupported);
        return;
    }
    Id* listener =
        find_listener(to, static_cast<uint16_t>(ps), cm::port_of(req.service_id), header->dst_ip);
    if (!listener || listener->qp_type != IBV_QPT_UD) {
        refuse(SidrStatus::kUnsupported);
        return;
    }
    if (!room_for_request(*listener)) {
        refuse(SidrStatus::kReject);
        return;
    }
    Id& id = requested_id(*listener, to, *header);
    const InCase tagged(case_of(id));
    coverage::cm_message_delivered(static_cast<uint32_t>(Attribute::kSidrReq));
    set_cm(id, CmState::kSidrReqRcvd);
    id.remote_comm_id = req.request_id;
    id.peer_ip = src_ip;
    ids_.index_sidr_request(id);
    id.transaction_id = tid;
    id.path_mtu = path_mtu_of(to);

    Channel::Event event{listener->handle, id.handle, {}};
    event.resp.uid = listener->uid;
    event.resp.id = id.handle;
    event.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    rdma_ucm_ud_param& ud = event.resp.param.ud;
    const auto user = std::span(req.private_data).subspan(kUserPrivateOffset);
    memcpy(ud.private_data, user.data(), user.size());
    ud.private_data_len = static_cast<uint8_t>(user.size());
    if (!queue_event(*listener->channel, event)) {
        erase(id);
        refuse(SidrStatus::kReject);
        return;
    }
    --listener->backlog;
}

void ConnectionManager::fill_ud_param(const Id& id, rdma_ucm_ud_param& ud) const {
    const Gid& dgid = id.peer_ip.bytes();
    memcpy(ud.ah_attr.grh.dgid, dgid.data(), sizeof(ud.ah_attr.grh.dgid));
    ud.ah_attr.grh.sgid_index = shown_source_gid(id);
    ud.ah_attr.grh.hop_limit = kHopLimit;
    ud.ah_attr.grh.traffic_class = id.tos;
    ud.ah_attr.is_global = 1;
    ud.ah_attr.port_num = 1;
}

void ConnectionManager::on_rep(Id& id, const Rep& rep) {
    if (id.cm == CmState::kEstablished) {
        // Our RTU was lost: say it again.
        Rtu rtu;
        rtu.local_comm_id = id.local_comm_id;
        rtu.remote_comm_id = id.remote_comm_id;
        send(id, rtu, false);
        return;
    }
    if (id.cm == CmState::kMraRepSent) {
        // The REP again while the program has not accepted: ask for time.
        send_mra(id, Answered::kRep);
        return;
    }
    if (id.cm != CmState::kReqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    id.remote_comm_id = rep.local_comm_id;
    id.remote_ca_guid = rep.local_ca_guid;
    ids_.index_peer(id);
    id.remote_qpn = rep.local_qpn;
    id.sq_psn = rep.starting_psn;
    id.initiator_depth = rep.responder_resources;
    id.responder_resources = rep.initiator_depth;
    id.rnr_retry_count = rep.rnr_retry_count;
    stop_retransmitting(id);
    // The program answers with ACCEPT; an MRA goes only if the REP comes again.
    set_cm(id, CmState::kMraRepSent);
    report(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, [&](rdma_ucm_event_resp& resp) {
        rdma_ucm_conn_param& conn = resp.param.conn;
        copy_conn_private(conn, rep.private_data);
        conn.responder_resources = rep.initiator_depth;
        conn.initiator_depth = rep.responder_resources;
        conn.flow_control = rep.end_to_end_flow_control;
        conn.rnr_retry_count = rep.rnr_retry_count;
        conn.srq = rep.srq;
        conn.qp_num = rep.local_qpn;
    });
}

void ConnectionManager::on_rtu(Id& id) {
    if (id.cm != CmState::kRepSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    stop_retransmitting(id);
    set_cm(id, CmState::kEstablished);
    report(id, RDMA_CM_EVENT_ESTABLISHED);
}

// cm_rej_handler: a REJ ends the connection in any state but the quiet
// ones; a stale connection, or one that got as far as a REP, goes through
// timewait.
void ConnectionManager::on_rej(Id& id, const Rej& rej) {
    switch (id.cm) {
        case CmState::kReqSent:
        case CmState::kRepSent:
        case CmState::kReqRcvd:
        case CmState::kMraReqSent:
            stop_retransmitting(id);
            if (rej.reason == RejectReason::kStaleConnection) {
                enter_timewait(id);
            } else {
                set_cm(id, CmState::kIdle);
                id.has_cm = false;
            }
            break;
        case CmState::kDreqSent:
        case CmState::kRepRcvd:
        case CmState::kMraRepSent:
        case CmState::kEstablished:
            enter_timewait(id);
            break;
        default:
            ++id.device->stats().cm_mads_dropped;
            return;
    }
    report(
        id, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(rej.reason),
        [&](rdma_ucm_event_resp& resp) { copy_conn_private(resp.param.conn, rej.private_data); });
}

void ConnectionManager::on_mra(Id& id, const Mra& mra) {
    const bool ours = (id.cm == CmState::kReqSent && mra.message_mraed == Answered::kReq) ||
                      (id.cm == CmState::kRepSent && mra.message_mraed == Answered::kRep);
    if (!ours || !id.pending_mad) {
        return;  // an MRA for what we no longer wait on
    }
    // The peer asks for time: wait that long before sending again.
    id.retry_interval = iba_time(mra.service_timeout) + iba_time(kAckTimeout);
    arm_retry(id);
}

void ConnectionManager::on_dreq(Id& id, const Dreq& dreq) {
    if (dreq.remote_qpn_eecn != id.qp_num) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    Drep drep;
    drep.local_comm_id = id.local_comm_id;
    drep.remote_comm_id = id.remote_comm_id;
    switch (id.cm) {
        case CmState::kEstablished:
        case CmState::kRepSent:
        case CmState::kDreqSent:
            // cm_dreq_handler; both sides disconnecting at once included: the
            // DREP goes when this side's program disconnects or goes.
            stop_retransmitting(id);
            set_cm(id, CmState::kDreqRcvd);
            set_state(id, IdState::kDisconnect);
            report(id, RDMA_CM_EVENT_DISCONNECTED);
            break;
        case CmState::kTimewait:
            send_reply(*id.device, source_gid(id), id.peer_ip, id.transaction_id,
                       drep);  // ours was lost
            break;
        default:
            ++id.device->stats().cm_mads_dropped;
            break;
    }
}

void ConnectionManager::on_drep(Id& id) {
    if (id.cm != CmState::kDreqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    set_state(id, IdState::kDisconnect);
    report(id, RDMA_CM_EVENT_DISCONNECTED);
    enter_timewait(id);
}

void ConnectionManager::on_sidr_rep(Id& id, const SidrRep& rep) {
    if (id.cm != CmState::kSidrReqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    stop_retransmitting(id);
    set_cm(id, CmState::kIdle);
    if (rep.status != SidrStatus::kSuccess) {
        report(id, RDMA_CM_EVENT_UNREACHABLE, static_cast<int32_t>(rep.status),
               [&](rdma_ucm_event_resp& resp) {
                   memcpy(resp.param.ud.private_data, rep.private_data.data(),
                          rep.private_data.size());
                   resp.param.ud.private_data_len = rep.private_data.size();
               });
        return;
    }
    id.remote_qpn = rep.qpn;
    id.qkey = rep.qkey;
    report(id, RDMA_CM_EVENT_ESTABLISHED, 0, [&](rdma_ucm_event_resp& resp) {
        rdma_ucm_ud_param& ud = resp.param.ud;
        fill_ud_param(id, ud);
        ud.qp_num = rep.qpn;
        ud.qkey = rep.qkey;
        memcpy(ud.private_data, rep.private_data.data(), rep.private_data.size());
        ud.private_data_len = rep.private_data.size();
    });
}

}  // namespace uroce::cm
