#include "transport/receive_queue.h"

#include <string.h>

namespace uroce::transport {
namespace {

Ring& receive_ring(Qp& qp) {
    return qp.srq ? qp.srq->ring : qp.recv_queue;
}

// An armed SRQ whose posted WQEs fall below its limit reports it once and
// disarms (ibv_modify_srq(3)).
void check_srq_limit(Srq& srq) {
    if (srq.attr.srq_limit && srq.ring.pending() < srq.attr.srq_limit) {
        srq.attr.srq_limit = 0;
        srq.events->post(srq.user_handle, IBV_EVENT_SRQ_LIMIT_REACHED);
    }
}

}  // namespace

bool has_receive(Qp& qp) {
    return qp.responder.unused_receive || receive_ring(qp).pending() > 0;
}

bool take_receive(Qp& qp, TakenReceive& out) {
    if (qp.responder.unused_receive) {
        out = std::move(*qp.responder.unused_receive);
        qp.responder.unused_receive.reset();
        return true;
    }
    Ring& ring = receive_ring(qp);
    if (!ring.pending()) {
        return false;
    }
    std::vector<std::byte> entry(ring.entry_size());
    ring.pop(entry);
    memcpy(&out.wqe, entry.data(), sizeof(out.wqe));
    const size_t room = (entry.size() - queues::kRecvWqeFixed) / sizeof(ibv_sge);
    const auto* first = reinterpret_cast<const ibv_sge*>(entry.data() + queues::kRecvWqeFixed);
    out.sges.assign(first, first + std::min<size_t>(out.wqe.num_sge, room));
    if (qp.srq) {
        check_srq_limit(*qp.srq.get());
    }
    return true;
}

}  // namespace uroce::transport
