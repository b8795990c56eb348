// The turns the engine gives a QP's send queue: the requester's, then the
// completer's for what the requester retired without an answer (local
// operations, unreliable sends, WQEs that failed before leaving).
#include "transport/transport.h"

#include "wire/psn.h"

namespace uroce::transport {

bool Transport::run_requester(Device& device, Qp& qp, Clock::time_point now, uint32_t& budget) {
    if (qp.attr.qp_state == IBV_QPS_ERR) {
        return completer_.flush({device, qp});
    }
    if (qp.attr.qp_state != IBV_QPS_RTS || !qp.send_queue.entries()) {
        return false;
    }
    const bool did = requester_.run({device, qp}, now, budget);
    completer_.complete_acknowledged({device, qp},
                                     wire::psn_add(qp.requester.unacked_psn, wire::kPsnMask));
    return did;
}

}  // namespace uroce::transport
