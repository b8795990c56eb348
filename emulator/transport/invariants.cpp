#include "transport/invariants.h"

#include <stdio.h>

#include "transport/context.h"
#include "transport/transport.h"
#include "wire/psn.h"

namespace uroce::transport {

void (*planted_bug)(Device& device, Qp& qp, SendWork& work) = nullptr;

namespace {

template <class... Args>
std::string sentence(const char* format, Args... args) {
    char text[256];
    snprintf(text, sizeof(text), format, args...);
    return text;
}

std::string requester_invariant(const Qp& qp) {
    const RequesterState& r = qp.requester;
    if (r.next_to_send > r.window.size()) {
        return sentence("requester: the next WQE to send, %zu, is past its window of %zu",
                        r.next_to_send, r.window.size());
    }
    // The ring's consumer indices are the daemon's own: every WQE taken and
    // not yet released is one the requester's window holds.
    const uint32_t in_hand = qp.send_queue.taken() - qp.send_queue.released();
    if (in_hand > qp.send_queue.entries()) {
        return sentence("send queue: %u WQEs taken and not released of a ring of %u", in_hand,
                        qp.send_queue.entries());
    }
    if (qp.type != IBV_QPT_RAW_PACKET && qp.send_queue.entries() && in_hand != r.window.size()) {
        return sentence("send queue: %u WQEs taken and not released, %zu in the requester's window",
                        in_hand, r.window.size());
    }
    if (r.reads_in_flight > std::max<uint32_t>(qp.attr.max_rd_atomic, 1)) {
        return sentence("requester: %u READs and atomics outstanding, max_rd_atomic %u",
                        r.reads_in_flight, qp.attr.max_rd_atomic);
    }
    if (!is_reliable(qp.type)) {
        return {};
    }
    if (wire::psn_diff(r.next_psn, r.sent_psn_end) < 0) {
        return sentence("requester: PSNs sent up to 0x%x, past the next PSN 0x%x", r.sent_psn_end,
                        r.next_psn);
    }
    if (wire::psn_diff(r.sent_psn_end, r.unacked_psn) < 0) {
        return sentence(
            "requester: the oldest unacknowledged PSN 0x%x is past what was sent "
            "(up to 0x%x)",
            r.unacked_psn, r.sent_psn_end);
    }
    return {};
}

std::string responder_invariant(const Device& device, const Qp& qp) {
    const ResponderState& s = qp.responder;
    if (s.waiting.size() > kMaxWaitingRequests) {
        return sentence("responder: %zu requests wait, beyond the bound of %zu", s.waiting.size(),
                        kMaxWaitingRequests);
    }
    const auto max_resources = static_cast<uint32_t>(device.attr().orig_attr.max_qp_rd_atom);
    if (s.resources.size() > std::max<uint32_t>(qp.attr.max_dest_rd_atomic, max_resources)) {
        return sentence("responder: %zu READ and atomic resources kept, max_dest_rd_atomic %u",
                        s.resources.size(), qp.attr.max_dest_rd_atomic);
    }
    const InboundMessage& m = s.message;
    if (!m.active && m.offset != 0) {
        return sentence("responder: %llu bytes placed of a message that is not under way",
                        static_cast<unsigned long long>(m.offset));
    }
    if (m.active && m.offset > m.target.length) {
        return sentence("responder: %llu bytes placed in a target of %llu",
                        static_cast<unsigned long long>(m.offset),
                        static_cast<unsigned long long>(m.target.length));
    }
    if (s.reply) {
        const uint64_t length = s.reply->request.reth.dma_length;
        const uint32_t mtu = mtu_bytes(device, qp);
        const uint64_t packets = length ? (length + mtu - 1) / mtu : 1;
        if (s.reply->next > packets) {
            return sentence("responder: READ response packet %u of a READ of %llu packets",
                            s.reply->next, static_cast<unsigned long long>(packets));
        }
    }
    return {};
}

}  // namespace

std::string broken_invariant(const Device& device, const Qp& qp) {
    if (std::string broken = requester_invariant(qp); !broken.empty()) {
        return broken;
    }
    return responder_invariant(device, qp);
}

}  // namespace uroce::transport
