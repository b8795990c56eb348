// Check mode's write-race: RDMA WRITEs of two QPs of a context into the
// same bytes of a peer's memory, both posted and neither completed, so
// that nothing orders them. (WRITEs of one QP are ordered; a later WRITE
// posted once an earlier one's completion was polled is ordered after it.)
#include <algorithm>

#include "check.h"

namespace uroce::check {

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
    const uint64_t from = target.start > longest_write_ ? target.start - longest_write_ : 0;
    for (auto it = remote_writes_.lower_bound({target.gid, target.rkey, from, 0});
         it != remote_writes_.end() && it->first.gid == target.gid &&
         it->first.rkey == target.rkey && it->first.start < target.end &&
         !(qp.reported & kWriteRace);
         ++it) {
        const Writer& other = it->second;
        if (it->first.end <= target.start || other.qpn == qp.qpn) {
            continue;
        }
        qp.reported |= kWriteRace;
        const uint64_t shared =
            std::min(target.end, it->first.end) - std::max(target.start, it->first.start);
        report({"write-race", qp.qpn,
                "ibv_post_send: an RDMA WRITE (wr_id " + hex(wr.wr_id) + ") of " +
                    std::to_string(length) + " bytes to " + hex(target.start) + " (rkey " +
                    hex(target.rkey) + ") overlaps " + std::to_string(shared) +
                    " bytes of an RDMA WRITE (wr_id " + hex(other.wr_id) + ") from QP " +
                    hex(other.qpn) +
                    " to the same memory that has not completed: nothing orders the two.",
                "WRITEs of different QPs are not ordered with each other: the bytes of both "
                "land in either order, or interleaved, and the memory holds a mix that changes "
                "from run to run",
                "poll one WRITE's completion before posting the other, send both from one QP "
                "(which orders them), or write disjoint ranges"});
    }
    Writer& writer = remote_writes_[target];
    if (writer.count++ == 0) {
        writer = {1, qp.qpn, wr.wr_id};
    }
    longest_write_ = std::max(longest_write_, length);
    work.target = target;
}

void CheckState::release_target(const Posted& work) {
    if (work.target.end == work.target.start) {
        return;
    }
    const auto it = remote_writes_.find(work.target);
    if (it != remote_writes_.end() && --it->second.count == 0) {
        remote_writes_.erase(it);
    }
}

}  // namespace uroce::check
