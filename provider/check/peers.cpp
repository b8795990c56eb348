// Check mode's questions to the daemon, which sees both ends of a
// connection between its devices and every QP's work: how a QP and its
// peer disagree, whether a UD destination takes a datagram's Q_Key, and
// what it found about a QP's WRITEs.
#include <string.h>

#include <algorithm>

#include "check.h"
#include "protocol/client.h"

namespace uroce::check {

void CheckState::check_peer(ibv_qp* qp) {
    rpc::CheckPeerReply reply{};
    if (client_.call(rpc::CheckPeerRequest{qp->handle, rpc::PeerQuestion::kAttributes, 0, 0, 0, 0},
                     &reply) != 0 ||
        !reply.text[0]) {
        return;  // no peer of this daemon, both ends agree, or the daemon is gone
    }
    {
        Held locked(lock_);
        QpState& state = qps_[qp];
        if (state.reported & bit(Rule::kPeerAttributes)) {
            return;
        }
        state.reported |= bit(Rule::kPeerAttributes);
    }
    report({Rule::kPeerAttributes, qp->qp_num,
            "ibv_modify_qp: " + std::string(reply.text, strnlen(reply.text, sizeof(reply.text))),
            "each end does what it was told: the disagreement shows later as retries, NAKs or a "
            "QP in ERR, far from the ibv_modify_qp that caused it",
            "set each end from the values the other end sent: sq_psn to the peer's rq_psn, one "
            "path_mtu on both (the smaller port's active MTU), max_rd_atomic at most the peer's "
            "max_dest_rd_atomic"});
}

void CheckState::check_ud_destination(QpState& qp, const ibv_send_wr& wr) {
    constexpr size_t kUdDestinationsAsked = 1024;
    const auto destination =
        std::make_tuple(wr.wr.ud.ah->handle, wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey);
    if ((qp.reported & bit(Rule::kUdQkey)) || ud_asked_.size() == kUdDestinationsAsked ||
        !ud_asked_.insert(destination).second) {
        return;
    }
    rpc::CheckPeerReply reply{};
    if (client_.call(
            rpc::CheckPeerRequest{qp.handle, rpc::PeerQuestion::kUdQkey, wr.wr.ud.ah->handle,
                                  wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey, 0},
            &reply) != 0 ||
        !reply.text[0]) {
        return;
    }
    report_once(qp, {Rule::kUdQkey, qp.qpn,
                     "ibv_post_send on this UD QP to QP " + hex(wr.wr.ud.remote_qpn) +
                         " with remote_qkey " + hex(wr.wr.ud.remote_qkey) + ": " +
                         std::string(reply.text, strnlen(reply.text, sizeof(reply.text))) + ".",
                     "the receiving QP drops a datagram whose Q_Key is not its own, silently: the "
                     "sender's completion is a success, and the receiver waits for ever",
                     "send with the Q_Key the receiving QP was given (ibv_modify_qp's qkey, or "
                     "rdma_cm's), or create both with the same one"});
}

void CheckState::ask_findings(QpState& qp) {
    // What the daemon finds about a QP's sends as it runs them, each asked
    // for by its question and reported as its rule.
    struct Asked {
        rpc::PeerQuestion question;
        Rule rule;
        const char* nic;
        const char* fix;
    };
    static constexpr Asked kAsked[] = {
        {rpc::PeerQuestion::kWriteRace, Rule::kWriteRace,
         "WRITEs of different QPs are not ordered with each other: the bytes of both land in "
         "either order, or interleaved, and the memory holds a mix that changes from run to run",
         "poll one WRITE's completion before posting the other (and tell the other writer), "
         "send both from one QP (which orders them), or write disjoint ranges"},
        {rpc::PeerQuestion::kRnrWait, Rule::kRnrWait,
         "the requester waits the responder's RNR timer after each RNR NAK before it sends "
         "again (0, the longest, is 655.36 ms: what rdma_cm sets; 12 is 0.64 ms): a receiver "
         "that posts its receives a moment late costs the sender that whole time, on a NIC as "
         "here",
         "post receives before the sends that need them can arrive (before the peer is told "
         "the QP is ready), or give the receiving QP a short min_rnr_timer at RTR (12: 0.64 ms)"},
    };
    qp.findings_seen = qp.ring->check_findings.load(std::memory_order_acquire);
    for (const Asked& asked : kAsked) {
        rpc::CheckPeerReply reply{};
        if ((qp.reported & bit(asked.rule)) ||
            client_.call(rpc::CheckPeerRequest{qp.handle, asked.question, 0, 0, 0, 0}, &reply) !=
                0 ||
            !reply.text[0]) {
            continue;
        }
        const auto work =
            std::find_if(qp.sends.begin(), qp.sends.end(),
                         [&reply](const Posted& one) { return one.seq == reply.seq; });
        Finding finding{asked.rule, qp.qpn,
                        std::string(reply.text, strnlen(reply.text, sizeof(reply.text))), asked.nic,
                        asked.fix};
        finding.posted_at = work != qp.sends.end() ? work->posted_at : nullptr;
        report_once(qp, finding);
    }
}

}  // namespace uroce::check
