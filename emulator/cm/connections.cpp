// Connections as the rdma_cm verbs drive them: listen, connect, accept,
// reject, disconnect, notify, and the QP attributes INIT_QP_ATTR gives.
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "cm/connection_manager.h"
#include "cm/internal.h"
#include "util/log.h"
#include "wire/byte_order.h"
#include "wire/headers.h"

namespace uroce::cm {

using namespace internal;

// ---- connections -----------------------------------------------------------

Result ConnectionManager::listen(Id& id, uint32_t backlog) {
    if (id.state == IdState::kIdle) {
        Address any{};
        any.ss_family = AF_INET;
        if (Result r = bind(id, any); !r) {
            return r;
        }
    }
    if (id.state != IdState::kAddrBound) {
        return fail(EINVAL, "LISTEN on an ID in state %s", name(id.state));
    }
    if (id.reuseaddr) {
        // Sharing a port to bind is not sharing it to listen.
        for (uint32_t handle : ports_[{id.bound_ps, port_of(id.src)}]) {
            const Id& other = *ids_.find(handle);
            if (&other != &id && conflicts(id, other, true)) {
                return fail(is_any(id.src) || is_any(other.src) ? EADDRNOTAVAIL : EADDRINUSE,
                            "%s is taken by rdma_cm ID %u", to_string(id.src).c_str(),
                            other.handle);
            }
        }
    }
    // A listener's port is its own from now on (rdma_listen clears reuseaddr).
    id.reuseaddr = false;
    id.backlog = backlog;
    set_state(id, IdState::kListen);
    ids_.index_listener(id);
    return ok();
}

Result ConnectionManager::connect(Id& id, const ConnParam& param) {
    if (id.state != IdState::kRouteResolved) {
        return fail(EINVAL, "CONNECT on an ID in state %s", name(id.state));
    }
    const wire::IpAddress src_ip = ip_or_any(id.src);
    IpCmHeader header;
    header.src_port = port_of(id.src);
    header.src_ip = src_ip;
    header.dst_ip = id.peer_ip;
    const auto ip_header = encode_ip_cm_header(header);
    const uint64_t service = service_id(port_space(id.ps), port_of(id.dst));
    ids_.assign_comm_id(id);
    id.transaction_id = (id.transaction_id & ~0xffffffffull) | id.local_comm_id;
    if (is_ud(id)) {
        if (param.private_data.size() > SidrReq{}.private_data.size() - kUserPrivateOffset) {
            return fail(EINVAL, "UD CONNECT private data of %zu bytes (at most %zu)",
                        param.private_data.size(),
                        SidrReq{}.private_data.size() - kUserPrivateOffset);
        }
        SidrReq req;
        req.request_id = id.local_comm_id;
        req.pkey = kDefaultPkey;
        req.service_id = service;
        req.private_data = private_data<216>(param.private_data, kUserPrivateOffset);
        std::copy(ip_header.begin(), ip_header.end(), req.private_data.begin());
        set_cm(id, CmState::kSidrReqSent);
        set_state(id, IdState::kConnect);
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, req, true);
        return ok();
    }
    if (param.private_data.size() > Req{}.private_data.size() - kUserPrivateOffset) {
        return fail(EINVAL, "CONNECT private data of %zu bytes (at most %zu)",
                    param.private_data.size(), Req{}.private_data.size() - kUserPrivateOffset);
    }
    id.qp_num = param.qp_num & wire::kQpnMask;
    id.responder_resources = param.responder_resources;
    id.initiator_depth = param.initiator_depth;
    id.retry_count = std::min<uint8_t>(param.retry_count, 7);
    id.rnr_retry_count = std::min<uint8_t>(param.rnr_retry_count, 7);
    Req req;
    req.local_comm_id = id.local_comm_id;
    req.service_id = service;
    req.local_ca_guid = id.device->node_guid();
    req.local_qpn = id.qp_num;
    req.responder_resources = id.responder_resources;
    req.initiator_depth = id.initiator_depth;
    req.remote_cm_response_timeout = kCmResponseTimeout;
    req.transport_service =
        id.qp_type == IBV_QPT_UC ? TransportService::kUc : TransportService::kRc;
    req.end_to_end_flow_control = param.flow_control;
    req.starting_psn = id.seq_num;
    req.local_cm_response_timeout = kCmResponseTimeout;
    req.retry_count = id.retry_count;
    req.pkey = kDefaultPkey;
    req.path_mtu = id.path_mtu;
    req.rnr_retry_count = id.rnr_retry_count;
    req.max_cm_retries = kMaxCmRetries;
    req.srq = param.srq;
    req.primary.local_lid = 0xffff;  // permissive: RoCE routes by GID
    req.primary.remote_lid = 0xffff;
    req.primary.local_gid = src_ip.bytes();
    req.primary.remote_gid = id.peer_ip.bytes();
    req.primary.traffic_class = id.tos;
    req.primary.hop_limit = kHopLimit;
    req.primary.local_ack_timeout = kAckTimeout;
    req.private_data = private_data<92>(param.private_data, kUserPrivateOffset);
    std::copy(ip_header.begin(), ip_header.end(), req.private_data.begin());
    id.has_cm = true;
    set_cm(id, CmState::kReqSent);
    set_state(id, IdState::kConnect);
    // cm.c: twice the packet lifetime and the peer's CM response time.
    id.retry_interval = 2 * iba_time(kPacketLifeTime) + iba_time(kCmResponseTimeout);
    send(id, req, true);
    return ok();
}

