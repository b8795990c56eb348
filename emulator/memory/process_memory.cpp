#include "memory/process_memory.h"

#include <errno.h>
#include <limits.h>
#include <sys/uio.h>

#include <string.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "util/log.h"
#include "util/rate_limit.h"

namespace uroce {
namespace {

constexpr size_t kBatch = 64;  // segments per system call (IOV_MAX is 1024)

// Runs `call` over the segments in batches, with the stretch of `local`
// (the daemon's side, in order) that each batch's bytes take.
// A transfer the kernel refuses for want of ptrace rights (a program that
// named another ptracer after it opened the device, a changed ptrace_scope)
// fails its work request with a protection error; the reason is logged
// here, at most 10 lines a second for all engines.
void log_refused(const char* call, pid_t pid, int error) {
    if (error != EPERM && error != EACCES && error != ENOSYS) {
        return;
    }
    static std::mutex mutex;
    static RateLimit limit(10, 1);
    std::lock_guard lock(mutex);
    if (limit.allow(RateLimit::Clock::now())) {
        log_warn(
            "%s on pid %d refused: %s: the kernel's ptrace rules keep uroced out of the "
            "program's memory (it named another ptracer? see docs/memory-access.md)",
            call, pid, strerror(error));
    }
}

template <class Call>
int transfer(pid_t pid, std::span<const Segment> segments, std::span<const iovec> local, Call call,
             const char* name) {
    size_t piece = 0;       // in local
    size_t piece_used = 0;  // bytes of local[piece] already moved
    for (size_t first = 0; first < segments.size(); first += kBatch) {
        std::array<iovec, kBatch> remote;
        const size_t count = std::min(kBatch, segments.size() - first);
        size_t bytes = 0;
        for (size_t i = 0; i < count; ++i) {
            const Segment& s = segments[first + i];
            remote[i] = {reinterpret_cast<void*>(s.addr), s.length};
            bytes += s.length;
        }
        std::array<iovec, 4 * kBatch> here;
        size_t pieces = 0;
        for (size_t left = bytes; left > 0;) {
            if (piece == local.size() || pieces == here.size()) {
                return EINVAL;  // fewer bytes here than the segments hold
            }
            const size_t take = std::min(left, local[piece].iov_len - piece_used);
            here[pieces++] = {static_cast<std::byte*>(local[piece].iov_base) + piece_used, take};
            left -= take;
            piece_used += take;
            if (piece_used == local[piece].iov_len) {
                ++piece;
                piece_used = 0;
            }
        }
        const ssize_t moved = call(pid, here.data(), pieces, remote.data(), count, 0);
        if (moved < 0) {
            const int error = errno;
            log_refused(name, pid, error);
            return error;
        }
        if (static_cast<size_t>(moved) != bytes) {
            return EFAULT;
        }
    }
    return 0;
}

}  // namespace

int read_process(pid_t pid, std::span<const Segment> from, std::span<std::byte> to) {
    const iovec here{to.data(), to.size()};
    return transfer(pid, from, std::span(&here, 1), process_vm_readv, "process_vm_readv");
}

int write_process(pid_t pid, std::span<const std::byte> from, std::span<const Segment> to) {
    const iovec here{const_cast<std::byte*>(from.data()), from.size()};
    return transfer(pid, to, std::span(&here, 1), process_vm_writev, "process_vm_writev");
}

int write_process(pid_t pid, std::span<const iovec> from, std::span<const Segment> to) {
    return transfer(pid, to, from, process_vm_writev, "process_vm_writev");
}

std::vector<Segment> slice(const Extent& extent, uint64_t offset, uint64_t length) {
    std::vector<Segment> part;
    for (const Segment& s : extent.segments) {
        if (length == 0) {
            break;
        }
        if (offset >= s.length) {
            offset -= s.length;
            continue;
        }
        const uint64_t take = std::min(length, s.length - offset);
        part.push_back({s.addr + offset, take});
        offset = 0;
        length -= take;
    }
    return part;
}

}  // namespace uroce
