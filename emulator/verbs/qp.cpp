// Queue pairs: creation with capability rounding, the modify state machine
// (rules in qp/), query, destroy, and multicast attachment.
#include <linux/capability.h>
#include <string.h>

#include <algorithm>
#include <bit>

#include "protocol/work_requests.h"
#include "qp/qp_attr_check.h"
#include "qp/qp_transitions.h"
#include "transport/transport.h"
#include "util/capabilities.h"
#include "util/coverage.h"
#include "verbs/context.h"
#include "wire/headers.h"
#include "wire/ip_address.h"

namespace uroce {
namespace {

// Toeplitz keys are 40 bytes, as mlx5 takes them.
constexpr uint32_t kToeplitzKeyLen = 40;

constexpr uint32_t kMaxInlineData = 512;
constexpr uint32_t kKnownQpComp = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                  IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                                  IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                                  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
constexpr int kAllQpAttrs = (IBV_QP_DEST_QPN << 1) - 1;
constexpr size_t kSgeSize = 16;  // struct ibv_sge: inline data shares its room

uint32_t round_wr(uint32_t requested, uint32_t max) {
    return requested == 0 ? 0 : std::min<uint32_t>(std::bit_ceil(requested + 1) - 1, max);
}

// Copies the attributes selected by `mask` from `in` into `qp`, all but the
// state, which Qp::move_to changes.
void apply_qp_attr(ibv_qp_attr& qp, const ibv_qp_attr& in, int mask) {
    if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
        qp.en_sqd_async_notify = in.en_sqd_async_notify;
    if (mask & IBV_QP_ACCESS_FLAGS)
        qp.qp_access_flags = in.qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX)
        qp.pkey_index = in.pkey_index;
    if (mask & IBV_QP_PORT)
        qp.port_num = in.port_num;
    if (mask & IBV_QP_QKEY)
        qp.qkey = in.qkey;
    if (mask & IBV_QP_AV)
        qp.ah_attr = in.ah_attr;
    if (mask & IBV_QP_PATH_MTU)
        qp.path_mtu = in.path_mtu;
    if (mask & IBV_QP_TIMEOUT)
        qp.timeout = in.timeout;
    if (mask & IBV_QP_RETRY_CNT)
        qp.retry_cnt = in.retry_cnt;
    if (mask & IBV_QP_RNR_RETRY)
        qp.rnr_retry = in.rnr_retry;
    if (mask & IBV_QP_RQ_PSN)
        qp.rq_psn = in.rq_psn;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
        qp.max_rd_atomic = in.max_rd_atomic;
    if (mask & IBV_QP_ALT_PATH) {
        qp.alt_ah_attr = in.alt_ah_attr;
        qp.alt_pkey_index = in.alt_pkey_index;
        qp.alt_port_num = in.alt_port_num;
        qp.alt_timeout = in.alt_timeout;
    }
    if (mask & IBV_QP_MIN_RNR_TIMER)
        qp.min_rnr_timer = in.min_rnr_timer;
    if (mask & IBV_QP_SQ_PSN)
        qp.sq_psn = in.sq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        qp.max_dest_rd_atomic = in.max_dest_rd_atomic;
    if (mask & IBV_QP_PATH_MIG_STATE)
        qp.path_mig_state = in.path_mig_state;
    if (mask & IBV_QP_DEST_QPN)
        qp.dest_qp_num = in.dest_qp_num;
}

}  // namespace

