// Check mode's reads of the program's memory. A range is read only once
// msync has said all its pages are mapped: memory the program unmapped
// under a live MR is a finding, not a crash. (A page mapped without read
// access would still fault, as it would in the program.)
#pragma once

#include <stdint.h>

#include "check.h"

namespace uroce::check {

// The most bytes a digest reads: a longer range is sampled in evenly spaced
// pieces, its first and last bytes among them.
constexpr uint64_t kDigestBytes = 4096;

// A digest of the bytes of `range`; false when part of it is not mapped.
bool digest(const Range& range, uint64_t& out);

// Whether every page of `range` is mapped.
bool mapped(const Range& range);

// Whether part of `range` is mapped privately (its pages the process's
// own, not a file's or a shared mapping's), as /proc/self/maps says.
bool private_mapping(const Range& range);

}  // namespace uroce::check
