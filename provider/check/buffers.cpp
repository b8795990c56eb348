// Check mode's view of the program's buffers: the ranges the NIC will write
// (receives, READ and atomic destinations) and their overlaps, send
// buffers sampled when posted and compared when completed, and memory
// gone from under an MR.
#include <string.h>

#include <algorithm>

#include "check.h"
#include "process_memory.h"
#include "protocol/client.h"
#include "qp/qp_transitions.h"

namespace uroce::check {
namespace {

// How many released landings CheckState keeps to tell the NIC's writes
// into a send's buffer from the program's.
constexpr size_t kLandedKept = 1024;

bool overlap(const Range& a, const Range& b) {
    return a.start < b.end && b.start < a.end;
}

}  // namespace

MrKey* CheckState::process_range(const ibv_sge& sge, Range& range) {
    const auto it = mrs_.find(sge.lkey);
    if (it == mrs_.end() || !it->second.process_memory || sge.length == 0) {
        return nullptr;
    }
    MrKey& key = it->second;
    if (sge.addr < key.iova || sge.addr - key.iova > key.length ||
        sge.length > key.length - (sge.addr - key.iova)) {
        return nullptr;  // bad-local-key's
    }
    range.start = key.addr + (sge.addr - key.iova);
    range.end = range.start + sge.length;
    return &key;
}

bool CheckState::readable(MrKey& mr, const Range& range) {
    // The whole MR mapped, or (part of it given back) the range alone.
    return mr_mapped({mr.addr, mr.addr + mr.length}, mr.known_mapped) || mapped(range);
}

std::vector<Range> CheckState::claim_landings(uint32_t& reported, const void* queue,
                                              const ibv_sge* sges, int count, const char* what,
                                              const char* verb, uint64_t wr_id, uint32_t qpn) {
    std::vector<Range> lands;
    for (int i = 0; i < count && sges; ++i) {
        Range range;
        if (!process_range(sges[i], range)) {
            continue;
        }
        const uint64_t from = range.start > longest_landing_ ? range.start - longest_landing_ : 0;
        for (auto it = landings_.lower_bound({from, 0});
             it != landings_.end() && it->first.start < range.end &&
             !(reported & bit(Rule::kOverlap));
             ++it) {
            if (!overlap(it->first, range) || (it->first == range && it->second.queue == queue)) {
                continue;
            }
            reported |= bit(Rule::kOverlap);
            const Landing& other = it->second;
            const uint64_t shared =
                std::min(range.end, it->first.end) - std::max(range.start, it->first.start);
            report({Rule::kOverlap, qpn,
                    std::string(verb) + ": " + element(i, wr_id, sges[i]) + " overlaps " +
                        std::to_string(shared) + " bytes of " + other.what + " (wr_id " +
                        hex(other.wr_id) +
                        (other.qpn ? ", QP " + hex(other.qpn) : std::string(", on an SRQ")) +
                        ") that has not completed: the NIC writes both.",
                    "it writes each message where its receive (or READ, or atomic) says, as it "
                    "arrives: the later one overwrites part of the earlier, and a program that "
                    "reads the first finds some of the second's bytes in it",
                    "give each receive, RDMA READ and atomic destination buffer space of its own "
                    "until its completion is polled (reusing one whole buffer for every receive "
                    "of one QP or SRQ, as a scratch buffer the program never reads, is not "
                    "reported)"});
        }
        Landing& landing = landings_[range];
        if (landing.count++ == 0) {
            landing = {1, wr_id, qpn, what, queue};
        }
        longest_landing_ = std::max(longest_landing_, range.end - range.start);
        lands.push_back(range);
    }
    return lands;
}

void CheckState::release_landings(const Posted& work) {
    for (const Range& range : work.lands) {
        const auto it = landings_.find(range);
        if (it != landings_.end() && --it->second.count == 0) {
            landings_.erase(it);
        }
        if (landed_.size() == kLandedKept) {
            landed_.pop_front();
        }
        landed_.emplace_back(++landing_epoch_, range);
    }
}

bool CheckState::landed_since(const Range& range, uint64_t epoch) const {
    const uint64_t from = range.start > longest_landing_ ? range.start - longest_landing_ : 0;
    for (auto it = landings_.lower_bound({from, 0});
         it != landings_.end() && it->first.start < range.end; ++it) {
        if (overlap(it->first, range)) {
            return true;
        }
    }
    if (landing_epoch_ > epoch && (landed_.empty() || landed_.front().first > epoch + 1)) {
        return true;  // released landings forgotten since: cannot tell
    }
    return std::any_of(landed_.begin(), landed_.end(), [&](const auto& entry) {
        return entry.first > epoch && overlap(entry.second, range);
    });
}

bool CheckState::sample_sources(QpState& qp, Posted& work, const char* verb) {
    work.landing_epoch = landing_epoch_;
    // Only a reliable QP's NIC may read the buffer again (to retransmit)
    // until the ACK: on UD and UC it reads it once, at a time the provider
    // does not see, and a program with reliability of its own (UCX's UD)
    // rightly reuses a buffer its peer has acknowledged.
    const bool rereads = qp.type == IBV_QPT_RC || qp.type == IBV_QPT_XRC_SEND;
    bool all_mapped = true;
    for (size_t i = 0; i < work.sges.size(); ++i) {
        Range range;
        MrKey* mr = process_range(work.sges[i], range);
        if (!mr) {
            continue;
        }
        if (!readable(*mr, range)) {
            all_mapped = false;
            if (!(qp.reported & bit(Rule::kUnmapped))) {
                qp.reported |= bit(Rule::kUnmapped);
                report_unmapped(qp.qpn,
                                std::string(verb) + ": " +
                                    element(static_cast<int>(i), work.wr_id, work.sges[i]),
                                work.sges[i], nullptr);
            }
            continue;
        }
        if (rereads) {
            work.sources.push_back({static_cast<int>(i), range, digest(range)});
        }
    }
    return all_mapped;
}

void CheckState::compare_sources(QpState& qp, const Posted& work) {
    for (const Posted::Source& source : work.sources) {
        const ibv_sge& sge = work.sges[source.element];
        const auto mr = mrs_.find(sge.lkey);
        if (mr == mrs_.end()) {
            continue;  // deregistered under it: dereg-in-use's
        }
        if (!readable(mr->second, source.range)) {
            if (!(qp.reported & bit(Rule::kUnmapped))) {
                qp.reported |= bit(Rule::kUnmapped);
                report_unmapped(qp.qpn,
                                "the completion of " + element(source.element, work.wr_id, sge),
                                sge, work.posted_at);
            }
            continue;
        }
        if (digest(source.range) == source.digest ||
            landed_since(source.range, work.landing_epoch)) {
            continue;  // unchanged, or the NIC wrote it (a receive or READ into it)
        }
        Finding finding{
            Rule::kSendBufferChanged, qp.qpn,
            "the bytes of " + element(source.element, work.wr_id, sge) +
                " changed between ibv_post_send on this " + std::string(qp_type_name(qp.type)) +
                " QP and the completion that retired it: the program "
                "(or a peer's RDMA WRITE into its MR) wrote the buffer while the NIC could still "
                "read it.",
            "it reads the buffer when it transmits, which may be any time until the completion, "
            "and again for each retransmission: the peer gets the old bytes, the new ones, or a "
            "mix, and a retransmitted message can differ from the first",
            "do not write a send's (or WRITE's) source buffer until its completion, or a later "
            "signaled one's on the same send queue, is polled; or post it with IBV_SEND_INLINE, "
            "whose bytes are copied at once"};
        finding.posted_at = work.posted_at;
        report_once(qp, finding);
    }
}

void CheckState::explain_error(QpState* qp, const Posted& work, const ibv_wc& wc) {
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR && qp && qp->rnr_retry < 7 &&
        !(qp->reported & bit(Rule::kRnrRetryExhausted))) {
        qp->reported |= bit(Rule::kRnrRetryExhausted);
        const std::string retries = std::to_string(qp->rnr_retry);
        Finding finding{
            Rule::kRnrRetryExhausted, qp->qpn,
            "a send (wr_id " + hex(work.wr_id) +
                ") completed with IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive posted "
                "when it arrived (an RNR NAK), and this QP's rnr_retry is " +
                retries + ", so RNR NAK " + std::to_string(qp->rnr_retry + 1) +
                " in a row ended it.",
            "the requester retries an RNR NAK rnr_retry times (7: for ever), each after the "
            "peer's min_rnr_timer (0 is the longest, 655.36 ms; 12 is 0.64 ms), then gives up "
            "and the QP goes to ERR; a peer that posts its receives a moment late (after it "
            "reaches RTR, or after polling) meets it on a fast link, and not on a slow one",
            "post the peer's receives before the sends that need them can arrive, or set "
            "rnr_retry 7 (retry for ever) with a min_rnr_timer that fits the peer"};
        finding.posted_at = work.posted_at;
        report(finding);
        return;
    }
    const bool refused = wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR;
    if (refused && qp && !(qp->reported & bit(Rule::kBadRemoteKey))) {
        rpc::CheckPeerReply reply{};
        if (client_.call(rpc::CheckPeerRequest{qp->handle, rpc::PeerQuestion::kRefusal, 0, 0, 0, 0},
                         &reply) == 0 &&
            reply.text[0]) {
            qp->reported |= bit(Rule::kBadRemoteKey);
            Finding finding{
                Rule::kBadRemoteKey, qp->qpn,
                "wr_id " + hex(work.wr_id) + " completed with " +
                    (wc.status == IBV_WC_REM_ACCESS_ERR ? "IBV_WC_REM_ACCESS_ERR: "
                                                        : "IBV_WC_REM_INV_REQ_ERR: ") +
                    std::string(reply.text, strnlen(reply.text, sizeof(reply.text))) + ".",
                "the responder NAKs the request (a remote access error, or an invalid request "
                "when its QP refuses the operation): the work request completes in error and "
                "both QPs go to ERR, and neither end says which key, range or flag",
                "name the peer's memory by the rkey and addresses of an MR (or MW) of the peer "
                "QP's PD that covers the range, registered with the IBV_ACCESS_REMOTE_* flag of "
                "the operation, and allow the operation in the peer QP's qp_access_flags"};
            finding.posted_at = work.posted_at;
            report(finding);
        }
        return;
    }
    for (size_t i = 0; i < work.sges.size(); ++i) {
        Range range;
        if (!process_range(work.sges[i], range) || mapped(range)) {
            continue;
        }
        if (qp && (qp->reported & bit(Rule::kUnmapped))) {
            return;
        }
        if (qp) {
            qp->reported |= bit(Rule::kUnmapped);
        }
        report_unmapped(qp ? qp->qpn : wc.qp_num,
                        std::string("a completion with status ") + ibv_wc_status_str(wc.status) +
                            " for " + element(static_cast<int>(i), work.wr_id, work.sges[i]),
                        work.sges[i], work.posted_at);
        return;
    }
}

