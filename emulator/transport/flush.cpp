// A QP in ERR: its front WQE fails, then every WQE, posted or still to
// come, and every receive completes with WR_FLUSH_ERR (IBA 10.3.1, and the
// kernel's flush_send_queue / flush_recv_queue).
#include "transport/completer.h"
#include "transport/completion.h"
#include "transport/placements.h"
#include "transport/receive_queue.h"
#include "transport/requester.h"

namespace uroce::transport {
namespace {

void complete_receive_wqe(Qp& qp, uint64_t wr_id, ibv_wc_status status) {
    if (Cq* cq = receive_cq(qp)) {
        complete_receive_without_data(*cq, wr_id, qp.qpn, status);
    }
}

}  // namespace

void Completer::fail_qp(const QpOf& at, ibv_wc_status status) {
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    if (!r.window.empty()) {
        qp.send_queue.release(1);
        complete_send(qp, r.window.front(), status);
        r.window.pop_front();
    }
    qp.move_to(IBV_QPS_ERR, 0, std::string("requester: ") + ibv_wc_status_str(status));
    flush(at);
}

bool Completer::flush(const QpOf& at) {
    Qp& qp = at.qp;
    placements_.placed(&qp);  // data already accepted lands before the flushed completions
    RequesterState& r = qp.requester;
    bool did = requester_.take_work(at);
    qp.send_queue.release(static_cast<uint32_t>(r.window.size()));
    for (const SendWork& w : r.window) {
        ibv_wc wc{};
        wc.wr_id = w.wqe.wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = w.wc_opcode();
        wc.qp_num = qp.qpn;
        post_completion(*qp.send_cq.get(), wc, false);
        did = true;
    }
    r.window.clear();
    r.next_to_send = 0;
    r.reads_in_flight = 0;
    r.retransmit_at = r.rnr_resume_at = kNever;
    ResponderState& s = qp.responder;
    InboundMessage& m = s.message;
    if (m.active && m.is_send) {
        complete_receive_wqe(qp, m.receive.wqe.wr_id, IBV_WC_WR_FLUSH_ERR);
        did = true;
    }
    m.clear();
    if (s.unused_receive) {
        complete_receive_wqe(qp, s.unused_receive->wqe.wr_id, IBV_WC_WR_FLUSH_ERR);
        s.unused_receive.reset();
        did = true;
    }
    // A QP on an SRQ takes no more of its WQEs (IBA 11.6.3.2).
    if (qp.srq && !s.last_wqe_reached) {
        s.last_wqe_reached = true;
        qp.post_event(IBV_EVENT_QP_LAST_WQE_REACHED);
    }
    s.reply.reset();
    s.waiting.clear();
    if (qp.recv_queue.entries()) {
        queues::RecvWqe recv;
        while (qp.recv_queue.pending()) {
            qp.recv_queue.pop(std::as_writable_bytes(std::span(&recv, 1)));
            complete_receive_wqe(qp, recv.wr_id, IBV_WC_WR_FLUSH_ERR);
            did = true;
        }
    }
    return did;
}

}  // namespace uroce::transport
