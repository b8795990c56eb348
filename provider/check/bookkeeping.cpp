// Check mode's bookkeeping: each QP's posted work as a NIC's queues hold
// it (until its completion, or a later signaled one's, is polled), the
// QPs' states and how they got there, and the objects alive.
#include "check.h"
#include "checker.h"
#include "process_memory.h"
#include "symbolize.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "protocol/client.h"
#include "protocol/work_requests.h"
#include "qp/qp_transitions.h"

namespace uroce::check {
namespace {

// What a send opcode does (work_requests.h), kSend for one the table lacks
// (refused before check mode sees it).
wr::Kind kind_of(ibv_wr_opcode opcode) {
    const wr::OpcodeInfo* row = wr::opcode_info(opcode);
    return row ? row->kind : wr::Kind::kSend;
}

// The send opcodes whose gather list the NIC writes into: reads and atomics.
bool writes_locally(ibv_wr_opcode opcode) {
    return wr::returns_data(kind_of(opcode));
}

// Those whose gather list the NIC reads, when it transmits and again if it
// retransmits: sends and writes.
bool reads_locally(ibv_wr_opcode opcode) {
    const wr::Kind kind = kind_of(opcode);
    return kind == wr::Kind::kSend || kind == wr::Kind::kWrite;
}

// "RESET -> INIT -> RTR" from what the program did, or that it did nothing.
std::string how_it_got_there(const QpState& qp, ibv_qp_state now) {
    if (qp.history.empty()) {
        return std::string("it has been in ") + qp_state_name(now) +
               " since ibv_create_qp (no ibv_modify_qp moved it)";
    }
    std::string path = "ibv_modify_qp moved it ";
    for (size_t i = 0; i < qp.history.size(); ++i) {
        path += (i ? ", then " : "") + qp.history[i];
    }
    return path;
}

Posted posted(uint64_t wr_id, bool signaled, const ibv_sge* sges, int count) {
    Posted work{wr_id, signaled, {}};
    if (count > 0 && sges) {
        work.sges.assign(sges, sges + count);
    }
    return work;
}

bool names_key(const Posted& work, uint32_t lkey) {
    return std::any_of(work.sges.begin(), work.sges.end(),
                       [lkey](const ibv_sge& sge) { return sge.lkey == lkey && sge.length; });
}

constexpr const char* kOverrunNic =
    "each completion is written into the CQ when its work completes, polled or not; past the "
    "CQ's size it overruns: IBV_EVENT_CQ_ERR, and its QPs go to ERR";
constexpr const char* kOverrunFix =
    "create the CQ with room for every completion that can be due at once (the signaled sends "
    "and receives the program keeps posted on its queues, SRQ receives included), or poll it "
    "before posting more";

size_t signaled_count(const std::deque<Posted>& sends) {
    return std::count_if(sends.begin(), sends.end(),
                         [](const Posted& work) { return work.signaled; });
}

// The work requests since the last signaled one, at the queue's end.
size_t unsignaled_run(const std::deque<Posted>& sends) {
    size_t run = 0;
    for (auto it = sends.rbegin(); it != sends.rend() && !it->signaled; ++it) {
        ++run;
    }
    return run;
}

}  // namespace

std::string hex(uint64_t value) {
    char text[24];
    snprintf(text, sizeof(text), "0x%" PRIx64, value);
    return text;
}

uint64_t gathered_length(const ibv_send_wr& wr) {
    uint64_t length = 0;
    for (int i = 0; i < wr.num_sge && wr.sg_list; ++i) {
        length += wr.sg_list[i].length;
    }
    return length;
}

// "element 0 of wr_id 0x5 (64 bytes at 0x7f.., lkey 0x100)"
std::string element(int index, uint64_t wr_id, const ibv_sge& sge) {
    return "element " + std::to_string(index) + " of wr_id " + hex(wr_id) + " (" +
           std::to_string(sge.length) + " bytes at " + hex(sge.addr) + ", lkey " + hex(sge.lkey) +
           ")";
}

CheckState::CheckState(Mode mode, ControlClient& client, const char* device)
    : mode_(mode), opener_(getpid()), client_(client), device_(device), checkers_(make_checkers()) {
    load_symbolizer();
}

CheckState::~CheckState() = default;

void CheckState::report(const Finding& finding) {
    deliver(mode_, client_, device_, finding);
}

void CheckState::report_once(QpState& qp, const Finding& finding) {
    if (qp.reported & bit(finding.rule)) {
        return;
    }
    qp.reported |= bit(finding.rule);
    report(finding);
}

QpState* CheckState::find_qp(uint32_t qpn) {
    const auto it = by_qpn_.find(qpn);
    return it == by_qpn_.end() ? nullptr : &qps_[it->second];
}

void CheckState::created(const void* object, std::string description) {
    Held locked(lock_);
    live_[object] = {next_object_++, std::move(description)};
}

void CheckState::destroyed(const void* object) {
    Held locked(lock_);
    live_.erase(object);
    if (const auto it = srq_receives_.find(object); it != srq_receives_.end()) {
        for (const Posted& work : it->second) {
            release_landings(work);
        }
        srq_receives_.erase(it);
    }
    srq_reported_.erase(object);
    cqs_.erase(static_cast<ibv_cq*>(const_cast<void*>(object)));
    async_events_.erase(object);
    cq_pending_.erase(object);
    cqs_reported_.erase(object);
    each_checker([&](Checker& c) { c.destroyed(*this, object); });
}

void CheckState::qp_created(ibv_qp* qp, const ibv_qp_cap& asked, const ibv_qp_cap& granted,
                            bool signal_all, queues::RingHeader* ring) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    state.ring = ring;
    state.findings_seen = ring ? ring->check_findings.load(std::memory_order_acquire) : 0;
    state.qpn = qp->qp_num;
    state.handle = qp->handle;
    state.type = qp->qp_type;
    state.sq_depth = granted.max_send_wr;
    state.asked = asked;
    state.granted = granted;
    state.send_cq = qp->send_cq;
    state.recv_cq = qp->recv_cq;
    state.srq = qp->srq;
    state.signal_all = signal_all;
    by_qpn_[qp->qp_num] = qp;
    live_[qp] = {next_object_++, "QP " + hex(qp->qp_num) + " (" + qp_type_name(qp->qp_type) + ")"};
    each_checker([&](Checker& c) { c.qp_created(*this, state); });
}

