// Check mode's digests of send buffers and its test for unmapped memory.
#include "check_memory.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace uroce::check {
namespace {

constexpr uint64_t kPieceBytes = 64;
constexpr size_t kPieces = kDigestBytes / kPieceBytes;

// 64-bit FNV-1a over 8-byte words, then the tail's bytes, into `h`.
uint64_t hash(uint64_t h, const unsigned char* bytes, size_t length) {
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

}  // namespace

bool digest(const Range& range, uint64_t& out) {
    // One system call (msync, a fraction of process_vm_readv's cost) tells
    // whether the pages are still mapped; then the bytes are read in place.
    if (!mapped(range)) {
        return false;
    }
    const uint64_t length = range.end - range.start;
    const auto* bytes = reinterpret_cast<const unsigned char*>(range.start);
    uint64_t h = 0xcbf29ce484222325ULL ^ length;
    if (length <= kDigestBytes) {
        out = hash(h, bytes, length);
        return true;
    }
    // Piece i starts i/(kPieces-1) of the way to the last piece's start.
    const uint64_t last = length - kPieceBytes;
    for (size_t i = 0; i < kPieces; ++i) {
        h = hash(h, bytes + last * i / (kPieces - 1), kPieceBytes);
    }
    out = h;
    return true;
}

bool mapped(const Range& range) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = range.start & ~(page - 1);
    // msync fails with ENOMEM for a range with a page not mapped, and does
    // nothing else with MS_ASYNC.
    return msync(reinterpret_cast<void*>(start), range.end - start, MS_ASYNC) == 0 ||
           errno != ENOMEM;
}

}  // namespace uroce::check
