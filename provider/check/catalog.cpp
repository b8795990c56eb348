// The catalog of check mode's rules (catalog.h), as data.
#include "catalog.h"

#include <array>

namespace uroce::check {
namespace {

using enum Rule;
constexpr Severity kFinding = Severity::kFinding;
constexpr Severity kNote = Severity::kNote;

constexpr std::array<Entry, static_cast<size_t>(kCount)> kCatalog = {{
    {kWrongStateSend, "post-in-wrong-state", kFinding, "a send posted to a QP not in RTS"},
    {kWrongStateRecv, "post-in-wrong-state", kFinding, "a receive posted to a QP in RESET"},
    {kUnsignaled, "send-queue-unsignaled", kFinding,
     "a send queue filled with work no completion can free"},
    {kDeregInUse, "dereg-in-use", kFinding, "an MR or MW freed under posted work"},
    {kBadLocalKey, "bad-local-key", kFinding, "an element its lkey does not cover"},
    {kBadRemoteKey, "bad-remote-key", kFinding, "a peer's memory its rkey does not open"},
    {kUnackedEvents, "unacked-events", kFinding,
     "a destroy or a wait that blocks for ever on events"},
    {kCqOverrun, "cq-overrun", kFinding, "more completions due than the CQ holds"},
    {kLeak, "leak", kFinding, "objects alive at close or exit"},
    {kOverlap, "overlapping-receives", kFinding, "two outstanding NIC writes into the same bytes"},
    {kSendBufferChanged, "send-buffer-changed", kFinding,
     "a send's source written before its completion"},
    {kUnmapped, "memory-unmapped", kFinding, "an MR's memory gone from under it"},
    {kPeerAttributes, "peer-mismatch", kFinding, "a QP and its peer set up unevenly"},
    {kUdQkey, "peer-mismatch", kFinding, "a datagram with a Q_Key its receiver drops"},
    {kWriteRace, "write-race", kFinding, "WRITEs of two QPs into the same bytes at once"},
    {kRnrRetryExhausted, "rnr-settings", kFinding, "rnr_retry too small for the peer's receives"},
    {kRnrWait, "rnr-settings", kFinding, "an RNR NAK timer that stalls the sender"},
    {kStrandedCompletion, "stranded-completion", kFinding,
     "a CQ armed over completions not polled, then waited on"},
    {kInlineBeyondAsked, "inline-beyond-asked", kNote,
     "IBV_SEND_INLINE beyond the max_inline_data asked for"},
    {kPostLoopInError, "post-loop-in-error", kFinding,
     "work posted again and again to a QP in ERR"},
    {kCompletionsAfterDestroy, "completions-after-destroy", kNote,
     "a CQ polled after a QP with completions in it was destroyed"},
    {kBeyondCaps, "beyond-caps", kFinding, "a work request beyond the QP's caps (EINVAL)"},
    {kMtuAboveActive, "mtu-above-active", kFinding, "a path MTU above the port's active MTU"},
    {kForkUnsafe, "fork-unsafe", kFinding,
     "an MR registered before fork() used by the parent, with no fork safety"},
    {kNullArgument, "null-argument", kFinding,
     "NULL where a verb reads an object: attributes, a work request, a list"},
}};

constexpr bool in_rule_order() {
    for (size_t i = 0; i < kCatalog.size(); ++i) {
        if (static_cast<size_t>(kCatalog[i].rule) != i) {
            return false;
        }
    }
    return true;
}
static_assert(in_rule_order(), "the catalog has one row per Rule, in its order");

}  // namespace

std::span<const Entry> catalog() {
    return kCatalog;
}

const Entry& entry(Rule rule) {
    return kCatalog[static_cast<size_t>(rule)];
}

std::string anchor(Rule rule) {
    return std::string("docs/check.md#") + entry(rule).name;
}

}  // namespace uroce::check