void CheckState::add_pending(const ibv_cq* cq, int64_t completions, uint32_t qpn) {
    if (!cq) {
        return;
    }
    uint64_t& pending = cq_pending_[cq];
    pending = completions < 0 && pending < static_cast<uint64_t>(-completions)
                  ? 0
                  : pending + completions;
    if (completions <= 0 || pending <= static_cast<uint64_t>(std::max(cq->cqe, 0)) ||
        cqs_reported_.count(cq)) {
        return;
    }
    cqs_reported_.insert(cq);
    uint64_t sends = 0;
    uint64_t receives = 0;
    for (const auto& [ibqp, qp] : qps_) {
        if (qp.send_cq == cq) {
            sends += signaled_count(qp.sends);
        }
        if (qp.recv_cq == cq) {
            receives += qp.receives.size();
        }
    }
    report({Rule::kCqOverrun, qpn,
            "the CQ of " + std::to_string(cq->cqe) + " entries may have to hold " +
                std::to_string(pending) + " completions before the program polls it: " +
                std::to_string(sends) + " signaled send(s) and " + std::to_string(receives) +
                " receive(s) are posted on the queues that complete into it and not polled.",
            kOverrunNic, kOverrunFix});
}

void CheckState::mr_created(const ibv_mr* mr, uint64_t iova, int access, bool process_memory) {
    created(mr, "MR lkey " + hex(mr->lkey) + ", " + std::to_string(mr->length) + " bytes at " +
                    hex(reinterpret_cast<uintptr_t>(mr->addr)));
    Held locked(lock_);
    const auto addr = reinterpret_cast<uintptr_t>(mr->addr);
    mrs_[mr->lkey] = {mr->pd->handle, iova, mr->length, access, addr, process_memory};
    if (process_memory) {
        watch_span(Range{addr, addr + mr->length});
    }
}

void CheckState::mr_reregistered(uint32_t old_lkey, uint32_t new_lkey, int flags, const ibv_pd* pd,
                                 uint64_t iova, uint64_t length, int access) {
    Held locked(lock_);
    const auto it = mrs_.find(old_lkey);
    if (it == mrs_.end()) {
        return;
    }
    MrKey key = it->second;
    mrs_.erase(it);
    each_checker([&](Checker& c) { c.mr_gone(*this, old_lkey); });
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        key.pd_handle = pd->handle;
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        key.iova = iova;
        key.addr = iova;
        key.length = length;
        key.given_back.clear();  // it holds the pages mapped there now
        key.known_mapped = kNotKnown;
        if (key.process_memory) {
            watch_span(Range{key.addr, key.addr + key.length});
        }
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
        key.access = access;
    }
    mrs_[new_lkey] = key;
}

