// Shared receive queues, basic and XRC.
#include <bit>

#include "verbs/context.h"

namespace uroce {
namespace {

constexpr uint32_t kSupportedSrqComp =
    IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

uint32_t actual_wr(uint32_t requested, uint32_t max) {
    return std::min<uint32_t>(std::bit_ceil(requested + 1) - 1, max);
}

}  // namespace

Result Context::create_srq(const rpc::CreateSrqRequest& req, rpc::CreateSrqReply& reply,
                           ReplyFds& fds) {
    const ibv_device_attr& caps = device_.attr().orig_attr;
    if (req.comp_mask & IBV_SRQ_INIT_ATTR_TM) {
        return fail(EOPNOTSUPP, "tag matching SRQs are not supported");
    }
    if (req.comp_mask & ~kSupportedSrqComp) {
        return fail(EINVAL, "unknown SRQ comp_mask bits 0x%x", req.comp_mask & ~kSupportedSrqComp);
    }
    const ibv_srq_type type = (req.comp_mask & IBV_SRQ_INIT_ATTR_TYPE)
                                  ? static_cast<ibv_srq_type>(req.srq_type)
                                  : IBV_SRQT_BASIC;
    if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) {
        return fail(type == IBV_SRQT_TM ? EOPNOTSUPP : EINVAL, "SRQ type %d is not supported",
                    req.srq_type);
    }
    auto pd = pds_.find(req.pd);
    if (!(req.comp_mask & IBV_SRQ_INIT_ATTR_PD) || !pd) {
        return fail(EINVAL, "an SRQ needs a valid PD (handle %u)", req.pd);
    }
    std::shared_ptr<Xrcd> xrcd;
    std::shared_ptr<Cq> cq;
    if (type == IBV_SRQT_XRC) {
        xrcd = xrcds_.find(req.xrcd);
        cq = cqs_.find(req.cq);
        if (!(req.comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !xrcd) {
            return fail(EINVAL, "an XRC SRQ needs a valid XRC domain (handle %u)", req.xrcd);
        }
        if (!(req.comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !cq) {
            return fail(EINVAL, "an XRC SRQ needs a valid CQ (handle %u)", req.cq);
        }
    }
    const ibv_srq_attr& a = req.attr;
    if (a.max_wr < 1 || a.max_wr > static_cast<uint32_t>(caps.max_srq_wr)) {
        return fail(EINVAL, "SRQ max_wr %u is outside 1..%d", a.max_wr, caps.max_srq_wr);
    }
    if (a.max_sge > static_cast<uint32_t>(caps.max_srq_sge)) {
        return fail(EINVAL, "SRQ max_sge %u is above the device's %d", a.max_sge, caps.max_srq_sge);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kSrq); !r) {
        return r;
    }
    auto srq = std::make_shared<Srq>();
    const uint32_t max_wr = actual_wr(a.max_wr, caps.max_srq_wr);
    const uint32_t max_sge = std::max<uint32_t>(a.max_sge, 1);
    if (Result r = Ring::create(device_.name() + "-srq", std::bit_ceil(max_wr),
                                queues::recv_wqe_size(max_sge), 0, srq->ring);
        !r) {
        return r;
    }
    const auto srq_num = device_.srqs().add(srq);
    if (!srq_num) {
        return fail(ENOMEM, "no SRQ numbers left");
    }
    srq->user_handle = req.user_handle;
    srq->events = events_;
    srq->type = type;
    // The limit is "irrelevant for ibv_create_srq": only ibv_modify_srq arms it.
    srq->attr = {max_wr, max_sge, 0};
    srq->pd = Ref<Pd>(pd);
    srq->xrcd = Ref<Xrcd>(xrcd);
    srq->cq = Ref<Cq>(cq);
    srq->srq_num = *srq_num;
    srqs_.add(srq);
    device_.count(owner_, ObjectKind::kSrq, 1);
    reply = {srq->handle, srq->srq_num, srq->attr, srq->ring.entries(), srq->ring.entry_size()};
    fds.push_back(srq->ring.release_fd());
    return ok();
}

Result Context::modify_srq(const rpc::ModifySrqRequest& req, rpc::ModifySrqReply& reply,
                           ReplyFds& fds) {
    auto srq = srqs_.find(req.handle);
    if (!srq) {
        return fail(EINVAL, "no SRQ with handle %u", req.handle);
    }
    if (req.attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) {
        return fail(EINVAL, "unknown SRQ attribute mask bits 0x%x",
                    req.attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT));
    }
    ibv_srq_attr next = srq->attr;
    const uint32_t max_srq_wr = static_cast<uint32_t>(device_.attr().orig_attr.max_srq_wr);
    if (req.attr_mask & IBV_SRQ_MAX_WR) {
        if (req.attr.max_wr < 1 || req.attr.max_wr > max_srq_wr) {
            return fail(EINVAL, "SRQ max_wr %u is outside 1..%u", req.attr.max_wr, max_srq_wr);
        }
        next.max_wr = actual_wr(req.attr.max_wr, max_srq_wr);
    }
    if (req.attr_mask & IBV_SRQ_LIMIT) {
        next.srq_limit = req.attr.srq_limit;
    }
    if (next.srq_limit > next.max_wr) {
        return fail(EINVAL, "SRQ limit %u is above max_wr %u", next.srq_limit, next.max_wr);
    }
    reply = {};
    if (next.max_wr > srq->ring.entries()) {
        Ring bigger;
        if (Result r = Ring::create(device_.name() + "-srq", std::bit_ceil(next.max_wr),
                                    srq->ring.entry_size(), 0, bigger);
            !r) {
            return r;
        }
        if (!srq->ring.move_pending_to(bigger)) {
            return fail(EINVAL, "SRQ has more receives posted than %u", next.max_wr);
        }
        srq->ring = std::move(bigger);
        reply = {srq->ring.entries(), srq->ring.entry_size()};
        fds.push_back(srq->ring.release_fd());
    }
    srq->attr = next;
    return ok();
}

Result Context::query_srq(const rpc::HandleRequest& req, rpc::QuerySrqReply& reply) {
    auto srq = srqs_.find(req.handle);
    if (!srq) {
        return fail(EINVAL, "no SRQ with handle %u", req.handle);
    }
    reply.attr = srq->attr;
    return ok();
}

Result Context::destroy_srq(const rpc::HandleRequest& req, rpc::Empty&) {
    auto srq = srqs_.find(req.handle);
    if (!srq) {
        return fail(EINVAL, "no SRQ with handle %u", req.handle);
    }
    if (srq->users) {
        return fail(EBUSY, "SRQ %u is still used by %d QPs", req.handle, srq->users);
    }
    device_.srqs().remove(srq->srq_num);
    srqs_.erase(req.handle);
    device_.count(owner_, ObjectKind::kSrq, -1);
    return ok();
}

}  // namespace uroce
