// Retransmission, in one place: the retransmission and RNR timers, the
// retry budget, and go-back-N restarts. The completer retries on a NAK or a
// detected loss; the engine runs the timers when one is due.
#include "transport/completer.h"
#include "wire/psn.h"

namespace uroce::transport {

// Go back N: the requester sends again from `psn`, which the responder has
// not taken.
void Completer::restart_from(RequesterState& r, uint32_t psn) {
    for (size_t i = 0; i < r.window.size(); ++i) {
        SendWork& w = r.window[i];
        if (!w.started || w.done || w.sends_nothing()) {
            continue;
        }
        if (wire::psn_before(w.last_psn(), psn)) {
            continue;
        }
        r.next_to_send = i;
        w.sent = w.is_read_or_atomic() || wire::psn_before(psn, w.first_psn)
                     ? 0
                     : wire::psn_diff(psn, w.first_psn);
        w.received = 0;
        for (size_t j = i + 1; j < r.window.size(); ++j) {
            r.window[j].sent = 0;
            r.window[j].received = 0;
        }
        return;
    }
}

// Goes back to `psn` on a NAK or a detected loss, spending one retry, unless
// a retransmission is already under way.
void Completer::retry(const QpOf& at, uint32_t psn) {
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    if (r.retry_started) {
        return;
    }
    if (r.retries_left == 0) {
        ++at.device.stats().retry_exceeded_err;
        fail_qp(at, IBV_WC_RETRY_EXC_ERR);
        return;
    }
    --r.retries_left;
    r.retry_started = true;
    restart_from(r, psn);
}

void Completer::run_timers(const QpOf& at, Clock::time_point now) {
    RequesterState& r = at.qp.requester;
    if (now >= r.rnr_resume_at) {
        r.rnr_resume_at = kNever;
    }
    if (now < r.retransmit_at) {
        return;
    }
    r.retransmit_at = kNever;
    ++at.device.stats().retransmit_timeouts;
    r.retry_started = false;  // a timeout retries even while another retry is under way
    retry(at, r.unacked_psn);
}

}  // namespace uroce::transport
