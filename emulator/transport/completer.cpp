// The completer: acknowledgements, NAKs, READ responses and atomic
// acknowledgements retire send WQEs, in order, as completions; NAKs and
// lost packets send the requester back (go back N); errors move the QP to
// ERR and flush what is left.
#include "transport/completer.h"

#include <stdio.h>
#include <string.h>

#include <algorithm>

#include "memory/process_memory.h"
#include "transport/completion.h"
#include "transport/placements.h"
#include "transport/receive_queue.h"
#include "util/log.h"
#include "wire/psn.h"
#include "wire/rnr_timer.h"

namespace uroce::transport {
namespace {

ibv_wc_status nak_status(wire::NakCode code) {
    switch (code) {
        case wire::NakCode::kInvalidRequest:
            return IBV_WC_REM_INV_REQ_ERR;
        case wire::NakCode::kRemoteAccessError:
            return IBV_WC_REM_ACCESS_ERR;
        case wire::NakCode::kRemoteOperationalError:
            return IBV_WC_REM_OP_ERR;
        default:
            return IBV_WC_REM_INV_RD_REQ_ERR;
    }
}

// The responder took something new: the retry budgets are whole again and
// the timer restarts while anything is unacknowledged.
void made_progress(Qp& qp, Clock::time_point now) {
    RequesterState& r = qp.requester;
    r.retries_left = qp.attr.retry_cnt;
    r.rnr_retries_left = qp.attr.rnr_retry;
    r.retry_started = false;
    const auto timeout = wire::local_ack_timeout(qp.attr.timeout);
    r.retransmit_at = r.unacked_psn == r.next_psn || !timeout ? kNever : now + *timeout;
}

// Every PSN before `psn` is acknowledged (explicitly, or implicitly by a
// NAK): moving past the oldest unacknowledged PSN is progress.
void acknowledge_before(Qp& qp, uint32_t psn, Clock::time_point now) {
    if (wire::psn_before(qp.requester.unacked_psn, psn)) {
        qp.requester.unacked_psn = psn;
        made_progress(qp, now);
    }
}

// Check mode's rnr-settings: the first RNR NAK whose timer (`code`, the
// responder's min_rnr_timer: 0 is the longest, 655.36 ms, and what rdma_cm
// sets) makes a checked QP wait long (`delay`), kept for its provider to
// ask for.
void note_rnr_wait(const Device& device, Qp& qp, uint8_t code, std::chrono::microseconds delay) {
    constexpr auto kLongWait = std::chrono::milliseconds(100);
    RequesterState& r = qp.requester;
    if (delay < kLongWait || r.window.empty() || r.window.front().wqe.check_seq == 0 ||
        !r.rnr_wait.empty()) {
        return;
    }
    const SendWork& w = r.window.front();
    char text[256];
    snprintf(text, sizeof(text),
             "an RNR NAK (the peer had no receive posted) made this QP wait %.2f ms before "
             "sending wr_id 0x%llx again: the responder's min_rnr_timer is %u.",
             static_cast<double>(delay.count()) / 1000,
             static_cast<unsigned long long>(w.wqe.wr_id), code & 0x1fu);
    const InCase tagged(qp.owner_case.get());
    log_info("%s: QP 0x%x: check mode: rnr-settings: %s", device.name().c_str(), qp.qpn, text);
    r.rnr_wait = text;
    r.rnr_wait_seq = w.wqe.check_seq;
    qp.send_queue.add_check_finding();
}

// Where acknowledgement stops for a response that reaches `psn`: at the
// first READ or atomic before it whose answer has not come (the responder
// executed it, so the answer was lost and must be asked for again).
// The window is in PSN order and its WQEs start in order, so the search
// stops at the first that started at or after `psn`, or has not started.
uint32_t first_unanswered(const RequesterState& r, uint32_t psn) {
    for (const SendWork& w : r.window) {
        if (!w.started) {
            break;
        }
        if (w.sends_nothing()) {
            continue;  // has no PSNs
        }
        if (!wire::psn_before(w.first_psn, psn)) {
            break;
        }
        if (w.is_read_or_atomic() && !w.done) {
            return w.first_psn;
        }
    }
    return psn;
}

}  // namespace

void Completer::complete_acknowledged(const QpOf& at, uint32_t acked_psn) {
    Qp& qp = at.qp;
    RequesterState& r = qp.requester;
    while (!r.window.empty()) {
        SendWork& w = r.window.front();
        if (w.done && w.wqe.opcode == IBV_WR_RDMA_READ) {
            placements_.placed(&qp);  // its data is in place before it completes
        }
        if (w.error) {
            fail_qp(at, *w.error);
            return;
        }
        if (!w.started) {
            break;
        }
        if (w.is_read_or_atomic()
                ? !w.done
                : !w.sends_nothing() && wire::psn_before(acked_psn, w.last_psn())) {
            break;
        }
        if (w.is_read_or_atomic()) {
            --r.reads_in_flight;
        }
        // The slot is free before the completion shows: an application may
        // post again the moment it sees it.
        qp.send_queue.release(1);
        complete_send(qp, w, IBV_WC_SUCCESS);
        ++at.device.stats().completions;
        r.window.pop_front();
        if (r.next_to_send > 0) {
            --r.next_to_send;
        }
        if (qp.attr.qp_state == IBV_QPS_ERR) {
            return;  // its CQ had no room for that completion: the rest is flushed
        }
    }
}

void Completer::on_response(const Incoming& in) {
    const RequesterState& r = in.qp.requester;
    const uint32_t psn = in.packet.hdr.bth.psn;
    // Only PSNs sent and not yet acknowledged can be answered. Anything
    // older is a duplicate or stale; anything newer answers a packet that
    // has not left, so it cannot come from the responder (a "ghost", as
    // rxe calls it): a forged ACK must not complete data never sent.
    if (r.unacked_psn == r.sent_psn_end ||
        !wire::psn_in_range(psn, r.unacked_psn, wire::psn_add(r.sent_psn_end, wire::kPsnMask))) {
        ++(wire::psn_before(psn, r.unacked_psn) ? in.device.stats().duplicate_response
                                                : in.device.stats().rcvd_unsent_psn);
        return;
    }
    const wire::Family family = in.packet.info->family;
    if (family == wire::Family::kReadResponse || family == wire::Family::kAtomicAck) {
        on_data_response(in);
    } else {
        on_acknowledgement(in);
    }
}

// A READ response or an atomic's answer: data for the oldest READ or
// atomic not yet answered, which acknowledges everything sent before it.
void Completer::on_data_response(const Incoming& in) {
    Device& device = in.device;
    Qp& qp = in.qp;
    const wire::ParsedPacket& packet = in.packet;
    RequesterState& r = qp.requester;
    const uint32_t psn = packet.hdr.bth.psn;
    auto it = std::find_if(r.window.begin(), r.window.end(), [](const SendWork& w) {
        return w.started && w.is_read_or_atomic() && !w.done;
    });
    if (it == r.window.end()) {
        return;
    }
    SendWork& w = *it;
    const bool atomic_answer = packet.info->family == wire::Family::kAtomicAck;
    if (atomic_answer != (w.wqe.opcode != IBV_WR_RDMA_READ)) {
        // The wrong kind of answer: the WQE fails, as rxe's check_ack() does.
        complete_acknowledged(in, wire::psn_add(w.first_psn, wire::kPsnMask));
        fail_qp(in, IBV_WC_BAD_RESP_ERR);
        return;
    }
    const uint32_t mtu = mtu_bytes(device, qp);
    const uint32_t expected = wire::psn_add(w.first_psn, static_cast<uint32_t>(w.received / mtu));
    if (psn != expected) {
        ++device.stats().rcvd_seq_err;
        if (wire::psn_before(expected, psn)) {
            retry(in, w.first_psn);  // a response was lost
        }
        return;
    }
    // Everything sent before the READ is acknowledged by its response.
    complete_acknowledged(in, wire::psn_add(w.first_psn, wire::kPsnMask));
    if (atomic_answer) {
        const uint64_t original = packet.hdr.atomic_ack_eth.original;
        if (write_process(w.source.pid, std::as_bytes(std::span(&original, 1)),
                          w.source.segments) != 0) {
            w.error = IBV_WC_LOC_PROT_ERR;
        }
        w.done = true;
    } else if (!take_read_response(in, w, mtu)) {
        return;
    }
    if (w.done) {
        r.unacked_psn = wire::psn_add(w.last_psn(), 1);
    }
    made_progress(qp, in.now);
    if (w.done) {
        complete_acknowledged(in, w.last_psn());
    }
}

// Queues a READ response's payload for the READ's gather list; false when
// the response is malformed (and ignored).
bool Completer::take_read_response(const Incoming& in, SendWork& w, uint32_t mtu) {
    const auto payload = std::as_bytes(in.packet.payload);
    const auto position = in.packet.info->position;
    const bool last = position == wire::Position::kLast || position == wire::Position::kOnly;
    // Every response but the last is a full MTU, and the last ends the
    // message: a short one was not the responder's (which sends what was
    // asked) and must not complete the READ.
    if (last ? w.received + payload.size() < w.length : payload.size() != mtu) {
        ++in.device.stats().rcvd_malformed;
        return false;
    }
    if (w.received + payload.size() > w.length) {
        w.error = IBV_WC_LOC_LEN_ERR;
    } else if (!payload.empty()) {
        placements_.queue({&in.device, &in.qp, w.first_psn, {}, true}, w.source.pid, payload,
                          slice(w.source, w.received, payload.size()), in.payload_lent);
    }
    w.received += payload.size();
    w.done = last;
    return true;
}

// An ACK, an RNR NAK or a NAK: completes what it acknowledges, then
// retries, waits or fails the QP.
void Completer::on_acknowledgement(const Incoming& in) {
    Device& device = in.device;
    Qp& qp = in.qp;
    const Clock::time_point now = in.now;
    RequesterState& r = qp.requester;
    const uint32_t psn = in.packet.hdr.bth.psn;
    const wire::Aeth aeth = in.packet.hdr.aeth;
    if (aeth.type() == wire::AethType::kRnrNak || aeth.type() == wire::AethType::kNak) {
        qp.journal.last_nak = {now, false, aeth.type() == wire::AethType::kRnrNak, aeth.value(),
                               psn};
    }
    switch (aeth.type()) {
        case wire::AethType::kAck: {
            const uint32_t unacked = first_unanswered(r, wire::psn_add(psn, 1));
            acknowledge_before(qp, unacked, now);
            complete_acknowledged(in, wire::psn_add(unacked, wire::kPsnMask));
            if (unacked != wire::psn_add(psn, 1)) {
                retry(in, unacked);  // the answer to a READ or atomic was lost
            }
            return;
        }
        case wire::AethType::kRnrNak: {
            ++device.stats().rcvd_rnr_err;
            const uint32_t from = first_unanswered(r, psn);
            acknowledge_before(qp, from, now);
            complete_acknowledged(in, wire::psn_add(from, wire::kPsnMask));
            if (qp.attr.rnr_retry != 7) {
                if (r.rnr_retries_left == 0) {
                    ++device.stats().retry_rnr_exceeded_err;
                    fail_qp(in, IBV_WC_RNR_RETRY_EXC_ERR);
                    return;
                }
                --r.rnr_retries_left;
            }
            r.retransmit_at = kNever;
            const auto delay = wire::rnr_nak_delay(aeth.value());
            note_rnr_wait(device, qp, aeth.value(), delay);
            r.rnr_resume_at = now + delay;
            r.retry_started = true;
            restart_from(r, from);
            return;
        }
        case wire::AethType::kNak: {
            const auto code = static_cast<wire::NakCode>(aeth.value());
            if (code == wire::NakCode::kPsnSequenceError) {
                ++device.stats().rcvd_seq_err;
                const uint32_t from = first_unanswered(r, psn);
                acknowledge_before(qp, from, now);
                complete_acknowledged(in, wire::psn_add(from, wire::kPsnMask));
                retry(in, from);
                return;
            }
            complete_acknowledged(in, wire::psn_add(psn, wire::kPsnMask));
            r.unacked_psn = psn;
            ++device.stats().completer_retry_err;
            fail_qp(in, nak_status(code));
            return;
        }
        case wire::AethType::kReserved:
            ++device.stats().rcvd_malformed;
            return;
    }
}

}  // namespace uroce::transport