Result Context::check_qp_caps(const rpc::CreateQpRequest& req, ibv_qp_cap& cap) const {
    const ibv_device_attr& caps = device_.attr().orig_attr;
    const ibv_qp_cap& in = req.cap;
    const uint32_t max_wr = static_cast<uint32_t>(caps.max_qp_wr);
    const uint32_t max_sge = static_cast<uint32_t>(caps.max_sge);
    // With an SRQ or WQs the receive caps are ignored (ibv_create_qp(3)).
    const bool own_rq = !req.srq && !req.rwq_ind_tbl;
    if (in.max_send_wr > max_wr || (own_rq && in.max_recv_wr > max_wr)) {
        return fail(EINVAL, "max_send_wr %u / max_recv_wr %u above the device's %u", in.max_send_wr,
                    in.max_recv_wr, max_wr);
    }
    if (in.max_send_sge > max_sge || (own_rq && in.max_recv_sge > max_sge)) {
        return fail(EINVAL, "max_send_sge %u / max_recv_sge %u above the device's %u",
                    in.max_send_sge, in.max_recv_sge, max_sge);
    }
    if (in.max_inline_data > kMaxInlineData) {
        return fail(EINVAL, "max_inline_data %u above the device's %u", in.max_inline_data,
                    kMaxInlineData);
    }
    cap.max_send_wr = round_wr(in.max_send_wr, max_wr);
    cap.max_send_sge = std::max<uint32_t>(in.max_send_sge, cap.max_send_wr ? 1 : 0);
    // Inline data is carried where the gather list would be.
    cap.max_inline_data =
        cap.max_send_wr ? std::max<uint32_t>(in.max_inline_data, cap.max_send_sge * kSgeSize) : 0;
    if (!own_rq) {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    } else {
        cap.max_recv_wr = round_wr(in.max_recv_wr, max_wr);
        cap.max_recv_sge = std::max<uint32_t>(in.max_recv_sge, cap.max_recv_wr ? 1 : 0);
    }
    return ok();
}

// An RSS QP (ibv_create_qp_ex with rx_hash_conf): a RAW_PACKET QP with no
// queues of its own that spreads the frames steered to it over the WQs of an
// indirection table by the Toeplitz hash of the fields chosen, as mlx5.
Result Context::create_rss_qp(const rpc::CreateQpRequest& req, rpc::CreateQpReply& reply) {
    const ibv_rss_caps& caps = device_.attr().rss_caps;
    constexpr uint32_t kBoth = IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
    if ((req.comp_mask & kBoth) != kBoth) {
        return fail(EINVAL, "an RSS QP needs both rx_hash_conf and an indirection table");
    }
    if (req.qp_type != IBV_QPT_RAW_PACKET) {
        return fail(EINVAL, "an RSS QP is a RAW_PACKET QP, not %s",
                    qp_type_name(static_cast<ibv_qp_type>(req.qp_type)));
    }
    auto table = ind_tables_.find(req.rwq_ind_tbl);
    if (!table) {
        return fail(EINVAL, "no indirection table with handle %u", req.rwq_ind_tbl);
    }
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    if (req.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ) {
        return fail(EOPNOTSUPP, "hash function %u is not supported (only Toeplitz)",
                    req.rx_hash_function);
    }
    if (req.rx_hash_key_len != kToeplitzKeyLen) {
        return fail(EINVAL, "a Toeplitz key of %u bytes: it takes %u", req.rx_hash_key_len,
                    kToeplitzKeyLen);
    }
    if (req.rx_hash_fields_mask & ~caps.rx_hash_fields_mask) {
        return fail(
            EOPNOTSUPP, "hash fields 0x%llx are not supported",
            static_cast<unsigned long long>(req.rx_hash_fields_mask & ~caps.rx_hash_fields_mask));
    }
    auto qp = std::make_shared<Qp>();
    qp->type = IBV_QPT_RAW_PACKET;
    qp->pd = Ref<Pd>(pd);
    qp->ind_table = Ref<RwqIndTable>(table);
    qp->rss_key.assign(req.rx_hash_key, req.rx_hash_key + req.rx_hash_key_len);
    qp->rss_fields = req.rx_hash_fields_mask;
    if (Result r = add_qp(qp, req.user_handle, nullptr); !r) {
        return r;
    }
    reply = {qp->handle, qp->qpn, qp->doorbell_slot, {}, {}, {}};
    return ok();
}

// Gives a QP that create_qp or create_rss_qp built its number and handle,
// with the creator as its first holder, within the device's max_qp.
Result Context::add_qp(const std::shared_ptr<Qp>& qp, uint64_t user_handle,
                       const std::shared_ptr<Xrcd>& xrcd) {
    if (Result r = device_.admit(owner_, ObjectKind::kQp); !r) {
        return r;
    }
    qp->owner_case = case_;
    if (Doorbell* doorbell = device_.doorbell()) {
        const auto slot = doorbell->attach(*qp, device_, device_.engine());
        if (!slot) {
            return fail(ENOMEM, "the daemon's engine for %s has its maximum of %u QPs",
                        device_.name().c_str(), doorbell->slots_per_engine());
        }
        qp->doorbell_slot = *slot;
    }
    const auto qpn = device_.qps().add(qp.get());
    if (!qpn) {
        detach_doorbell(*qp);
        return fail(ENOMEM, "no QP numbers left");
    }
    qp->qpn = *qpn;
    qps_.add(qp);
    qp->holders.push_back({events_, qp->handle, user_handle, Ref<Xrcd>(xrcd)});
    device_.count(owner_, ObjectKind::kQp, 1);
    return ok();
}

