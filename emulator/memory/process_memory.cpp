#include "memory/process_memory.h"

#include <errno.h>
#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>

namespace uroce {
namespace {

constexpr size_t kBatch = 64;  // segments per system call (IOV_MAX is 1024)

// Runs `call` over the segments in batches; `local` is one contiguous buffer.
template <class Call>
int transfer(pid_t pid, std::span<const Segment> segments, std::byte* local, size_t local_size,
             Call call) {
    size_t done = 0;
    for (size_t first = 0; first < segments.size(); first += kBatch) {
        std::array<iovec, kBatch> remote;
        const size_t count = std::min(kBatch, segments.size() - first);
        size_t bytes = 0;
        for (size_t i = 0; i < count; ++i) {
            const Segment& s = segments[first + i];
            remote[i] = {reinterpret_cast<void*>(s.addr), s.length};
            bytes += s.length;
        }
        if (done + bytes > local_size) {
            return EINVAL;
        }
        iovec here{local + done, bytes};
        const ssize_t moved = call(pid, &here, 1, remote.data(), count, 0);
        if (moved < 0) {
            return errno;
        }
        if (static_cast<size_t>(moved) != bytes) {
            return EFAULT;
        }
        done += bytes;
    }
    return 0;
}

}  // namespace

int read_process(pid_t pid, std::span<const Segment> from, std::span<std::byte> to) {
    return transfer(pid, from, to.data(), to.size(), process_vm_readv);
}

int write_process(pid_t pid, std::span<const std::byte> from, std::span<const Segment> to) {
    return transfer(pid, to, const_cast<std::byte*>(from.data()), from.size(), process_vm_writev);
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
