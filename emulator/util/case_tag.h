// What a program's case id (UROCE_CASE, docs/fuzzing.md#case-ids) tags in
// the daemon: the log lines of its requests, QPs and rdma_cm IDs, and its
// own coverage map (`uroce coverage --case ID`), which counts what the
// daemon did for it while other cases run beside it.
#pragma once

#include <stdint.h>

#include <memory>
#include <string>

#include "util/coverage.h"
#include "util/log.h"

namespace uroce {

struct CaseTag {
    std::string id;                              // empty: no case
    std::shared_ptr<coverage::Counts> coverage;  // null: no case
};
using CaseRef = std::shared_ptr<const CaseTag>;

// The tag of no case.
CaseRef no_case();

// The tag of case `id`, with its map: the one kept for it, or a new one.
// At most kCaseMaps maps are kept; a new case past that makes the daemon
// forget the map made longest ago (logged), whose holders go on counting
// in it unseen.
inline constexpr size_t kCaseMaps = 64;
CaseRef tag_case(const std::string& id);

// The map kept for case `id`, or null (never tagged, or forgotten).
std::shared_ptr<coverage::Counts> case_map(const std::string& id);

// Forgets every case's map (uroce reset of every device).
void forget_case_maps();

// While one lives, this thread's log lines end in " [case ID]" and its
// coverage hits count in the case's map too. Null tags nothing; scopes nest.
class InCase {
  public:
    explicit InCase(const CaseTag* tag)
        : log_(tag ? tag->id.c_str() : nullptr), coverage_(tag ? tag->coverage.get() : nullptr) {}

  private:
    LogCase log_;
    coverage::CaseScope coverage_;
};

}  // namespace uroce
