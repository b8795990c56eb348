#include "control/qp_snapshot.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>

#include "device/device.h"
#include "net/interfaces.h"
#include "qp/qp_transitions.h"
#include "verbs/context.h"
#include "wire/headers.h"
#include "wire/ip_address.h"
#include "wire/psn.h"

namespace uroce {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using transport::RequesterState;
using transport::ResponderState;

// The process's name, as `ps` and `rdma res` show it.
std::string comm_of(pid_t pid) {
    std::ifstream file("/proc/" + std::to_string(pid) + "/comm");
    std::string comm;
    std::getline(file, comm);
    return comm;
}

// A moment as microseconds from `now` (negative: past) and as Unix ms.
json moment(Clock::time_point at, Clock::time_point now) {
    const auto from_now = std::chrono::duration_cast<std::chrono::microseconds>(at - now);
    const auto wall = std::chrono::system_clock::now() + (at - now);
    return {
        {"in_us", from_now.count()},
        {"unix_ms",
         std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count()}};
}

json queue_json(uint32_t size, uint32_t queued, uint32_t in_flight, uint32_t retired) {
    return {{"size", size},
            {"queued", queued},
            {"in_flight", in_flight},
            {"completed", retired - std::min(retired, in_flight)}};
}

json send_queue_json(const Qp& qp) {
    if (!qp.send_queue.entries()) {
        return nullptr;
    }
    const auto in_flight = static_cast<uint32_t>(qp.requester.window.size());
    // A WQE leaves the ring when it completes: what the ring handed back is done.
    return queue_json(qp.cap.max_send_wr, qp.send_queue.waiting(), in_flight,
                      qp.send_queue.released() + in_flight);
}

json receive_queue_json(const Qp& qp) {
    if (qp.srq) {
        return {{"srq", qp.srq->srq_num}};
    }
    if (!qp.recv_queue.entries()) {
        return nullptr;
    }
    // A receive WQE leaves the ring when a message takes it.
    const ResponderState& s = qp.responder;
    const uint32_t in_flight =
        (s.message.active && s.message.is_send ? 1 : 0) + (s.unused_receive ? 1 : 0);
    return queue_json(qp.cap.max_recv_wr, qp.recv_queue.waiting(), in_flight,
                      qp.recv_queue.released());
}

json timer_json(const Qp& qp, Clock::time_point now) {
    const RequesterState& r = qp.requester;
    if (r.rnr_resume_at != transport::kNever && r.rnr_resume_at <= r.retransmit_at) {
        json timer = moment(r.rnr_resume_at, now);
        timer["for"] = "RNR wait: send again after the peer's RNR NAK";
        return timer;
    }
    if (r.retransmit_at != transport::kNever) {
        json timer = moment(r.retransmit_at, now);
        timer["for"] = "retransmit: no acknowledgement for PSN " + std::to_string(r.unacked_psn);
        return timer;
    }
    return nullptr;
}

json nak_json(const transport::NakRecord& nak, Clock::time_point now) {
    json out = moment(nak.at, now);
    out["direction"] = nak.sent ? "sent" : "received";
    out["psn"] = nak.psn;
    if (nak.rnr) {
        out["kind"] = "RNR NAK";
        out["rnr_timer"] = nak.value;
    } else {
        out["kind"] = "NAK";
        out["code"] = wire::nak_code_name(nak.value);
    }
    return out;
}

json transitions_json(const transport::QpJournal& journal, Clock::time_point now) {
    json out = json::array();
    for (const auto& t : journal.transitions) {
        json entry = moment(t.at, now);
        entry["from"] = qp_state_name(t.from);
        entry["to"] = qp_state_name(t.to);
        entry["attr_mask"] = t.attr_mask;
        entry["attrs"] = qp_attr_mask_names(static_cast<uint32_t>(t.attr_mask));
        entry["cause"] = t.cause;
        out.push_back(std::move(entry));
    }
    return out;
}

// The cause of the newest move to ERR, if the QP is there because of one.
json last_error_json(const Qp& qp, Clock::time_point now) {
    const auto& transitions = qp.journal.transitions;
    if (qp.attr.qp_state != IBV_QPS_ERR || transitions.empty() ||
        transitions.back().to != IBV_QPS_ERR) {
        return nullptr;
    }
    json out = moment(transitions.back().at, now);
    out["what"] = transitions.back().cause;
    return out;
}

bool connected(ibv_qp_type type) {
    return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND ||
           type == IBV_QPT_XRC_RECV;
}

// One QP's object; `comm` is its owner's name.
json qp_json(const Device& device, const Qp& qp, pid_t pid, const std::string& comm,
             Clock::time_point now) {
    const ibv_qp_attr& attr = qp.attr;
    const RequesterState& r = qp.requester;
    const ResponderState& s = qp.responder;
    const bool ready_to_receive = attr.qp_state >= IBV_QPS_RTR;
    const bool ready_to_send = attr.qp_state >= IBV_QPS_RTS;
    json out = {
        {"device", device.name()},
        {"qpn", qp.qpn},
        {"type", qp_type_name(qp.type)},
        {"state", qp_state_name(attr.qp_state)},
        {"previous_state", qp.journal.transition_count
                               ? json(qp_state_name(qp.journal.previous_state()))
                               : json(nullptr)},
        {"pid", pid},
        {"comm", comm},
        {"port", attr.port_num},
        // A UD QP has no path: its datagrams use the port's MTU.
        {"path_mtu",
         ready_to_receive && attr.path_mtu ? json(128 << attr.path_mtu) : json(nullptr)},
        {"send_queue", send_queue_json(qp)},
        {"receive_queue", receive_queue_json(qp)},
        {"transitions", transitions_json(qp.journal, now)},
        {"transition_count", qp.journal.transition_count},
        {"last_nak", qp.journal.last_nak ? nak_json(*qp.journal.last_nak, now) : json(nullptr)},
        {"last_error", last_error_json(qp, now)},
    };
    if (connected(qp.type) && ready_to_receive) {
        out["peer"] = {{"address", wire::IpAddress(attr.ah_attr.grh.dgid.raw).text()},
                       {"qpn", attr.dest_qp_num}};
    } else {
        out["peer"] = nullptr;
    }
    // The PSNs the wire uses once the QP runs; before that, what was set.
    out["sq_psn"] = ready_to_send ? r.next_psn : attr.sq_psn;
    out["expected_psn"] = ready_to_receive ? s.expected_psn : attr.rq_psn;
    if (transport::is_reliable(qp.type) && ready_to_send) {
        out["unacked"] = {{"first", r.unacked_psn},
                          {"end", r.sent_psn_end},
                          {"count", wire::psn_diff(r.sent_psn_end, r.unacked_psn)}};
        out["reads_outstanding"] = r.reads_in_flight;
        out["max_rd_atomic"] = attr.max_rd_atomic;
        out["retries_left"] = r.retries_left;
        out["retry_cnt"] = attr.retry_cnt;
        out["rnr_retries_left"] = attr.rnr_retry == 7 ? json("infinite") : json(r.rnr_retries_left);
        out["rnr_retry"] = attr.rnr_retry;
        out["timeout"] = attr.timeout;
    }
    if (transport::is_reliable(qp.type) && ready_to_receive) {
        out["responder_resources"] = s.resources.size();
        out["max_dest_rd_atomic"] = attr.max_dest_rd_atomic;
        out["min_rnr_timer"] = attr.min_rnr_timer;
    }
    out["timer"] = timer_json(qp, now);
    return out;
}

}  // namespace

json qp_snapshot(const ClientList& clients, const QpSelection& selection, Clock::time_point now) {
    json qps = json::array();
    std::set<const Qp*> seen;  // a shared XRC_TGT QP is in every holder's table
    std::vector<std::pair<std::pair<std::string, uint32_t>, json>> rows;
    for (const auto& [pid, context] : clients) {
        const Device& device = context->device();
        if (!selection.device.empty() && device.name() != selection.device) {
            continue;
        }
        std::optional<std::string> comm;  // read once per client, when it has a QP to show
        for (const auto& [handle, qp] : context->qps().all()) {
            if ((selection.qpn && qp->qpn != *selection.qpn) || !seen.insert(qp.get()).second) {
                continue;
            }
            if (!comm) {
                comm = comm_of(pid);
            }
            rows.push_back({{device.name(), qp->qpn}, qp_json(device, *qp, pid, *comm, now)});
        }
    }
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& row : rows) {
        qps.push_back(std::move(row.second));
    }
    return {{"qps", std::move(qps)}};
}

}  // namespace uroce