// What ibv_create_qp_ex asks for that uroce does not offer or the caller
// may not have, before any object is looked at (rxe_qp_chk_init's first
// half).
Result Context::check_qp_init(const rpc::CreateQpRequest& req) const {
    const auto type = static_cast<ibv_qp_type>(req.qp_type);
    switch (type) {
        case IBV_QPT_RC:
        case IBV_QPT_UC:
        case IBV_QPT_UD:
        case IBV_QPT_RAW_PACKET:
        case IBV_QPT_XRC_SEND:
        case IBV_QPT_XRC_RECV:
            break;
        default:
            return fail(EOPNOTSUPP, "QP type %d is not supported", req.qp_type);
    }
    if (req.comp_mask & ~kKnownQpComp) {
        return fail(EINVAL, "unknown QP comp_mask bits 0x%x", req.comp_mask & ~kKnownQpComp);
    }
    if (req.comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) {
        return fail(EOPNOTSUPP, "TSO is not supported");
    }
    for (uint64_t ops = req.send_ops_flags; ops; ops &= ops - 1) {
        const uint64_t flag = ops & -ops;
        const wr::OpcodeInfo* info = wr::opcode_of_send_ops_flag(flag);
        if (!info || !wr::allowed(type, info->opcode)) {
            return fail(EOPNOTSUPP, "send_ops_flags bit 0x%llx is not supported on %s QPs",
                        static_cast<unsigned long long>(flag), qp_type_name(type));
        }
    }
    if (req.create_flags) {
        return fail(EOPNOTSUPP, "QP create_flags 0x%x are not supported", req.create_flags);
    }
    // The kernel's ib_uverbs_create_qp: raw Ethernet is for CAP_NET_RAW only.
    if (type == IBV_QPT_RAW_PACKET && !has_capability(pid_, CAP_NET_RAW)) {
        return fail(EPERM, "only a process with CAP_NET_RAW creates RAW_PACKET QPs");
    }
    return ok();
}

// The objects a new QP names, each of the caller's and fit for the QP's
// type (rxe_qp_chk_init's second half).
Result Context::find_qp_objects(const rpc::CreateQpRequest& req, QpObjects& found) const {
    const auto type = static_cast<ibv_qp_type>(req.qp_type);
    if (type == IBV_QPT_XRC_RECV) {
        found.xrcd = xrcds_.find(req.xrcd);
        if (!found.xrcd) {
            return fail(EINVAL, "an XRC_TGT QP needs a valid XRC domain (handle %u)", req.xrcd);
        }
    } else if (!(found.pd = pds_.find(req.pd))) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    if (type != IBV_QPT_XRC_RECV && !(found.send_cq = cqs_.find(req.send_cq))) {
        return fail(EINVAL, "send CQ handle %u is not a CQ", req.send_cq);
    }
    if (type != IBV_QPT_XRC_RECV && type != IBV_QPT_XRC_SEND &&
        !(found.recv_cq = cqs_.find(req.recv_cq))) {
        return fail(EINVAL, "receive CQ handle %u is not a CQ", req.recv_cq);
    }
    if (!req.srq) {
        return ok();
    }
    if (type != IBV_QPT_RC && type != IBV_QPT_UD && type != IBV_QPT_XRC_RECV) {
        return fail(EINVAL, "%s QPs cannot use an SRQ (only RC, UD and XRC_TGT)",
                    qp_type_name(type));
    }
    found.srq = srqs_.find(req.srq);
    if (!found.srq) {
        return fail(EINVAL, "no SRQ with handle %u", req.srq);
    }
    if (found.srq->type != IBV_SRQT_BASIC && type != IBV_QPT_XRC_RECV) {
        return fail(EINVAL, "an XRC SRQ cannot serve a %s QP", qp_type_name(type));
    }
    return ok();
}