void CheckState::report_unmapped(uint32_t qpn, const std::string& what, const ibv_sge& sge,
                                 const void* posted_at) {
    const MrKey& mr = mrs_.at(sge.lkey);  // the callers found it
    Finding finding{
        Rule::kUnmapped, qpn,
        what + ": the element is in the MR with lkey " + hex(sge.lkey) + " (" +
            std::to_string(mr.length) + " bytes at " + hex(mr.addr) +
            "), and part of it is no longer mapped in the process: freed (munmap, or free() of a "
            "large allocation) or moved (mremap) while the MR is registered.",
        "it pinned the pages at ibv_reg_mr and keeps using them until ibv_dereg_mr: it sends "
        "the old bytes or writes where the program no longer looks, while the program's new "
        "memory at that address is not the MR's",
        "deregister an MR (after polling the work that uses it) before freeing or remapping its "
        "memory"};
    finding.posted_at = posted_at;
    report(finding);
}

void CheckState::memory_given_back(const Range& range, const char* call, const void* caller) {
    constexpr size_t kGivenBackKept = 4;
    // madvise drops a shared mapping's pages from the process only: they
    // come back as they were, the MR's own.
    const bool dropped_pages = strncmp(call, "madvise", 7) == 0;
    Held locked(lock_);
    int is_private = -1;  // not looked up yet
    for (auto& [lkey, mr] : mrs_) {
        const Range mine{mr.addr, mr.addr + mr.length};
        if (!mr.process_memory || (mr.access & IBV_ACCESS_ON_DEMAND) || !overlap(mine, range) ||
            mr.given_back.size() == kGivenBackKept) {
            continue;  // an ODP MR follows the process's pages, as a NIC's does
        }
        const Range part{std::max(mine.start, range.start), std::min(mine.end, range.end)};
        if (dropped_pages && is_private < 0) {
            is_private = private_mapping(part);
        }
        if (!dropped_pages || is_private) {
            mr.given_back.push_back({part, call, caller});
        }
    }
}

