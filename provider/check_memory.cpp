// Check mode's digests of send buffers and its test for unmapped memory.
#include "check_memory.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace uroce::check {
namespace {

constexpr uint64_t kPieceBytes = 64;
constexpr size_t kPieces = kDigestBytes / kPieceBytes;

// 64-bit FNV-1a over 8-byte words, then the tail's bytes.
uint64_t hash(const unsigned char* bytes, size_t length) {
    constexpr uint64_t kPrime = 0x100000001b3ULL;
    uint64_t h = 0xcbf29ce484222325ULL ^ length;
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
    const uint64_t length = range.end - range.start;
    std::array<iovec, kPieces> remote;
    size_t pieces;
    if (length <= kDigestBytes) {
        remote[0] = {reinterpret_cast<void*>(range.start), length};
        pieces = 1;
    } else {
        // Piece i starts i/(kPieces-1) of the way to the last piece's start.
        const uint64_t last = length - kPieceBytes;
        for (size_t i = 0; i < kPieces; ++i) {
            remote[i] = {reinterpret_cast<void*>(range.start + last * i / (kPieces - 1)),
                         kPieceBytes};
        }
        pieces = kPieces;
    }
    alignas(8) unsigned char copy[kDigestBytes];
    const uint64_t wanted = std::min(length, kDigestBytes);
    const iovec local{copy, wanted};
    const ssize_t got = process_vm_readv(getpid(), &local, 1, remote.data(), pieces, 0);
    if (got != static_cast<ssize_t>(wanted)) {
        return false;
    }
    out = hash(copy, wanted);
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
