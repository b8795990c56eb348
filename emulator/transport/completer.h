// The completer (rxe_comp.c): acknowledgements, NAKs, READ responses and
// atomic acknowledgements retire send WQEs, in order, as completions. It owns
// retransmission (retransmit.cpp: the timers, the retry budgets, go-back-N)
// and a failed QP's flush (flush.cpp).
#pragma once

#include <stdint.h>

#include "transport/context.h"

namespace uroce::transport {

class Placements;
class Requester;

class Completer {
  public:
    // It reads the WQEs still posted through `requester` when it flushes,
    // and places READ responses through `placements`.
    Completer(Requester& requester, Placements& placements)
        : requester_(requester), placements_(placements) {}

    // A response packet (an ACK, a NAK, a READ response, an atomic's answer)
    // for a QP whose send queue is live.
    void on_response(const Incoming& in);
    // Retires, in order, the WQEs that `acked_psn` covers; READs and
    // atomics retire only once answered. A WQE that failed locally
    // completes with its error when it reaches the front and fails the QP.
    void complete_acknowledged(const QpOf& at, uint32_t acked_psn);
    // The retransmission and RNR timers that are due at `now`.
    void run_timers(const QpOf& at, Clock::time_point now);
    // The earliest timer of the QP, kNever when none runs.
    static Clock::time_point next_deadline(const Qp& qp) {
        return std::min(qp.requester.retransmit_at, qp.requester.rnr_resume_at);
    }
    // The front WQE completes with `status`; the QP moves to ERR and flushes.
    void fail_qp(const QpOf& at, ibv_wc_status status);
    // In ERR every WQE, posted or still to come, and every receive completes
    // with WR_FLUSH_ERR. Whether it completed anything.
    bool flush(const QpOf& at);

  private:
    void on_data_response(const Incoming& in);
    bool take_read_response(const Incoming& in, SendWork& work, uint32_t mtu);
    void on_acknowledgement(const Incoming& in);
    // retransmit.cpp: goes back to `psn`, spending one retry; go back N.
    void retry(const QpOf& at, uint32_t psn);
    static void restart_from(RequesterState& r, uint32_t psn);

    Requester& requester_;
    Placements& placements_;
};

}  // namespace uroce::transport
