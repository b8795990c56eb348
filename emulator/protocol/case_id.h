// A program's case id (UROCE_CASE, docs/fuzzing.md#case-ids): a fuzzing
// harness names each case, and the daemon tags with it everything that
// program causes (log lines, refusals, check-mode findings, counters). The
// provider and the bridge send it with their hello; the daemon checks it.
#pragma once

#include <stdlib.h>
#include <string.h>

#include <string>

#include "messages.h"  // relative: the bridge includes it as emulator/protocol/

namespace uroce::rpc {

// UROCE_CASE as a request carries it: not NUL-terminated when too long,
// which the daemon refuses.
inline void case_id_from_environment(char (&field)[kCaseIdLen]) {
    if (const char* id = getenv("UROCE_CASE")) {
        memcpy(field, id, strnlen(id, kCaseIdLen));
    }
}

// Empty when `field` holds no id or a valid one, else why it is not one.
inline std::string case_id_problem(const char (&field)[kCaseIdLen]) {
    const size_t length = strnlen(field, kCaseIdLen);
    if (length == kCaseIdLen) {
        return "UROCE_CASE is longer than " + std::to_string(kCaseIdLen - 1) + " bytes";
    }
    for (size_t i = 0; i < length; ++i) {
        const char c = field[i];
        const bool letter =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!letter && !strchr("._:/+=@-", c)) {
            return "UROCE_CASE '" + std::string(field, length) +
                   "' is not a case id: letters, digits and ._:/+=@- only";
        }
    }
    return {};
}

}  // namespace uroce::rpc