Result ConnectionManager::accept(Id& id, uint64_t uid, const ConnParam* param) {
    if (id.state != IdState::kConnect) {
        return fail(EINVAL, "ACCEPT on an ID in state %s", name(id.state));
    }
    if (id.cm == CmState::kSidrReqRcvd) {
        if (!param) {
            return fail(EINVAL, "ACCEPT of a UD request needs connection parameters");
        }
        if (param->private_data.size() > SidrRep{}.private_data.size()) {
            return fail(EINVAL, "ACCEPT private data of %zu bytes (at most %zu)",
                        param->private_data.size(), SidrRep{}.private_data.size());
        }
        SidrRep rep;
        rep.request_id = id.remote_comm_id;
        rep.status = SidrStatus::kSuccess;
        rep.qpn = param->qp_num & wire::kQpnMask;
        rep.service_id = service_id(port_space(id.ps), port_of(id.src));
        rep.qkey = kUdpQkey;
        rep.private_data = private_data<136>(param->private_data);
        id.uid = uid;
        id.reporting = true;
        set_cm(id, CmState::kIdle);
        send(id, rep, false);
        return ok();
    }
    if (id.cm == CmState::kReqRcvd || id.cm == CmState::kMraReqSent) {
        if (!param) {
            return fail(EINVAL, "ACCEPT of a connection request needs connection parameters");
        }
        if (param->private_data.size() > Rep{}.private_data.size()) {
            return fail(EINVAL, "ACCEPT private data of %zu bytes (at most %zu)",
                        param->private_data.size(), Rep{}.private_data.size());
        }
        id.qp_num = param->qp_num & wire::kQpnMask;
        id.responder_resources = param->responder_resources;
        id.initiator_depth = param->initiator_depth;
        Rep rep;
        rep.local_comm_id = id.local_comm_id;
        rep.remote_comm_id = id.remote_comm_id;
        rep.local_qpn = id.qp_num;
        rep.starting_psn = id.seq_num;
        rep.responder_resources = id.responder_resources;
        rep.initiator_depth = id.initiator_depth;
        rep.end_to_end_flow_control = param->flow_control;
        // The REP tells the active side its RNR retries; this side keeps
        // the REQ's (ib_send_cm_rep).
        rep.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
        rep.srq = param->srq;
        rep.local_ca_guid = id.device->node_guid();
        rep.private_data = private_data<196>(param->private_data);
        id.uid = uid;
        id.reporting = true;
        set_cm(id, CmState::kRepSent);
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, rep, true);
        return ok();
    }
    if (id.cm == CmState::kRepRcvd || id.cm == CmState::kMraRepSent) {
        // The active side's ACCEPT after CONNECT_RESPONSE: the RTU.
        Rtu rtu;
        rtu.local_comm_id = id.local_comm_id;
        rtu.remote_comm_id = id.remote_comm_id;
        set_cm(id, CmState::kEstablished);
        send(id, rtu, false);
        return ok();
    }
    return fail(EINVAL, "ACCEPT while the connection is %s", name(id.cm));
}

