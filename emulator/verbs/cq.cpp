// Completion channels and completion queues.
#include <bit>

#include "verbs/context.h"

namespace uroce {
namespace {

constexpr uint64_t kSupportedWcFlags = uint64_t{IBV_WC_STANDARD_FLAGS} |
                                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr uint32_t kSupportedCqComp = IBV_CQ_INIT_ATTR_MASK_FLAGS;

// Queues hold a power of two slots, one of which stays empty; like
// Soft-RoCE, the usable size is reported back.
int actual_cqe(int requested) {
    return static_cast<int>(std::bit_ceil(static_cast<uint32_t>(requested) + 1) - 1);
}

}  // namespace

Result Context::create_comp_channel(const rpc::CreateCompChannelRequest& req, UniqueFd write_end) {
    if (!write_end) {
        return fail(EINVAL, "a completion channel needs its pipe");
    }
    if (channels_.contains(req.channel_fd)) {
        return fail(EEXIST, "completion channel %d already exists", req.channel_fd);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kCompChannel); !r) {
        return r;
    }
    auto channel = std::make_shared<CompChannel>();
    if (Result r = ClientPipe::adopt_in_share(descriptors_, owner_, 1, std::move(write_end), false,
                                              {"completion channel", pid_}, channel->pipe);
        !r) {
        return r;
    }
    channels_.emplace(req.channel_fd, channel);
    device_.count(owner_, ObjectKind::kCompChannel, 1);
    return ok();
}

Result Context::destroy_comp_channel(const rpc::DestroyCompChannelRequest& req, rpc::Empty&) {
    auto it = channels_.find(req.channel_fd);
    if (it == channels_.end()) {
        return fail(EINVAL, "no completion channel %d", req.channel_fd);
    }
    if (it->second->users) {
        return fail(EBUSY, "completion channel %d is used by %d CQs", req.channel_fd,
                    it->second->users);
    }
    channels_.erase(it);
    device_.count(owner_, ObjectKind::kCompChannel, -1);
    if (descriptors_) {
        descriptors_->give_back(owner_, 1);
    }
    return ok();
}