// The QP itself, in RESET, with the rings its queues need (rxe_qp_from_init).
Result Context::build_qp(const rpc::CreateQpRequest& req, const QpObjects& objects,
                         const ibv_qp_cap& cap, Qp& qp) {
    const auto type = static_cast<ibv_qp_type>(req.qp_type);
    if (type != IBV_QPT_XRC_RECV) {
        if (Result r = Ring::create(
                device_.name() + "-sq", std::bit_ceil(std::max(cap.max_send_wr, 1u)),
                queues::send_wqe_size(cap.max_send_sge, cap.max_inline_data), 0, qp.send_queue);
            !r) {
            return r;
        }
    }
    if (!objects.srq && type != IBV_QPT_XRC_RECV && type != IBV_QPT_XRC_SEND) {
        if (Result r =
                Ring::create(device_.name() + "-rq", std::bit_ceil(std::max(cap.max_recv_wr, 1u)),
                             queues::recv_wqe_size(cap.max_recv_sge), 0, qp.recv_queue);
            !r) {
            return r;
        }
    }
    qp.type = type;
    qp.sq_sig_all = req.sq_sig_all != 0;
    qp.cap = cap;
    qp.attr.qp_state = IBV_QPS_RESET;
    qp.attr.cur_qp_state = IBV_QPS_RESET;
    qp.attr.cap = cap;
    qp.pd = Ref<Pd>(objects.pd);
    qp.send_cq = Ref<Cq>(objects.send_cq);
    qp.recv_cq = Ref<Cq>(objects.recv_cq);
    qp.srq = Ref<Srq>(objects.srq);
    qp.xrc_domain = objects.xrcd ? objects.xrcd->domain : nullptr;
    qp.ahs = type == IBV_QPT_UD ? &ahs_ : nullptr;
    return ok();
}

Result Context::create_qp(const rpc::CreateQpRequest& req, rpc::CreateQpReply& reply,
                          ReplyFds& fds) {
    if (Result r = check_qp_init(req); !r) {
        return r;
    }
    if ((req.comp_mask & IBV_QP_INIT_ATTR_RX_HASH) || req.rwq_ind_tbl) {
        return create_rss_qp(req, reply);
    }
    QpObjects objects;
    if (Result r = find_qp_objects(req, objects); !r) {
        return r;
    }
    ibv_qp_cap cap{};  // XRC_TGT has no queues of its own: receives go to XRC SRQs
    if (req.qp_type != IBV_QPT_XRC_RECV) {
        if (Result r = check_qp_caps(req, cap); !r) {
            return r;
        }
    }
    auto qp = std::make_shared<Qp>();
    if (Result r = build_qp(req, objects, cap, *qp); !r) {
        return r;
    }
    if (Result r = add_qp(qp, req.user_handle, objects.xrcd); !r) {
        return r;
    }
    reply = {qp->handle,
             qp->qpn,
             qp->doorbell_slot,
             cap,
             {qp->send_queue.entries(), qp->send_queue.entry_size()},
             {qp->recv_queue.entries(), qp->recv_queue.entry_size()}};
    for (Ring* ring : {&qp->send_queue, &qp->recv_queue}) {
        if (ring->entries()) {
            fds.push_back(ring->release_fd());
        }
    }
    return ok();
}

