// Check mode's write-race, across every QP of the daemon (docs/check.md):
// RDMA WRITEs of two QPs into the same bytes of a peer's memory, both
// taken by the requester and neither retired by its program (the
// provider's count in the send queue's ring), so that nothing orders them.
// A QP's WRITEs are ordered among themselves; one posted after another's
// completion was polled is ordered after it. Only WQEs the provider marked
// (SendWqe::check_seq, check mode) take part.
#pragma once

#include "transport/context.h"

namespace uroce::transport {

// The requester took `w`, a checked RDMA WRITE of `at`'s: claims its
// target, and when it overlaps another QP's unretired WRITE, keeps the
// finding on the QP (RequesterState::write_race, its first only) and
// tells the provider through the ring.
void claim_write_target(const QpOf& at, const SendWork& w);

}  // namespace uroce::transport
