// Writes into applications' memory, gathered so that consecutive writes to
// one process reach it in one process_vm_writev. Written one packet (4 KiB)
// at a time, the call's fixed cost (finding the task, checking access,
// importing the iovecs) was most of the responder's time.
//
// The bytes are copied in when a write is added, so packet buffers can be
// reused at once, unless the caller lends them: a packet whose buffer stays
// until the next flush (the engine's received packets) is written from
// where it is, one copy fewer. The owner flushes before anything that must
// see the writes done: an acknowledgement, a completion, a read of the same
// memory, and the end of the engine's turn (before control requests can
// change the memory registrations the segments were checked against).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "memory/process_memory.h"

namespace uroce {

class WriteBatch {
  public:
    static constexpr size_t kMaxBytes = 256 * 1024;
    static constexpr size_t kMaxWrites = 64;

    WriteBatch();

    // Queues `bytes` for the segments (already checked against a registered
    // region) of `pid`; `tag` names the write to the failure callback.
    // `lent`: the bytes stay where they are until the flush, and are not
    // copied. False when the batch has no room for it: flush, then add again.
    bool add(pid_t pid, uint64_t tag, std::span<const std::byte> bytes, std::span<const Segment> to,
             bool lent = false);
    bool empty() const { return writes_.empty(); }
    size_t size() const { return writes_.size(); }

    // Makes the writes, in order, and empties the batch before it calls
    // `failed(tag, errno)` for each write that could not be made (EFAULT:
    // no longer mapped, ESRCH: the process is gone); the others are made.
    void flush(const std::function<void(uint64_t tag, int error)>& failed);

  private:
    struct Write {
        pid_t pid;
        uint64_t tag;
        const std::byte* bytes;  // lent, or in bytes_
        size_t length;
        size_t first_segment;  // in segments_
        size_t segments;
    };
    // One call for writes_[first, last), all to one process; 0 or an errno.
    int write_run(size_t first, size_t last) const;

    std::unique_ptr<std::byte[]> bytes_;  // kMaxBytes
    size_t used_ = 0;
    std::vector<Write> writes_;
    std::vector<Segment> segments_;
    mutable std::vector<iovec> from_;  // a run's bytes, for the call
};

}  // namespace uroce