void CheckState::mr_destroyed(const ibv_mr* mr) {
    destroyed(mr);
    Held locked(lock_);
    mrs_.erase(mr->lkey);
    each_checker([&](Checker& c) { c.mr_gone(*this, mr->lkey); });
}

const MrKey* CheckState::mr_of(uint32_t lkey) const {
    const auto it = mrs_.find(lkey);
    return it == mrs_.end() ? nullptr : &it->second;
}

void CheckState::forking(bool fork_safe) {
    Held locked(lock_);
    each_checker([&](Checker& c) { c.forking(*this, fork_safe); });
}

void CheckState::check_keys(QpState& qp, const char* owner, const ibv_pd* pd, const ibv_sge* sges,
                            int count, bool writes, const char* verb, uint64_t wr_id) {
    for (int i = 0; i < count && !(qp.reported & bit(Rule::kBadLocalKey)); ++i) {
        const ibv_sge& sge = sges[i];
        if (sge.length == 0) {
            continue;
        }
        const auto it = mrs_.find(sge.lkey);
        std::string wrong;
        if (it == mrs_.end()) {
            wrong = "names no MR of this device context";
        } else if (pd && it->second.pd_handle != pd->handle) {
            wrong = std::string("is an MR of another protection domain than the ") + owner + "'s";
        } else if (sge.addr < it->second.iova || sge.addr - it->second.iova > it->second.length ||
                   sge.length > it->second.length - (sge.addr - it->second.iova)) {
            wrong = "covers " + std::to_string(it->second.length) + " bytes from " +
                    hex(it->second.iova) + ", and the element reaches beyond them";
        } else if (writes && !(it->second.access & IBV_ACCESS_LOCAL_WRITE)) {
            wrong = "lacks IBV_ACCESS_LOCAL_WRITE, and the NIC writes into this element";
        } else {
            check_given_back(qp, it->second, i, sge, verb, wr_id);
            continue;
        }
        report_once(
            qp, {Rule::kBadLocalKey, qp.qpn,
                 std::string(verb) + ": element " + std::to_string(i) + " of wr_id " + hex(wr_id) +
                     " (" + std::to_string(sge.length) + " bytes at " + hex(sge.addr) + ", lkey " +
                     hex(sge.lkey) + "): the lkey " + wrong + ".",
                 "the work request completes with IBV_WC_LOC_PROT_ERR (or "
                 "IBV_WC_LOC_LEN_ERR) when the NIC reaches it, and the QP goes to ERR",
                 std::string("name each element by the lkey of an MR of the ") + owner +
                     "'s PD that covers it, registered with IBV_ACCESS_LOCAL_WRITE where the "
                     "NIC writes"});
    }
}

void CheckState::qp_modified(ibv_qp* qp, ibv_qp_state from, const ibv_qp_attr& attr, int mask) {
    const ibv_qp_state to = (mask & IBV_QP_STATE) ? attr.qp_state : from;
    // The port's active MTU, asked before the lock (a verb of its own).
    ibv_port_attr port{};
    const bool port_known =
        (mask & IBV_QP_PATH_MTU) &&
        ibv_query_port(qp->context, (mask & IBV_QP_PORT) ? attr.port_num : 1, &port) == 0;
    {
        Held locked(lock_);
        QpState& state = qps_[qp];
        if (mask & IBV_QP_RNR_RETRY) {
            state.rnr_retry = attr.rnr_retry;
        }
        each_checker([&](Checker& c) {
            c.qp_modified(*this, state, from, attr, mask, port_known ? &port : nullptr);
        });
        if (!(mask & IBV_QP_STATE)) {
            return;
        }
        constexpr size_t kHistory = 8;
        if (state.history.size() == kHistory) {
            state.history.erase(state.history.begin());
        }
        state.history.push_back(std::string(qp_state_name(from)) + " -> " + qp_state_name(to));
        if (to == IBV_QPS_RESET) {
            // The queues are emptied, and what was posted is gone with them.
            forget_posted(state);
            state.error_cause.clear();
        }
    }
    if (to == IBV_QPS_RTR || to == IBV_QPS_RTS) {
        check_peer(qp);
    }
}

