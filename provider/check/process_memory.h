// Check mode's reads of the program's memory. A range is read only once
// it is known to be mapped: memory the program unmapped under a live MR is
// a finding, not a crash. msync says so, at a system call's cost; where the
// bridge watches what the program releases (free, realloc, munmap, mremap,
// shmdt: bridge_abi.h), an MR msync found whole stays known to be mapped
// until the program releases memory within the span of its MRs, and the
// common path makes no call. (A page mapped without read access would
// still fault, as it would in the program.)
#pragma once

#include <stdint.h>

#include "check.h"

namespace uroce::check {

// The most bytes a digest reads: a longer range is sampled in evenly spaced
// pieces, its first and last bytes among them.
constexpr uint64_t kDigestBytes = 4096;

// A digest of the bytes of `range`, which the caller knows are mapped.
uint64_t digest(const Range& range);

// Whether every page of `range` is mapped.
bool mapped(const Range& range);

// Whether part of `range` is mapped privately (its pages the process's
// own, not a file's or a shared mapping's), as /proc/self/maps says.
bool private_mapping(const Range& range);

// Whether every page of `mr` (addr and length) is mapped: no system call
// while nothing was released since the last one said so. `known` is the
// MR's own memo of that (initially kNotKnown).
constexpr uint64_t kNotKnown = ~0ULL;
bool mr_mapped(const Range& mr, uint64_t& known);

// An MR over the process's memory, whose span the release watch follows.
void watch_span(const Range& mr);

// Installs the release watch with the bridge (once; no-op without it).
void watch_releases();

}  // namespace uroce::check
