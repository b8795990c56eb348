// Completion channels and completion queues.
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <new>

#include "check/checker.h"
#include "protocol/bridge_abi.h"
#include "provider.h"

namespace uroce {
namespace {

// Maps the completion ring that came with a create or resize reply.
int map_cq_ring(const ReceivedFds& received, uint32_t entries, SharedRing& out) {
    if (received.fds.size() != 1) {
        return EPROTO;
    }
    return SharedRing::map(received.fds[0], entries, queues::kCqeSize, sizeof(queues::CqState),
                           SharedRing::Side::kConsumer, out);
}

ProviderCq* new_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector,
                   uint32_t comp_mask, uint64_t wc_flags, uint32_t flags) {
    auto* cq = new (std::nothrow) ProviderCq{};
    if (!cq) {
        errno = ENOMEM;
        return nullptr;
    }
    rpc::CreateCqRequest request{reinterpret_cast<uintptr_t>(&cq->ibv.cq),
                                 cqe,
                                 channel ? channel->fd : -1,
                                 comp_vector,
                                 comp_mask,
                                 wc_flags,
                                 flags};
    rpc::CreateCqReply reply;
    ReceivedFds received;
    if (int error = client_of(context).call(request, &reply, {}, &received.fds)) {
        delete cq;
        report(context, "create_cq", error);
        return nullptr;
    }
    if (int error = map_cq_ring(received, reply.ring_entries, cq->ring)) {
        client_of(context).call_op(rpc::Op::kDestroyCq, rpc::HandleRequest{reply.handle});
        delete cq;
        report_ring(context, "create_cq", error);
        return nullptr;
    }
    cq->ibv.cq.handle = reply.handle;
    cq->ibv.cq.cqe = reply.cqe;
    if (check::CheckState* check = checking(context)) {
        check->created(cq, "CQ of " + std::to_string(reply.cqe) + " entries");
        check->cq_created(&cq->ibv.cq);
    }
    return cq;
}

}  // namespace

ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
    ProviderCq* cq = new_cq(context, cqe, channel, comp_vector, 0, IBV_WC_STANDARD_FLAGS, 0);
    return cq ? &cq->ibv.cq : nullptr;
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
    const uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
    // A CQ may name a parent domain (nothing of it changes the CQ here);
    // anything else in that field is invalid, as on mlx5.
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
        (!attr->parent_domain || attr->parent_domain->context != context ||
         !to_pd(attr->parent_domain)->protection_domain)) {
        refuse(context, "create_cq_ex", EINVAL, "parent_domain is not a parent domain");
        return nullptr;
    }
    ProviderCq* cq = new_cq(context, static_cast<int>(attr->cqe), attr->channel,
                            static_cast<int>(attr->comp_vector),
                            attr->comp_mask & ~IBV_CQ_INIT_ATTR_MASK_PD, attr->wc_flags, flags);
    if (!cq) {
        return nullptr;
    }
    set_cq_ex_ops(&cq->ibv.cq_ex);
    return &cq->ibv.cq_ex;
}

int modify_cq(ibv_cq* cq, ibv_modify_cq_attr* attr) {
    if (!attr) {
        return refuse_null(cq->context, "ibv_modify_cq", "attr");
    }

    rpc::Empty none;
    if (int error = client_of(cq->context).call(rpc::ModifyCqRequest{cq->handle, *attr}, &none)) {
        return report(cq->context, "modify_cq", error);
    }
    return 0;
}

int resize_cq(ibv_cq* ibcq, int cqe) {
    ProviderCq* cq = to_cq(ibcq);
    // Held across the call: the daemon copies the completions not polled
    // yet, so none may be polled from the old ring until we switch.
    std::lock_guard lock(cq->lock);
    rpc::ResizeCqReply reply;
    ReceivedFds received;
    if (int error = client_of(ibcq->context)
                        .call(rpc::ResizeCqRequest{ibcq->handle, cqe}, &reply, {}, &received.fds)) {
        return report(ibcq->context, "resize_cq", error);
    }
    // The daemon has moved to the new ring: the old one is finished either way.
    if (int error = map_cq_ring(received, reply.ring_entries, cq->ring)) {
        cq->ring = SharedRing();
        return report_ring(ibcq->context, "resize_cq", error);
    }
    ibcq->cqe = reply.cqe;
    return 0;
}