void CheckState::forget_posted(QpState& qp) {
    add_pending(qp.send_cq, -static_cast<int64_t>(signaled_count(qp.sends)), qp.qpn);
    add_pending(qp.recv_cq, -static_cast<int64_t>(qp.receives.size()), qp.qpn);
    for (const std::deque<Posted>* queue : {&qp.sends, &qp.receives}) {
        for (const Posted& work : *queue) {
            release_landings(work);
        }
    }
    qp.sends.clear();
    qp.receives.clear();
    publish_retired(qp);
}

void CheckState::publish_retired(QpState& qp) {
    // The sends before the oldest still on the queue.
    const uint32_t retired = qp.sends.empty() ? qp.sends_posted : qp.sends.front().seq - 1;
    if (!qp.ring || retired == qp.retired) {
        return;
    }
    qp.retired = retired;
    const uint32_t next = qp.ring->check_retires.load(std::memory_order_relaxed);
    qp.ring->check_retired[next % queues::kCheckRetireLog].store(
        uint64_t{retired} << 32 | queues::check_clock_us(), std::memory_order_release);
    qp.ring->check_retires.store(next + 1, std::memory_order_release);
}

void CheckState::qp_destroyed(ibv_qp* qp, uint32_t removed_send, uint32_t removed_recv) {
    Held locked(lock_);
    live_.erase(qp);
    QpState& state = qps_[qp];
    each_checker([&](Checker& c) {
        c.qp_destroyed(*this, state, qp->send_cq, removed_send);
        c.qp_destroyed(*this, state, qp->recv_cq, removed_recv);
    });
    forget_posted(state);
    by_qpn_.erase(qp->qp_num);
    qps_.erase(qp);
    async_events_.erase(qp);
}

void CheckState::posting_send(ibv_qp* qp) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    const ibv_qp_state now = qp->state;
    each_checker([&](Checker& c) { c.posting(*this, state, now, true); });
    if (now == IBV_QPS_RESET || now == IBV_QPS_INIT || now == IBV_QPS_RTR) {
        report_once(state,
                    {Rule::kWrongStateSend, state.qpn,
                     std::string("ibv_post_send on a QP in ") + qp_state_name(now) + ": " +
                         how_it_got_there(state, now) + ".",
                     "a QP sends from RTS only: the post fails with EINVAL (rxe, mlx5) and "
                     "nothing is sent",
                     "move the QP to RTR and then RTS (ibv_modify_qp) before posting sends"});
    } else if (!state.error_cause.empty()) {
        report_once(state,
                    {Rule::kWrongStateSend, state.qpn,
                     "ibv_post_send on a QP in ERR: " + state.error_cause + ".",
                     "work posted to a QP in ERR is never executed: it completes at once with "
                     "IBV_WC_WR_FLUSH_ERR",
                     "check every completion's status; after an error, reset the QP (RESET, "
                     "INIT, RTR, RTS) or create a new one before posting again"});
    }
}

void CheckState::posting_recv(ibv_qp* qp) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    each_checker([&](Checker& c) { c.posting(*this, state, qp->state, false); });
    if (qp->state == IBV_QPS_RESET) {
        report_once(state,
                    {Rule::kWrongStateRecv, state.qpn,
                     "ibv_post_recv on a QP in RESET: " + how_it_got_there(state, qp->state) + ".",
                     "a QP in RESET has no receive queue to post to: the post fails with EINVAL",
                     "move the QP to INIT (ibv_modify_qp) before posting receives"});
    }
}