void CheckState::check_given_back(QpState& qp, const MrKey& mr, int index, const ibv_sge& sge,
                                  const char* verb, uint64_t wr_id) {
    if (mr.given_back.empty() || (qp.reported & bit(Rule::kUnmapped)) || !mr.process_memory) {
        return;
    }
    const Range bytes{mr.addr + (sge.addr - mr.iova), mr.addr + (sge.addr - mr.iova) + sge.length};
    for (const MrKey::GivenBack& back : mr.given_back) {
        if (!overlap(back.range, bytes)) {
            continue;
        }
        Finding finding{
            Rule::kUnmapped, qp.qpn,
            std::string(verb) + ": " + element(index, wr_id, sge) +
                ": the element is in the MR with lkey " + hex(sge.lkey) + " (" +
                std::to_string(mr.length) + " bytes at " + hex(mr.addr) +
                "), and the program gave " + std::to_string(back.range.end - back.range.start) +
                " bytes of it at " + hex(back.range.start) + " back with " + back.call +
                " while the MR is registered.",
            "it pinned the MR's pages at ibv_reg_mr and keeps them until ibv_dereg_mr: the "
            "program's address now maps other pages (zeros, after madvise) or none, and the NIC "
            "sends the old bytes and writes where the program no longer looks",
            "deregister the MR before giving its memory back (or register the memory again "
            "after), or register it with IBV_ACCESS_ON_DEMAND, whose pages follow the process's"};
        finding.posted_at = back.caller;
        finding.earlier = "given back at";
        report_once(qp, finding);
        return;
    }
}

}  // namespace uroce::check