int destroy_cq(ibv_cq* cq) {
    if (check::CheckState* check = checking(cq->context)) {
        check->destroying_cq(cq, to_cq(cq)->events.load());
        check->destroying(cq, "ibv_destroy_cq", &cq->async_events_completed, &cq->mutex);
    }
    if (int error =
            client_of(cq->context).call_op(rpc::Op::kDestroyCq, rpc::HandleRequest{cq->handle})) {
        return report(cq->context, "destroy_cq", error);
    }
    if (check::CheckState* check = checking(cq->context)) {
        check->destroyed(to_cq(cq));
    }
    delete to_cq(cq);
    return 0;
}

// libibverbs' ibv_get_cq_event calls this for each event it returns.
void cq_event(ibv_cq* cq) {
    ++to_cq(cq)->events;
}

// And ibv_get_async_event this, for each of its events: check mode counts
// them for the destroy that would wait for their acknowledgement.
void async_event(ibv_context* context, ibv_async_event* event) {
    if (check::CheckState* check = checking(context)) {
        check->async_event_got(*event);
    }
}

}  // namespace uroce

using uroce::client_of;

// Called by the kernel bridge for ibv_create_comp_channel on a uroce
// context: a pipe whose write end the daemon keeps.
extern "C" __attribute__((visibility("default"))) int uroce_comp_channel_create(ibv_context* ctx) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -1;
    }
    uroce::rpc::Empty none;
    const int error = client_of(ctx).call(uroce::rpc::CreateCompChannelRequest{fds[0]}, &none,
                                          std::span(&fds[1], 1));
    close(fds[1]);
    if (error) {
        close(fds[0]);
        uroce::report(ctx, "create_comp_channel", error);
        return -1;
    }
    return fds[0];
}

// Called by the kernel bridge before ibv_get_cq_event blocks: in check mode,
// a wait that has lasted kBlockedWaitMs on a channel none of whose CQs is
// armed is reported (docs/check.md, unacked-events), and the wait goes on.
extern "C" __attribute__((visibility("default"))) void uroce_check_cq_wait(ibv_context* ctx,
                                                                           int fd) {
    constexpr int kBlockedWaitMs = 1000;
    uroce::check::CheckState* check = uroce::checking(ctx);
    const int flags = check ? fcntl(fd, F_GETFL) : -1;
    if (flags < 0 || (flags & O_NONBLOCK)) {
        return;  // not checking, or a read that does not block
    }
    pollfd wait{fd, POLLIN, 0};
    if (poll(&wait, 1, kBlockedWaitMs) != 0) {
        return;  // an event (or an error, which the read reports)
    }
    uint32_t armed = 0;
    uint32_t held = 0;
    uint32_t held_by_armed = 0;
    const std::vector<ibv_cq*> cqs = check->cqs_on_channel(fd);
    for (ibv_cq* ibcq : cqs) {
        uroce::ProviderCq* cq = uroce::to_cq(ibcq);
        std::lock_guard lock(cq->lock);
        if (cq->ring.mapped()) {
            const auto* state = static_cast<const uroce::queues::CqState*>(cq->ring.extra());
            const bool is_armed = state->arm.load() != uroce::queues::kCqDisarmed;
            armed += is_armed;
            held += cq->ring.ready();
            held_by_armed += is_armed ? cq->ring.ready() : 0;
        }
    }
    const auto count = static_cast<uint32_t>(cqs.size());
    if (armed == 0) {
        check->blocked_unarmed(count, held);
    } else {
        check->blocked_armed({count, armed, held_by_armed});
    }
}

extern "C" __attribute__((visibility("default"))) int uroce_comp_channel_destroy(ibv_context* ctx,
                                                                                 int fd) {
    const int error = client_of(ctx).call_op(uroce::rpc::Op::kDestroyCompChannel,
                                             uroce::rpc::DestroyCompChannelRequest{fd});
    close(fd);
    return error ? uroce::report(ctx, "destroy_comp_channel", error) : 0;
}