CheckState::Posting CheckState::posted_send(ibv_qp* qp, const ibv_send_wr& wr, const void* caller) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    // An atomic write's 8 bytes are read when posted, whatever its flags
    // (the provider carries them inline, as rxe).
    const bool inline_data = (wr.send_flags & IBV_SEND_INLINE) || wr.opcode == wr::kWrAtomicWrite;
    if (!inline_data) {
        check_keys(state, "QP", qp->pd, wr.sg_list, wr.num_sge, writes_locally(wr.opcode),
                   "ibv_post_send", wr.wr_id);
    }
    if (qp->qp_type == IBV_QPT_UD && wr.wr.ud.ah) {
        check_ud_destination(state, wr);
    }
    each_checker([&](Checker& c) { c.posted_send(*this, state, wr); });
    Posted work = posted(wr.wr_id, state.signal_all || (wr.send_flags & IBV_SEND_SIGNALED),
                         inline_data ? nullptr : wr.sg_list, wr.num_sge);
    work.posted_at = caller;
    work.seq = ++state.sends_posted;
    const wr::Kind kind = kind_of(wr.opcode);
    if (kind == wr::Kind::kWrite || kind == wr::Kind::kRead) {
        work.rkey = wr.wr.rdma.rkey;
    } else if (kind == wr::Kind::kAtomic) {
        work.rkey = wr.wr.atomic.rkey;
    } else if (wr.opcode == IBV_WR_BIND_MW) {
        work.window = wr.bind_mw.mw;
    }
    if (!inline_data && writes_locally(wr.opcode)) {
        work.lands = claim_landings(
            state.reported, qp, wr.sg_list, wr.num_sge,
            kind == wr::Kind::kRead ? "an RDMA READ's destination" : "an atomic's result buffer",
            "ibv_post_send", wr.wr_id, state.qpn);
    }
    const bool readable =
        inline_data || !reads_locally(wr.opcode) || sample_sources(state, work, "ibv_post_send");
    const Posting posting{readable, work.seq, queues::check_clock_us()};
    state.sends.push_back(std::move(work));
    if (state.sends.back().signaled) {
        add_pending(state.send_cq, 1, state.qpn);
    }
    // Decided by the NIC's rule alone (a slot is freed when a signaled
    // completion at or after it is polled), whatever the ring's state: at
    // the post that fills the queue with work no completion can free, or
    // at one beyond its depth.
    if (state.sends.size() < state.sq_depth) {
        return posting;  // the common case, without walking the queue
    }
    const size_t run = unsignaled_run(state.sends);
    const bool stuck = state.sends.size() == state.sq_depth && run == state.sends.size();
    if (state.sends.size() == state.sq_depth && !stuck) {
        return posting;
    }
    report_once(
        state,
        differing(
            {Rule::kUnsignaled, state.qpn,
             "ibv_post_send: " + std::to_string(state.sends.size()) +
                 " work requests are on a send queue of " + std::to_string(state.sq_depth) + ", " +
                 std::to_string(run) + " of them posted since the last signaled one" +
                 (run == state.sends.size() ? " (none was signaled)" : "") +
                 (stuck ? ": the queue is full, and no completion can free it." : "."),
             "send queue slots are freed only when a completion for a signaled work request at or "
             "after them is polled (mlx5): with none the queue fills and ibv_post_send fails with "
             "ENOMEM",
             "set IBV_SEND_SIGNALED on at least one work request in every max_send_wr, and poll "
             "its "
             "completion before the queue fills"},
            Difference::kUnsignaledSlots));
    return posting;
}

void CheckState::unposted_sends(ibv_qp* qp, uint32_t count) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    for (; count && !state.sends.empty(); --count, --state.sends_posted) {
        add_pending(state.send_cq, state.sends.back().signaled ? -1 : 0, state.qpn);
        release_landings(state.sends.back());
        state.sends.pop_back();
    }
}

void CheckState::posted_recv(ibv_qp* qp, const ibv_recv_wr& wr) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    check_keys(state, "QP", qp->pd, wr.sg_list, wr.num_sge, true, "ibv_post_recv", wr.wr_id);
    Posted work = posted(wr.wr_id, true, wr.sg_list, wr.num_sge);
    work.lands = claim_landings(state.reported, qp, wr.sg_list, wr.num_sge, "a receive",
                                "ibv_post_recv", wr.wr_id, state.qpn);
    state.receives.push_back(std::move(work));
    add_pending(state.recv_cq, 1, state.qpn);
    each_checker([&](Checker& c) { c.posted_recv(*this, &state, wr); });
}

void CheckState::posted_srq_recv(ibv_srq* srq, const ibv_recv_wr& wr) {
    Held locked(lock_);
    QpState none;  // an SRQ's kinds reported are kept in srq_reported_
    none.reported = srq_reported_[srq];
    check_keys(none, "SRQ", srq->pd, wr.sg_list, wr.num_sge, true, "ibv_post_srq_recv", wr.wr_id);
    Posted work = posted(wr.wr_id, true, wr.sg_list, wr.num_sge);
    work.lands = claim_landings(none.reported, srq, wr.sg_list, wr.num_sge, "a receive",
                                "ibv_post_srq_recv", wr.wr_id, 0);
    srq_receives_[srq].push_back(std::move(work));
    srq_reported_[srq] = none.reported;
    each_checker([&](Checker& c) { c.posted_recv(*this, nullptr, wr); });
}