// Whether ibv_modify_qp may take `qp` from `cur` to `next` with these
// attributes, as the kernel decides; a refusal counts in the coverage map
// with its kind.
Result Context::check_modify_qp(const Qp& qp, const ibv_qp_attr& attr, int mask, ibv_qp_state cur,
                                ibv_qp_state next, uint8_t& sgid_slot) const {
    using coverage::QpOutcome;
    auto refuse = [&](QpOutcome outcome, Result why) {
        coverage::qp_transition(qp.type, cur, next, outcome);
        return why;
    };
    if (mask & ~(kAllQpAttrs | IBV_QP_RATE_LIMIT)) {
        return refuse(QpOutcome::kExtraAttribute,
                      fail(EINVAL, "unknown QP attribute mask bits 0x%x",
                           mask & ~(kAllQpAttrs | IBV_QP_RATE_LIMIT)));
    }
    const ibv_device_attr& caps = device_.attr().orig_attr;
    const QpAttrLimits limits{Device::kPortCount,
                              device_.port_attr().max_mtu,
                              device_.port_attr().pkey_tbl_len,
                              static_cast<uint32_t>(GidTable::kLength),
                              static_cast<uint32_t>(caps.max_qp_rd_atom),
                              static_cast<uint32_t>(caps.max_qp_init_rd_atom)};
    if (std::string why = check_qp_attr_values(attr, mask, qp.type, limits); !why.empty()) {
        return refuse(QpOutcome::kBadValue, fail(EINVAL, "%s", why.c_str()));
    }
    if (std::string why = check_qp_transition(cur, next, qp.type, mask); !why.empty()) {
        const QpTransitionRule rule = qp_transition_rule(cur, next, qp.type);
        return refuse(!rule.valid                    ? QpOutcome::kNotAllowed
                      : (rule.required & ~mask) != 0 ? QpOutcome::kMissingAttribute
                                                     : QpOutcome::kExtraAttribute,
                      fail(EINVAL, "%s", why.c_str()));
    }
    if (mask & IBV_QP_AV) {
        if (Result r = device_.check_source_gid(attr.ah_attr.grh.sgid_index, sgid_slot); !r) {
            return refuse(QpOutcome::kBadValue, r);
        }
    }
    // As the kernel core: automatic path migration exists only on InfiniBand.
    if (mask & IBV_QP_ALT_PATH) {
        return refuse(QpOutcome::kRefused,
                      fail(EINVAL, "alternate paths are not supported on RoCE ports"));
    }
    if (mask & IBV_QP_RATE_LIMIT) {
        return refuse(QpOutcome::kRefused, fail(EOPNOTSUPP, "QP rate limits are not supported"));
    }
    // A Q_Key with the high bit set is a controlled one (IBA 10.2.4.2): as
    // in the kernel's modify_qp, only a process with CAP_NET_RAW sets it.
    if ((mask & IBV_QP_QKEY) && (attr.qkey & wire::kControlledQkey) &&
        !has_capability(pid_, CAP_NET_RAW)) {
        return refuse(
            QpOutcome::kRefused,
            fail(EPERM, "Q_Key 0x%x has the high bit set: only CAP_NET_RAW may set it", attr.qkey));
    }
    return ok();
}

Result Context::modify_qp(const rpc::ModifyQpRequest& req, rpc::Empty&) {
    auto qp = qps_.find(req.handle);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.handle);
    }
    if (qp->ind_table) {
        return fail(EOPNOTSUPP, "RSS QP 0x%x has no state to change: its WQs have", qp->qpn);
    }
    const int mask = drop_ignored_qp_attrs(qp->type, req.attr_mask);
    // As in the kernel, an explicit cur_qp_state is what the transition is
    // checked from.
    const auto cur = (mask & IBV_QP_CUR_STATE) ? req.attr.cur_qp_state : qp->attr.qp_state;
    const auto next = (mask & IBV_QP_STATE) ? req.attr.qp_state : cur;
    uint8_t sgid_slot = 0;
    Result checked = check_modify_qp(*qp, req.attr, mask, cur, next, sgid_slot);
    if (!checked) {
        return checked;
    }
    const ibv_qp_state from = qp->attr.qp_state;
    apply_qp_attr(qp->attr, req.attr, mask);
    if (mask & IBV_QP_AV) {
        // The program names its source GID by the index it sees; the
        // transport keeps the table's slot.
        qp->attr.ah_attr.grh.sgid_index = sgid_slot;
    }
    // As on a RoCE NIC, a QP's packets fit its port's link: a larger path
    // MTU becomes the port's active MTU (ibv_query_qp reports it).
    if (mask & IBV_QP_PATH_MTU) {
        qp->attr.path_mtu = std::min(qp->attr.path_mtu, device_.port_attr().active_mtu);
    }
    qp->move_to(next, mask, "ibv_modify_qp");
    transport::prepare_transport(*qp, from, mask);
    // The engine looks at it on its next turn: it may have work to take up
    // (WQEs posted before RTS) or to flush (ERR).
    if (Doorbell* doorbell = device_.doorbell()) {
        doorbell->post(qp->doorbell_slot);
    }
    return ok();
}

Result Context::query_qp(const rpc::QueryQpRequest& req, rpc::QueryQpReply& reply) {
    auto qp = qps_.find(req.handle);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.handle);
    }
    reply.attr = qp->attr;
    reply.attr.ah_attr.grh.sgid_index = device_.shown_gid_index(qp->attr.ah_attr.grh.sgid_index);
    reply.attr.cur_qp_state = qp->attr.qp_state;
    reply.attr.cap = qp->cap;
    reply.attr.sq_draining = 0;  // nothing is ever left to drain in SQD
    reply.init_cap = qp->cap;
    reply.sq_sig_all = qp->sq_sig_all;
    return ok();
}

