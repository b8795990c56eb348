#include "transport/placements.h"

#include "transport/responder.h"

namespace uroce::transport {

bool Placements::queue(const Placement& placement, pid_t pid, std::span<const std::byte> bytes,
                       std::span<const Segment> to, bool lent) {
    if (!writes_.add(pid, queued_.size(), bytes, to, lent)) {
        if (!placed(placement.qp) && !placement.read_response) {
            return false;
        }
        writes_.add(pid, queued_.size(), bytes, to, lent);  // room now: one packet
    }
    queued_.push_back(placement);
    return true;
}

bool Placements::make_writes(const Qp* qp) {
    bool ok = true;
    flushing_.swap(queued_);
    writes_.flush([&](uint64_t tag, int error) {
        // A process that is gone has no memory to see the write; its QPs
        // go with it, as a NIC's DMA into an exiting process's pinned
        // pages succeeds until they are destroyed.
        if (error != ESRCH) {
            const Placement& p = flushing_[tag];
            ok = ok && (p.qp != qp || p.read_response);
            failed(p);
        }
    });
    flushing_.clear();
    return ok;
}

// The application unmapped memory that a queued write was for: a READ
// fails when it completes; a request fails as it would have had the write
// been made at once (its answer and its completion had waited for it).
void Placements::failed(const Placement& p) {
    if (!p.read_response) {
        responder_.write_failed({*p.device, *p.qp}, p.psn, p.error);
        return;
    }
    for (SendWork& w : p.qp->requester.window) {
        if (w.started && w.first_psn == p.psn && w.wqe.opcode == IBV_WR_RDMA_READ) {
            w.error = w.error.value_or(IBV_WC_LOC_PROT_ERR);
            return;
        }
    }
}

}  // namespace uroce::transport