Result Context::create_cq(const rpc::CreateCqRequest& req, rpc::CreateCqReply& reply,
                          ReplyFds& fds) {
    const ibv_device_attr& caps = device_.attr().orig_attr;
    if (req.cqe < 1 || req.cqe > caps.max_cqe) {
        return fail(EINVAL, "cqe %d is outside 1..%d", req.cqe, caps.max_cqe);
    }
    if (req.comp_vector < 0 || req.comp_vector >= 1) {
        return fail(EINVAL, "completion vector %d does not exist (the device has 1)",
                    req.comp_vector);
    }
    if (req.comp_mask & ~kSupportedCqComp) {
        return fail(EINVAL, "unknown CQ comp_mask bits 0x%x", req.comp_mask & ~kSupportedCqComp);
    }
    if (req.wc_flags & ~kSupportedWcFlags) {
        return fail(EOPNOTSUPP, "wc_flags 0x%llx are not supported",
                    (unsigned long long)(req.wc_flags & ~kSupportedWcFlags));
    }
    if (req.flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED) {
        return fail(EOPNOTSUPP, "CQ creation flags 0x%x are not supported",
                    req.flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    }
    std::shared_ptr<CompChannel> channel;
    if (req.channel_fd >= 0) {
        auto it = channels_.find(req.channel_fd);
        if (it == channels_.end()) {
            return fail(EINVAL, "no completion channel %d", req.channel_fd);
        }
        channel = it->second;
    }
    if (Result r = device_.admit(owner_, ObjectKind::kCq); !r) {
        return r;
    }
    auto cq = std::make_shared<Cq>();
    cq->pid = pid_;
    cq->user_handle = req.user_handle;
    cq->cqe = std::min(actual_cqe(req.cqe), caps.max_cqe);
    cq->channel = Ref<CompChannel>(channel);
    cq->comp_vector = req.comp_vector;
    cq->wc_flags = req.wc_flags;
    cq->events = events_;
    cq->due_events = &device_.due_cq_events();
    cq->unpolled_cqs = &device_.unpolled_cqs();
    cq->lost = &device_.stats().completions_lost;
    cq->device_name = device_.name();
    const uint32_t entries = static_cast<uint32_t>(cq->cqe) + 1;
    if (Result r = Ring::create(device_.name() + "-cq", entries, queues::kCqeSize,
                                sizeof(queues::CqState), cq->ring);
        !r) {
        return r;
    }
    cqs_.add(cq);
    device_.count(owner_, ObjectKind::kCq, 1);
    reply = {cq->handle, cq->cqe, entries};
    fds.push_back(cq->ring.release_fd());
    return ok();
}

Result Context::resize_cq(const rpc::ResizeCqRequest& req, rpc::ResizeCqReply& reply,
                          ReplyFds& fds) {
    auto cq = cqs_.find(req.handle);
    if (!cq) {
        return fail(EINVAL, "no CQ with handle %u", req.handle);
    }
    const int max_cqe = device_.attr().orig_attr.max_cqe;
    if (req.cqe < 1 || req.cqe > max_cqe) {
        return fail(EINVAL, "cqe %d is outside 1..%d", req.cqe, max_cqe);
    }
    // The request, not the rounded ring, must hold what waits (as rxe's
    // rxe_cq_chk_attr() and the man page: EINVAL).
    if (static_cast<uint32_t>(req.cqe) < cq->ring.unconsumed()) {
        return fail(EINVAL, "cqe %d is fewer than the %u completions waiting in the CQ", req.cqe,
                    cq->ring.unconsumed());
    }
    const int cqe = std::min(actual_cqe(req.cqe), max_cqe);
    Ring ring;
    if (Result r = Ring::create(device_.name() + "-cq", static_cast<uint32_t>(cqe) + 1,
                                queues::kCqeSize, sizeof(queues::CqState), ring);
        !r) {
        return r;
    }
    if (!cq->ring.move_unconsumed_to(ring)) {
        return fail(EINVAL, "cqe %d is fewer than the completions waiting in the CQ", req.cqe);
    }
    static_cast<queues::CqState*>(ring.extra())
        ->arm.store(static_cast<queues::CqState*>(cq->ring.extra())->arm.load());
    cq->ring = std::move(ring);
    cq->cqe = cqe;
    reply = {cq->cqe, cq->ring.entries()};
    fds.push_back(cq->ring.release_fd());
    return ok();
}

// ibv_modify_cq(3): moderation only (the kernel's ib_uverbs_ex_modify_cq).
Result Context::modify_cq(const rpc::ModifyCqRequest& req, rpc::Empty&) {
    auto cq = cqs_.find(req.handle);
    if (!cq) {
        return fail(EINVAL, "no CQ with handle %u", req.handle);
    }
    if (!req.attr.attr_mask) {
        return fail(EINVAL, "ibv_modify_cq with an empty attr_mask");
    }
    if (req.attr.attr_mask & ~IBV_CQ_ATTR_MODERATE) {
        return fail(EOPNOTSUPP, "CQ attributes 0x%x are not supported",
                    req.attr.attr_mask & ~IBV_CQ_ATTR_MODERATE);
    }
    const ibv_cq_moderation_caps& caps = device_.attr().cq_mod_caps;
    if (req.attr.moderate.cq_count > caps.max_cq_count ||
        req.attr.moderate.cq_period > caps.max_cq_period) {
        return fail(EINVAL, "moderation %u completions / %u us beyond the device's %u / %u us",
                    req.attr.moderate.cq_count, req.attr.moderate.cq_period, caps.max_cq_count,
                    caps.max_cq_period);
    }
    cq->moderation = req.attr.moderate;
    return ok();
}

Result Context::destroy_cq(const rpc::HandleRequest& req, rpc::Empty&) {
    auto cq = cqs_.find(req.handle);
    if (!cq) {
        return fail(EINVAL, "no CQ with handle %u", req.handle);
    }
    if (cq->users) {
        return fail(EBUSY, "CQ %u is still used by %d QPs, SRQs or WQs", req.handle, cq->users);
    }
    device_.due_cq_events().erase(cq.get());
    device_.unpolled_cqs().remove(*cq);
    cqs_.erase(req.handle);
    device_.count(owner_, ObjectKind::kCq, -1);
    return ok();
}

}  // namespace uroce
