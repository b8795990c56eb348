// Check mode's reads of the program's memory. They go through
// process_vm_readv on the process itself, which fails where a load would
// fault: memory the program unmapped under a live MR is a finding, not a
// crash.
#pragma once

#include <stdint.h>

#include "check.h"

namespace uroce::check {

// The most bytes a digest reads: a longer range is sampled in evenly spaced
// pieces, its first and last bytes among them.
constexpr uint64_t kDigestBytes = 1024;

// A digest of the bytes of `range`; false when part of it is not mapped.
bool digest(const Range& range, uint64_t& out);

// Whether every page of `range` is mapped.
bool mapped(const Range& range);

}  // namespace uroce::check
