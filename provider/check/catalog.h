// Check mode's catalog: every rule it applies, the class its reports name
// (a heading of docs/check.md, and its anchor there), and whether breaking
// it is a finding or a portability note. docs/check.md and the tests read
// the table (catalog.cpp); a new class is one row here, one file of its own
// (checker.h), its programs and its test.
#pragma once

#include <stdint.h>

#include <span>
#include <string>

namespace uroce::check {

// One rule each; reported at most once per object it is about (a QP, an
// SRQ, a CQ), each with its bit of the object's `reported` mask.
enum class Rule : uint8_t {
    kWrongStateSend,
    kWrongStateRecv,
    kUnsignaled,
    kDeregInUse,
    kBadLocalKey,
    kBadRemoteKey,
    kUnackedEvents,
    kCqOverrun,
    kLeak,
    kOverlap,
    kSendBufferChanged,
    kUnmapped,
    kPeerAttributes,
    kUdQkey,
    kWriteRace,
    kRnrRetryExhausted,
    kRnrWait,
    kStrandedCompletion,
    kInlineBeyondAsked,
    kPostLoopInError,
    kCompletionsAfterDestroy,
    kBeyondCaps,
    kMtuAboveActive,
    kForkUnsafe,
    kNullArgument,
    kCount,
};

// What a report of the rule is: a bug (an ERROR, fatal under
// UROCE_CHECK=abort) or a note on behaviour that differs among NICs.
enum class Severity : uint8_t { kFinding, kNote };

struct Entry {
    Rule rule;
    const char* name;  // the class: docs/check.md's "### `name`"
    Severity severity;
    const char* about;  // one line: what the rule is
};

std::span<const Entry> catalog();
const Entry& entry(Rule rule);
inline const char* class_name(Rule rule) {
    return entry(rule).name;
}
constexpr uint32_t bit(Rule rule) {
    return 1u << static_cast<unsigned>(rule);
}
static_assert(static_cast<unsigned>(Rule::kCount) <= 32, "a rule's bit is one of 32");

// "docs/check.md#send-queue-unsignaled": where a report points its reader.
std::string anchor(Rule rule);

}  // namespace uroce::check