void CheckState::refused_send(ibv_qp* qp, const ibv_send_wr& bad, int error) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    each_checker([&](Checker& c) { c.refused(*this, state, {error, &bad, nullptr}); });
}

void CheckState::refused_recv(ibv_qp* qp, const ibv_recv_wr& bad, int error) {
    Held locked(lock_);
    QpState& state = qps_[qp];
    each_checker([&](Checker& c) { c.refused(*this, state, {error, nullptr, &bad}); });
}

void CheckState::polling(const ibv_cq* cq) {
    Held locked(lock_);
    each_checker([&](Checker& c) { c.polling(*this, cq); });
}

void CheckState::completed(const ibv_wc& wc) {
    Held locked(lock_);
    QpState* qp = find_qp(wc.qp_num);
    each_checker([&](Checker& c) { c.completed(*this, qp, wc); });
    if (qp && wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR &&
        qp->error_cause.empty()) {
        qp->error_cause = std::string("a completion with status ") + ibv_wc_status_str(wc.status) +
                          " (wr_id " + hex(wc.wr_id) + ") moved it there";
    }
    if (wc.opcode & IBV_WC_RECV) {
        // Its own receive queue, its SRQ, or (an XRC target QP, or one of
        // another process) the SRQ the sender named: one holding the wr_id.
        auto take = [&](std::deque<Posted>& queue) {
            const auto it = std::find_if(queue.begin(), queue.end(), [&wc](const Posted& work) {
                return work.wr_id == wc.wr_id;
            });
            if (it == queue.end()) {
                return false;
            }
            retire(qp, *it, &wc);
            queue.erase(it);
            return true;
        };
        if (qp && !qp->srq && take(qp->receives)) {
            add_pending(qp->recv_cq, -1, qp->qpn);
        } else if (!(qp && qp->srq && take(srq_receives_[qp->srq]))) {
            for (auto& [srq, queue] : srq_receives_) {
                if (take(queue)) {
                    break;
                }
            }
        }
        return;
    }
    if (!qp) {
        return;
    }
    if (qp->ring && qp->ring->check_findings.load(std::memory_order_acquire) != qp->findings_seen) {
        ask_findings(*qp);
    }
    std::deque<Posted>& sends = qp->sends;
    if (wc.status != IBV_WC_SUCCESS) {
        // An error or a flush completes one work request, signaled or not.
        if (!sends.empty()) {
            add_pending(qp->send_cq, sends.front().signaled ? -1 : 0, qp->qpn);
            retire(qp, sends.front(), &wc);
            sends.pop_front();
            publish_retired(*qp);
        }
        return;
    }
    // A signaled completion retires its work request and every one before it.
    while (!sends.empty()) {
        const bool signaled = sends.front().signaled;
        retire(qp, sends.front(), nullptr);
        sends.pop_front();
        if (signaled) {
            add_pending(qp->send_cq, -1, qp->qpn);
            break;
        }
    }
    publish_retired(*qp);
}

void CheckState::retire(QpState* qp, const Posted& work, const ibv_wc* wc) {
    release_landings(work);
    if (!wc || wc->status == IBV_WC_SUCCESS) {
        if (qp) {
            compare_sources(*qp, work);
        }
    } else if (wc->status != IBV_WC_WR_FLUSH_ERR) {
        explain_error(qp, work, *wc);
    }
}

void CheckState::deallocating_mw(const ibv_mw* mw) {
    Held locked(lock_);
    for (const auto& [ibqp, qp] : qps_) {
        const auto it = std::find_if(qp.sends.begin(), qp.sends.end(), [mw](const Posted& work) {
            return work.window == mw || (work.rkey && work.rkey == mw->rkey);
        });
        if (it == qp.sends.end()) {
            continue;
        }
        report({Rule::kDeregInUse, qp.qpn,
                "ibv_dealloc_mw of the memory window with rkey " + hex(mw->rkey) +
                    " while a send work request (wr_id " + hex(it->wr_id) +
                    ") posted on this QP names it (" +
                    (it->window == mw ? "a bind of it" : "an RDMA or atomic through its rkey") +
                    ") and has not completed.",
                "the window is gone at once: the bind, or the access through it, fails with a "
                "protection error and the QP goes to ERR",
                "poll the completions of the work requests that name a window before "
                "deallocating it"});
        return;
    }
}

