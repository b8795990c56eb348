// RAW_PACKET QPs: each send WQE is one whole Ethernet frame for the
// emulated Ethernet segment that joins the daemon's devices; each frame that
// steering gives a QP (or, through an RSS QP, a WQ) fills one receive WQE.
// Nothing is acknowledged or retried: a frame without a receive WQE is lost.
#include "keys/regions.h"
#include "memory/process_memory.h"
#include "transport/completion.h"
#include "transport/receive_queue.h"
#include "transport/transport.h"

namespace uroce::transport {
namespace {

// Puts `frame` in the next receive WQE of `ring`, completing to `cq` as
// `qp_num`; false when none is posted.
bool fill_receive(Device& device, const Pd* pd, Ring& ring, Cq& cq, uint32_t qp_num,
                  std::span<const std::byte> frame) {
    TakenReceive receive;
    if (!pop_receive(ring, receive)) {
        ++device.stats().raw_no_receive;
        return false;
    }
    ibv_wc wc{};
    wc.wr_id = receive.wqe.wr_id;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp_num;
    wc.byte_len = static_cast<uint32_t>(frame.size());
    Extent target;
    if (resolve_local(device, pd, receive.sges, IBV_ACCESS_LOCAL_WRITE, target) !=
        AccessFault::kNone) {
        wc.status = IBV_WC_LOC_PROT_ERR;
    } else if (target.length < frame.size()) {
        wc.status = IBV_WC_LOC_LEN_ERR;  // the queue stays usable, as for UD
    } else if (write_process(target.pid, frame, slice(target, 0, frame.size())) != 0) {
        wc.status = IBV_WC_LOC_PROT_ERR;
    }
    ++device.stats().raw_rcvd_frames;
    post_completion(cq, wc, false);
    return true;
}

}  // namespace

bool receive_frame(Device& device, Qp& qp, std::span<const std::byte> frame) {
    if (qp.attr.qp_state < IBV_QPS_RTR || qp.attr.qp_state == IBV_QPS_ERR) {
        ++device.stats().rcvd_dropped;
        return false;
    }
    return fill_receive(device, qp.pd.get(), qp.recv_queue, *qp.recv_cq.get(), qp.qpn, frame);
}

bool receive_frame(Device& device, Wq& wq, std::span<const std::byte> frame) {
    if (wq.state != IBV_WQS_RDY) {
        ++device.stats().rcvd_dropped;
        return false;
    }
    return fill_receive(device, wq.pd.get(), wq.ring, *wq.cq.get(), wq.wq_num, frame);
}

bool Transport::run_raw_sender(Device& device, Qp& qp) {
    if (qp.attr.qp_state == IBV_QPS_ERR) {
        return completer_.flush({device, qp});
    }
    if (qp.attr.qp_state != IBV_QPS_RTS || !qp.send_queue.entries()) {
        return false;
    }
    bool did = requester_.take_work({device, qp});
    RequesterState& r = qp.requester;
    while (!r.window.empty()) {
        SendWork& w = r.window.front();
        std::optional<ibv_wc_status> error = w.error;
        if (!error && (w.length < kMinFrame || w.length > kMaxFrame)) {
            error = IBV_WC_LOC_LEN_ERR;
        }
        std::span<const std::byte> frame = w.inline_data;
        if (!error && w.inline_data.empty()) {
            if (resolve_local(device, qp.pd.get(), w.sges, 0, w.source) != AccessFault::kNone ||
                (frame = requester_.stage(w, 0, w.length)).empty()) {
                error = IBV_WC_LOC_PROT_ERR;
            }
        }
        if (error) {
            completer_.fail_qp({device, qp}, *error);
            return true;
        }
        ++device.stats().raw_sent_frames;
        output_.send_frame(device, qp, frame);
        requester_.release_stage(w);
        qp.send_queue.release(1);
        complete_send(qp, w, IBV_WC_SUCCESS);
        r.window.pop_front();
        did = true;
    }
    return did;
}

}  // namespace uroce::transport