Result ConnectionManager::reject(Id& id, std::span<const uint8_t> data, uint8_t reason) {
    const RejectReason why =
        reason ? static_cast<RejectReason>(reason) : RejectReason::kConsumerDefined;
    if (why != RejectReason::kConsumerDefined && why != RejectReason::kVendorOptionNotSupported) {
        return fail(EINVAL, "REJECT reason %u: a program may give 28 or 35", reason);
    }
    if (id.cm == CmState::kSidrReqRcvd) {
        if (data.size() > SidrRep{}.private_data.size()) {
            return fail(EINVAL, "REJECT private data of %zu bytes (at most %zu)", data.size(),
                        SidrRep{}.private_data.size());
        }
        SidrRep rep;
        rep.request_id = id.remote_comm_id;
        rep.status = SidrStatus::kReject;
        rep.service_id = service_id(port_space(id.ps), port_of(id.src));
        rep.private_data = private_data<136>(data);
        set_cm(id, CmState::kIdle);
        send(id, rep, false);
        return ok();
    }
    const bool answering = id.cm == CmState::kReqRcvd || id.cm == CmState::kMraReqSent ||
                           id.cm == CmState::kRepRcvd || id.cm == CmState::kMraRepSent;
    if (!answering) {
        return fail(EINVAL, "REJECT while the connection is %s", name(id.cm));
    }
    if (data.size() > Rej{}.private_data.size()) {
        return fail(EINVAL, "REJECT private data of %zu bytes (at most %zu)", data.size(),
                    Rej{}.private_data.size());
    }
    Rej rej = rej_of(id, why);
    rej.private_data = private_data<148>(data);
    set_cm(id, CmState::kIdle);
    id.has_cm = false;
    send(id, rej, false);
    return ok();
}

Result ConnectionManager::disconnect(Id& id) {
    if (!id.has_cm) {
        return fail(EINVAL, "DISCONNECT on an ID without a connection");
    }
    if (id.cm == CmState::kEstablished) {
        Dreq dreq;
        dreq.local_comm_id = id.local_comm_id;
        dreq.remote_comm_id = id.remote_comm_id;
        dreq.remote_qpn_eecn = id.remote_qpn;
        set_cm(id, CmState::kDreqSent);
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, dreq, true);
    } else if (id.cm == CmState::kDreqRcvd) {
        Drep drep;
        drep.local_comm_id = id.local_comm_id;
        drep.remote_comm_id = id.remote_comm_id;
        send(id, drep, false);
        enter_timewait(id);
    }
    // Anything else: neither a DREQ nor a DREP may go; rdma_disconnect still succeeds.
    return ok();
}

Result ConnectionManager::notify(Id& id, uint32_t event) {
    if (!id.has_cm) {
        return fail(EINVAL, "NOTIFY on an ID without a connection");
    }
    if (event == IBV_EVENT_COMM_EST) {
        if (id.cm == CmState::kEstablished) {
            return fail(EISCONN, "the connection is established already");
        }
        if (id.cm != CmState::kRepSent) {
            return fail(EINVAL, "COMM_EST while the connection is %s", name(id.cm));
        }
        on_rtu(id);  // the first packet on the QP stands for the RTU
        return ok();
    }
    if (event == IBV_EVENT_PATH_MIG) {
        return ok();
    }
    return fail(EINVAL, "NOTIFY of event %u", event);
}

Result ConnectionManager::resolve_ib_service(Id& id) {
    if (id.state != IdState::kAddrBound || !id.device) {
        return fail(EINVAL, "RESOLVE_IB_SERVICE on an ID in state %s: it must be bound to a device",
                    name(id.state));
    }
    return fail(EOPNOTSUPP, "RESOLVE_IB_SERVICE: RoCE has no subnet administrator to ask");
}

