// The names of the coverage map's entries (util/coverage.h counts them):
// what `uroce coverage` prints and docs/fuzzing.md documents. Only
// entries that name something are listed (no refusal of an op that is not a
// verb, no event number libibverbs does not define); every id keeps its place.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "protocol/messages.h"
#include "util/result.h"

namespace uroce {

struct CoverageEntry {
    uint32_t id;
    const char* area;  // "qp_transition", "work_request", ...
    std::string name;  // "RC INIT->RTR refused: missing attribute"
};

// Every entry of the map, in id order.
const std::vector<CoverageEntry>& coverage_entries();
// {"ids": N, "entries": [{"id", "area", "name"}...]}
std::string coverage_map_json();
// The counts by id, the daemon's or a case's, cleared as they are read
// when asked.
Result read_coverage(const rpc::CoverageRequest& request, rpc::CoverageReply& reply);

}  // namespace uroce