Result Context::destroy_qp(const rpc::HandleRequest& req, rpc::Empty&) {
    auto qp = qps_.find(req.handle);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.handle);
    }
    if (!qp->mcast_groups.empty()) {
        return fail(EBUSY, "QP %u is still attached to %zu multicast groups", qp->qpn,
                    qp->mcast_groups.size());
    }
    if (qp->users) {
        return fail(EBUSY, "QP 0x%x still has %d flow rules", qp->qpn, qp->users);
    }
    std::erase_if(qp->holders, [&](const QpHolder& holder) {
        return holder.events == events_ && holder.handle == req.handle;
    });
    qps_.erase(req.handle);
    if (!qp->holders.empty()) {
        return ok();  // an XRC_TGT QP that other handles still hold
    }
    device_.qps().remove(qp->qpn);
    detach_doorbell(*qp);
    device_.count(owner_, ObjectKind::kQp, -1);
    return ok();
}

void Context::detach_doorbell(Qp& qp) {
    if (Doorbell* doorbell = device_.doorbell()) {
        doorbell->detach(qp.doorbell_slot);
    }
    qp.doorbell_slot = queues::kNoDoorbellSlot;
}

// As the kernel's ib_open_qp(): another handle to an XRC_TGT QP that was
// created in the same XRC domain, by this client or another.
Result Context::open_qp(const rpc::OpenQpRequest& req, rpc::OpenQpReply& reply) {
    if (req.qp_type != IBV_QPT_XRC_RECV) {
        return fail(EINVAL, "only XRC_TGT QPs can be opened, not %s",
                    qp_type_name(static_cast<ibv_qp_type>(req.qp_type)));
    }
    auto xrcd = xrcds_.find(req.xrcd);
    if (!xrcd) {
        return fail(EINVAL, "no XRC domain with handle %u", req.xrcd);
    }
    Qp* qp = device_.qps().find(req.qpn);
    if (!qp || qp->type != IBV_QPT_XRC_RECV || qp->xrc_domain != xrcd->domain) {
        return fail(EINVAL, "no XRC_TGT QP 0x%x in that XRC domain", req.qpn);
    }
    reply.handle = qps_.add_another(qp->shared_from_this());
    qp->holders.push_back({events_, reply.handle, req.user_handle, Ref<Xrcd>(xrcd)});
    return ok();
}

Result Context::attach_mcast(const rpc::McastRequest& req, rpc::Empty&) {
    auto qp = qps_.find(req.qp);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.qp);
    }
    if (qp->type != IBV_QPT_UD) {
        return fail(EINVAL, "only UD QPs join multicast groups, not %s", qp_type_name(qp->type));
    }
    if (!wire::IpAddress(req.gid.raw).multicast()) {
        return fail(EINVAL, "the GID is not a multicast address");
    }
    std::array<uint8_t, 16> gid;
    memcpy(gid.data(), req.gid.raw, gid.size());
    if (qp->mcast_groups.contains({gid, req.lid})) {
        return ok();  // attaching twice is not an error
    }
    if (qp->mcast_groups.size() >= static_cast<size_t>(device_.attr().orig_attr.max_mcast_grp)) {
        return fail(ENOMEM, "QP %u is in the maximum number of multicast groups", qp->qpn);
    }
    qp->mcast_groups.insert({gid, req.lid});
    device_.join_group(wire::IpAddress(gid));
    return ok();
}

Result Context::detach_mcast(const rpc::McastRequest& req, rpc::Empty&) {
    auto qp = qps_.find(req.qp);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.qp);
    }
    std::array<uint8_t, 16> gid;
    memcpy(gid.data(), req.gid.raw, gid.size());
    if (!qp->mcast_groups.erase({gid, req.lid})) {
        return fail(EINVAL, "QP %u is not attached to that multicast group", qp->qpn);
    }
    device_.leave_group(wire::IpAddress(gid));
    return ok();
}

void Context::leave_groups(Qp& qp) {
    for (const auto& [gid, lid] : qp.mcast_groups) {
        device_.leave_group(wire::IpAddress(gid));
    }
    qp.mcast_groups.clear();
}

}  // namespace uroce
