// Check mode's write-race: RDMA WRITEs of two QPs of the process (of one
// device or two) into the same bytes of a peer's memory, both posted and
// neither completed, so that nothing orders them. (WRITEs of one QP are
// ordered; a WRITE posted once another's completion was polled is ordered
// after it.) The registry is the process's, beside every context's
// CheckState, whose lock is taken first.
#include <algorithm>
#include <mutex>

#include "check.h"

namespace uroce::check {
namespace {

// The WRITEs of one QP with one target.
struct Writer {
    uint32_t count;
    uint32_t qpn;        // the QP's number and
    std::string device;  // device, and one of the WRITEs, for reports
    uint64_t wr_id;
};

struct Registry {
    std::mutex lock;
    std::map<std::pair<RemoteRange, const QpState*>, Writer> writes;
    uint64_t longest = 0;
};

Registry& registry() {
    static Registry* writes = new Registry;  // never destroyed: exit may still report
    return *writes;
}

}  // namespace

void CheckState::claim_target(QpState& qp, Posted& work, const ibv_send_wr& wr) {
    uint64_t length = 0;
    for (int i = 0; i < wr.num_sge && wr.sg_list; ++i) {
        length += wr.sg_list[i].length;
    }
    if (length == 0 || (qp.type != IBV_QPT_RC && qp.type != IBV_QPT_UC)) {
        return;
    }
    const RemoteRange target{qp.dgid, wr.wr.rdma.rkey, wr.wr.rdma.remote_addr,
                             wr.wr.rdma.remote_addr + length};
    Registry& r = registry();
    std::string what;
    {
        std::lock_guard lock(r.lock);
        const uint64_t from = target.start > r.longest ? target.start - r.longest : 0;
        for (auto it = r.writes.lower_bound({{target.gid, target.rkey, from, 0}, nullptr});
             it != r.writes.end() && it->first.first.gid == target.gid &&
             it->first.first.rkey == target.rkey && it->first.first.start < target.end &&
             what.empty() && !(qp.reported & kWriteRace);
             ++it) {
            const RemoteRange& range = it->first.first;
            const Writer& other = it->second;
            if (range.end <= target.start || it->first.second == &qp) {
                continue;
            }
            const uint64_t shared =
                std::min(target.end, range.end) - std::max(target.start, range.start);
            what = "ibv_post_send: an RDMA WRITE (wr_id " + hex(wr.wr_id) + ") of " +
                   std::to_string(length) + " bytes to " + hex(target.start) + " (rkey " +
                   hex(target.rkey) + ") overlaps " + std::to_string(shared) +
                   " bytes of an RDMA WRITE (wr_id " + hex(other.wr_id) + ") from QP " +
                   hex(other.qpn) + " of " + other.device +
                   " to the same memory that has not completed: nothing orders the two.";
        }
        Writer& writer = r.writes[{target, &qp}];
        if (writer.count++ == 0) {
            writer = {1, qp.qpn, device_, wr.wr_id};
        }
        r.longest = std::max(r.longest, length);
    }
    work.target = target;
    if (what.empty()) {
        return;
    }
    qp.reported |= kWriteRace;
    report({"write-race", qp.qpn, what,
            "WRITEs of different QPs are not ordered with each other: the bytes of both land in "
            "either order, or interleaved, and the memory holds a mix that changes from run to "
            "run",
            "poll one WRITE's completion before posting the other, send both from one QP (which "
            "orders them), or write disjoint ranges"});
}

void CheckState::release_target(QpState& qp, const Posted& work) {
    if (work.target.end == work.target.start) {
        return;
    }
    Registry& r = registry();
    std::lock_guard lock(r.lock);
    const auto it = r.writes.find({work.target, &qp});
    if (it != r.writes.end() && --it->second.count == 0) {
        r.writes.erase(it);
    }
}

}  // namespace uroce::check
