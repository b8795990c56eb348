// Moves bytes between the daemon and an application's address space with
// process_vm_readv/process_vm_writev, a batch of segments per call. Callers
// have already checked every segment against a registered memory region.
#pragma once

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <span>
#include <vector>

namespace uroce {

struct Segment {
    uint64_t addr;  // in the application
    uint64_t length;
};

// Where a byte range of one application lives.
struct Extent {
    pid_t pid = 0;
    std::vector<Segment> segments;
    uint64_t length = 0;  // sum of the segments
};

// The part [offset, offset + length) of an extent, as segments.
std::vector<Segment> slice(const Extent& extent, uint64_t offset, uint64_t length);

// Reads the segments, in order, into `to` (as many bytes as they hold).
// Returns 0 or an errno (EFAULT: the application no longer maps them).
int read_process(pid_t pid, std::span<const Segment> from, std::span<std::byte> to);
// Writes `from` over the segments in order.
int write_process(pid_t pid, std::span<const std::byte> from, std::span<const Segment> to);
// The same from several stretches of the daemon's memory, in order.
int write_process(pid_t pid, std::span<const iovec> from, std::span<const Segment> to);

}  // namespace uroce