Result ConnectionManager::write_event(Id& id, uint32_t event, uint32_t status, uint64_t arg) {
    Channel::Event entry = event_of(id, event, status);
    memcpy(&entry.resp.param, &arg, sizeof(arg));  // param.arg32[2] in newer headers
    if (!queue_event(*id.channel, entry)) {
        return fail(ENOMEM, "WRITE_CM_EVENT: the channel holds %zu events nobody took",
                    id.channel->events.size());
    }
    return ok();
}

// ---- INIT_QP_ATTR ------------------------------------------------------------

namespace {

// cma_ib_init_qp_attr: what INIT needs, whatever the state asked, for a UD
// ID or one without a connection.
void init_attr_without_cm(const Id& id, ib_uverbs_qp_attr& attr) {
    attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    attr.pkey_index = 0;
    attr.port_num = 1;
    if (is_ud(id)) {
        attr.qkey = id.qkey ? id.qkey : kUdpQkey;
        attr.qp_attr_mask |= IBV_QP_QKEY;
    } else {
        attr.qp_access_flags = 0;
        attr.qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
    }
}

// What a connection's QP needs for each state, once its REQ and REP gave
// the values (cm_init_qp_init_attr, _rtr_attr, _rts_attr).
Result connected_qp_attr(const Id& id, uint32_t qp_state, ib_uverbs_qp_attr& attr) {
    const bool answered = id.cm != CmState::kIdle && id.cm != CmState::kReqSent &&
                          id.cm != CmState::kDreqSent && id.cm != CmState::kDreqRcvd &&
                          id.cm != CmState::kTimewait;
    switch (qp_state) {
        case IBV_QPS_INIT:
            if (id.cm == CmState::kIdle || id.cm == CmState::kTimewait) {
                return fail(EINVAL, "INIT_QP_ATTR(INIT) while the connection is %s", name(id.cm));
            }
            attr.qp_attr_mask =
                IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
            if (id.responder_resources) {
                attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
            }
            attr.pkey_index = 0;
            attr.port_num = 1;
            return ok();
        case IBV_QPS_RTR: {
            if (!answered) {
                return fail(EINVAL, "INIT_QP_ATTR(RTR) while the connection is %s", name(id.cm));
            }
            attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            const Gid& dgid = id.peer_ip.bytes();
            memcpy(attr.ah_attr.grh.dgid, dgid.data(), sizeof(attr.ah_attr.grh.dgid));
            attr.ah_attr.grh.sgid_index = shown_source_gid(id);
            attr.ah_attr.grh.hop_limit = kHopLimit;
            attr.ah_attr.grh.traffic_class = id.tos;
            attr.ah_attr.is_global = 1;
            attr.ah_attr.port_num = 1;
            attr.path_mtu = id.path_mtu;
            attr.dest_qp_num = id.remote_qpn;
            attr.max_dest_rd_atomic = id.responder_resources;
            attr.min_rnr_timer = 0;
            return ok();
        }
        case IBV_QPS_RTS:
            if (!answered) {
                return fail(EINVAL, "INIT_QP_ATTR(RTS) while the connection is %s", name(id.cm));
            }
            attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT;
            attr.sq_psn = id.sq_psn;
            attr.retry_cnt = id.retry_count;
            attr.rnr_retry = id.rnr_retry_count;
            attr.max_rd_atomic = id.initiator_depth;
            attr.timeout = kAckTimeout;
            return ok();
        default:
            return fail(EINVAL, "INIT_QP_ATTR for QP state %u of a connection", qp_state);
    }
}

}  // namespace

Result ConnectionManager::init_qp_attr(Id& id, uint32_t qp_state, ib_uverbs_qp_attr& attr) {
    if (!id.device) {
        return fail(EINVAL, "INIT_QP_ATTR on an ID with no device yet");
    }
    attr.qp_state = qp_state;
    if (!id.has_cm || is_ud(id)) {
        init_attr_without_cm(id, attr);
    } else if (Result r = connected_qp_attr(id, qp_state, attr); !r) {
        return r;
    }
    if (qp_state == IBV_QPS_RTR) {
        attr.rq_psn = id.seq_num;  // rdma_init_qp_attr: this side's own starting PSN
    }
    if ((attr.qp_attr_mask & IBV_QP_TIMEOUT) && id.ack_timeout) {
        attr.timeout = *id.ack_timeout;
    }
    return ok();
}

}  // namespace uroce::cm
