#include "transport/receive_queue.h"

#include <string.h>

#include "transport/completion.h"
#include "util/coverage.h"

namespace uroce::transport {
namespace {

// The SRQ the QP's receives come from now, or null for its own queue. The
// XRC SRQ's table keeps it alive for as long as this runs (one thread).
Srq* receive_srq(const Qp& qp) {
    return qp.type == IBV_QPT_XRC_RECV ? qp.responder.xrc_srq.lock().get() : qp.srq.get();
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

bool select_xrc_srq(Device& device, Qp& qp, uint32_t srq_num) {
    std::shared_ptr<Srq> srq = device.srqs().find(srq_num).lock();
    if (!srq || srq->type != IBV_SRQT_XRC || srq->xrcd->domain != qp.xrc_domain) {
        qp.responder.xrc_srq.reset();
        return false;
    }
    qp.responder.xrc_srq = srq;
    return true;
}

bool has_receive(Qp& qp) {
    if (qp.responder.unused_receive) {
        return true;
    }
    Srq* srq = receive_srq(qp);
    return (srq ? srq->ring : qp.recv_queue).has_pending();
}

bool take_receive(Qp& qp, TakenReceive& out) {
    if (qp.responder.unused_receive) {
        out = std::move(*qp.responder.unused_receive);
        qp.responder.unused_receive.reset();
        return true;
    }
    Srq* srq = receive_srq(qp);
    if (!pop_receive(srq ? srq->ring : qp.recv_queue, out)) {
        return false;
    }
    coverage::work_request(qp.type, coverage::kWrReceive);
    if (srq) {
        check_srq_limit(*srq);
    }
    return true;
}

bool pop_receive(Ring& ring, TakenReceive& out) {
    if (!ring.has_pending()) {
        return false;
    }
    thread_local std::vector<std::byte> entry;
    entry.resize(ring.entry_size());
    ring.pop(entry);
    memcpy(&out.wqe, entry.data(), sizeof(out.wqe));
    const size_t room = (entry.size() - queues::kRecvWqeFixed) / sizeof(ibv_sge);
    const auto* first = reinterpret_cast<const ibv_sge*>(entry.data() + queues::kRecvWqeFixed);
    out.sges.assign(first, first + std::min<size_t>(out.wqe.num_sge, room));
    return true;
}

bool flush_wq(Wq& wq) {
    bool any = false;
    TakenReceive receive;
    while (pop_receive(wq.ring, receive)) {
        complete_receive_without_data(*wq.cq.get(), receive.wqe.wr_id, wq.wq_num,
                                      IBV_WC_WR_FLUSH_ERR);
        any = true;
    }
    return any;
}

Cq* receive_cq(const Qp& qp) {
    if (qp.type != IBV_QPT_XRC_RECV) {
        return qp.recv_cq.get();
    }
    Srq* srq = receive_srq(qp);
    return srq ? srq->cq.get() : nullptr;
}

const Pd* request_pd(const Qp& qp) {
    if (qp.type != IBV_QPT_XRC_RECV) {
        return qp.pd.get();
    }
    Srq* srq = receive_srq(qp);
    return srq ? srq->pd.get() : nullptr;
}

}  // namespace uroce::transport
