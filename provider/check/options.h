// UROCE_CHECK_OPTIONS: check mode's settings beyond its mode, in the
// sanitizers' style (colon-separated NAME=VALUE; docs/check.md#options):
//   suppressions=FILE  lines CLASS:PATTERN (CLASS * for every class, #
//                      comments): a report with a frame whose function or
//                      module matches PATTERN is not made, as LSan's leak:
//   exitcode=N         a process that had a finding exits with N
//   log_path=PATH      reports go to PATH.PID, not to stderr
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace uroce::check {

struct Suppression {
    std::string kind;  // a class name, or *
    std::string pattern;
};

struct Options {
    std::vector<Suppression> suppressions;
    int exitcode = -1;  // none
    std::string log_path;
};

// Read once from $UROCE_CHECK_OPTIONS; what cannot be read is said once on
// stderr and left out.
const Options& options();

// Whether a suppression's `pattern` matches `text`: * and ? as in a glob,
// anywhere in `text` unless ^ or $ anchors it there.
bool pattern_matches(std::string_view pattern, std::string_view text);

}  // namespace uroce::check
