// Check mode's digests of send buffers and its test for unmapped memory.
#include "process_memory.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "protocol/bridge_abi.h"

namespace uroce::check {
namespace {

constexpr uint64_t kPieceBytes = 64;
constexpr size_t kPieces = kDigestBytes / kPieceBytes;

// The program's bytes are read as a NIC reads them, past a sanitizer's
// poison (a block its allocator keeps after free() is still the MR's).
#define AS_THE_NIC_READS __attribute__((no_sanitize("address")))

// 64-bit FNV-1a over 8-byte words, then the tail's bytes, into `h`.
AS_THE_NIC_READS uint64_t hash(uint64_t h, const unsigned char* bytes, size_t length) {
    constexpr uint64_t kPrime = 0x100000001b3ULL;
    size_t i = 0;
    for (; i + 8 <= length; i += 8) {
        uint64_t word;
        memcpy(&word, bytes + i, sizeof(word));
        h = (h ^ word) * kPrime;
    }
    for (; i < length; ++i) {
        h = (h ^ bytes[i]) * kPrime;
    }
    return h;
}

// The release watch's state, for every context of the process: the span
// of MRs over process memory (only widened), and the releases within it.
std::atomic<uint64_t> span_start{~0ULL};
std::atomic<uint64_t> span_end{0};
std::atomic<uint64_t> releases{0};
std::atomic<bool> watching_releases{false};
thread_local bool own_code;

// The bridge's release watch: takes no lock, allocates nothing.
void released(const void* addr, size_t length) {
    const auto start = reinterpret_cast<uint64_t>(addr);
    if (own_code || (length && (start + length <= span_start.load(std::memory_order_relaxed) ||
                                start >= span_end.load(std::memory_order_relaxed)))) {
        return;
    }
    releases.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace

OwnCode::OwnCode() : was_(own_code) {
    own_code = true;
}

OwnCode::~OwnCode() {
    own_code = was_;
}

void watch_span(const Range& mr) {
    uint64_t start = span_start.load();
    while (mr.start < start && !span_start.compare_exchange_weak(start, mr.start)) {
    }
    uint64_t end = span_end.load();
    while (mr.end > end && !span_end.compare_exchange_weak(end, mr.end)) {
    }
}

void watch_releases() {
    static std::once_flag once;
    std::call_once(once, [] {
        const auto watch = reinterpret_cast<decltype(&uroce_bridge_watch_releases)>(
            dlsym(RTLD_DEFAULT, "uroce_bridge_watch_releases"));
        if (watch) {
            watch(released);
            watching_releases = true;
        }
    });
}

bool mr_mapped(const Range& mr, uint64_t& known) {
    if (!watching_releases.load(std::memory_order_relaxed)) {
        return mapped(mr);
    }
    // Read before asking: a release meanwhile makes the next look ask again.
    const uint64_t now = releases.load(std::memory_order_acquire);
    if (known == now) {
        return true;
    }
    if (!mapped(mr)) {
        return false;
    }
    known = now;
    return true;
}

AS_THE_NIC_READS uint64_t digest(const Range& range) {
    const uint64_t length = range.end - range.start;
    const auto* bytes = reinterpret_cast<const unsigned char*>(range.start);
    uint64_t h = 0xcbf29ce484222325ULL ^ length;
    if (length <= kDigestBytes) {
        return hash(h, bytes, length);
    }
    // Piece i starts i/(kPieces-1) of the way to the last piece's start.
    const uint64_t last = length - kPieceBytes;
    for (size_t i = 0; i < kPieces; ++i) {
        h = hash(h, bytes + last * i / (kPieces - 1), kPieceBytes);
    }
    return h;
}

bool mapped(const Range& range) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = range.start & ~(page - 1);
    // msync fails with ENOMEM for a range with a page not mapped, and does
    // nothing else with MS_ASYNC.
    return msync(reinterpret_cast<void*>(start), range.end - start, MS_ASYNC) == 0 ||
           errno != ENOMEM;
}

bool private_mapping(const Range& range) {
    // Read a piece at a time, without allocating: it may run inside the
    // program's munmap or madvise.
    const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return true;  // cannot tell: as most memory is
    }
    char buffer[4096];
    size_t held = 0;
    bool found = false;
    for (;;) {
        const ssize_t n = read(fd, buffer + held, sizeof(buffer) - 1 - held);
        if (n <= 0) {
            break;
        }
        held += static_cast<size_t>(n);
        buffer[held] = 0;
        char* line = buffer;
        // "start-end perms offset dev inode path": perms ends in p or s.
        for (char* end; !found && (end = strchr(line, '\n')); line = end + 1) {
            uint64_t start = 0;
            uint64_t stop = 0;
            char perms[8] = {};
            if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s", &start, &stop, perms) == 3 &&
                start < range.end && range.start < stop && perms[3] == 'p') {
                found = true;
            }
        }
        if (found) {
            break;
        }
        held = static_cast<size_t>(buffer + held - line);
        memmove(buffer, line, held);
        if (held == sizeof(buffer) - 1) {
            held = 0;  // a line longer than the buffer: its path
        }
    }
    close(fd);
    return found;
}

}  // namespace uroce::check