void CheckState::deregistering(const ibv_mr* mr) {
    Held locked(lock_);
    const Posted* work = nullptr;
    const char* kind = nullptr;   // of work request
    const char* place = nullptr;  // where it is posted
    uint32_t qpn = 0;
    auto find_in = [&](const std::deque<Posted>& queue, const char* queue_kind,
                       const char* queue_place, uint32_t queue_qpn) {
        const auto it = std::find_if(queue.begin(), queue.end(), [mr](const Posted& posted) {
            return names_key(posted, mr->lkey);
        });
        if (!work && it != queue.end()) {
            work = &*it;
            kind = queue_kind;
            place = queue_place;
            qpn = queue_qpn;
        }
    };
    for (auto it = qps_.begin(); it != qps_.end() && !work; ++it) {
        find_in(it->second.sends, "send", "this QP", it->second.qpn);
        find_in(it->second.receives, "receive", "this QP", it->second.qpn);
    }
    for (const auto& [srq, queue] : srq_receives_) {
        find_in(queue, "receive", "an SRQ", 0);
    }
    if (!work) {
        return;
    }
    report({Rule::kDeregInUse, qpn,
            "ibv_dereg_mr of the MR with lkey " + hex(mr->lkey) + " (" +
                std::to_string(mr->length) + " bytes at " +
                hex(reinterpret_cast<uintptr_t>(mr->addr)) + ") while a " + kind +
                " work request (wr_id " + hex(work->wr_id) + ") posted on " + place +
                " names it and has not completed.",
            "the MR is gone at once: when the NIC reaches that work request it fails with a "
            "local protection error and the QP goes to ERR, or, if the key is reused, it reads "
            "or writes memory the program no longer meant",
            "poll the completions of the work requests that use an MR (or move the QP to ERR, or "
            "destroy the SRQ, and drain them) before deregistering it"});
}

void CheckState::async_event_got(const ibv_async_event& event) {
    const void* object = nullptr;
    switch (event.event_type) {
        case IBV_EVENT_CQ_ERR:
            object = event.element.cq;
            break;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            object = event.element.srq;
            break;
        case IBV_EVENT_WQ_FATAL:
            object = event.element.wq;
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            object = event.element.qp;
            break;
        default:
            return;  // a port's or the device's: nothing waits for it
    }
    Held locked(lock_);
    AsyncEvents& events = async_events_[object];
    ++events.count;
    events.last = event.event_type;
    if (event.event_type == IBV_EVENT_CQ_ERR && cqs_reported_.insert(object).second) {
        // An overrun the posted work did not foretell (SRQ receives, say).
        report({Rule::kCqOverrun, 0,
                "ibv_get_async_event: IBV_EVENT_CQ_ERR: the CQ of " +
                    std::to_string(event.element.cq->cqe) +
                    " entries overran: more completions came into it than it holds before the "
                    "program polled them.",
                kOverrunNic, kOverrunFix});
    }
}

void CheckState::report_leaks(bool closing) {
    if (getpid() != opener_) {
        return;  // a forked child's exit: the objects are its parent's
    }
    std::vector<std::pair<uint64_t, std::string>> alive;
    {
        Held locked(lock_);
        for (const auto& [object, entry] : live_) {
            alive.push_back(entry);
        }
    }
    if (alive.empty()) {
        return;
    }
    std::sort(alive.begin(), alive.end());
    std::string what = closing ? "ibv_close_device with " : "the program exits with ";
    what += closing ? "" : "the device open and ";
    what += std::to_string(alive.size()) + " object(s) still alive:";
    for (const auto& [order, description] : alive) {
        what += "\n    " + description;
    }
    report({Rule::kLeak, 0, what,
            "the kernel destroys them when the device's file closes; a long-running program "
            "that leaks them runs out of the NIC's QPs, CQs and pinned memory",
            "destroy each object (ibv_destroy_qp, ibv_dereg_mr, ibv_destroy_cq, "
            "ibv_dealloc_pd, ...) and close the device before exiting"});
}

}  // namespace uroce::check
