// Writes into applications' memory, queued so that a run of packets lands
// with one process_vm_writev (memory/write_batch.h): the responder's SEND and
// WRITE payloads and the completer's READ responses. A write that fails
// fails its request as if it had been made at once.
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <span>
#include <vector>

#include "memory/write_batch.h"
#include "transport/context.h"
#include "transport/request_errors.h"

namespace uroce::transport {

class Responder;

// A queued write, and how its request fails should the write fail: the
// responder's with a NAK for `psn`, a READ response's (`read_response`, the
// READ's first PSN) with a local protection error when the READ completes.
struct Placement {
    Device* device;
    Qp* qp;
    uint32_t psn;
    RequestError error;
    bool read_response;
};

class Placements {
  public:
    // A failed write of the responder's is answered by `responder`.
    explicit Placements(Responder& responder) : responder_(responder) {}

    // Queues `bytes` for `to` in process `pid`; `lent`: they stay where they
    // are until the writes are made (Incoming::payload_lent). False when
    // `placement`'s QP failed instead: a queued write of its responder could
    // not be made when the batch was made to take this one.
    bool queue(const Placement& placement, pid_t pid, std::span<const std::byte> bytes,
               std::span<const Segment> to, bool lent = false);
    // Makes the queued writes (every QP's); false when one of `qp`'s
    // responder failed (and failed the QP). Null: the end of the engine's
    // turn.
    bool placed(const Qp* qp) { return writes_.empty() || make_writes(qp); }

  private:
    bool make_writes(const Qp* qp);
    void failed(const Placement& placement);

    Responder& responder_;
    WriteBatch writes_;
    std::vector<Placement> queued_;  // by the writes' tags
    std::vector<Placement> flushing_;
};

}  // namespace uroce::transport
