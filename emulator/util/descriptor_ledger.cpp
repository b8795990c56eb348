#include "util/descriptor_ledger.h"

#include <errno.h>

#include <algorithm>

namespace uroce {
namespace {

constexpr size_t kDaemonReserve = 256;  // at most: a quarter of a small limit
constexpr size_t kShares = 4;           // a client's share: a quarter of the budget
constexpr size_t kLeastShare = 8;

}  // namespace

DescriptorLedger::DescriptorLedger(size_t limit)
    : budget_(limit - std::min(kDaemonReserve, limit / 4)),
      client_share_(std::max(kLeastShare, budget_ / kShares)) {}

Result DescriptorLedger::take(pid_t client, size_t count, const char* what) {
    const size_t mine = held_by(client);
    if (mine + count > client_share_) {
        return fail(EMFILE,
                    "uroced has no file descriptors left for pid %d's %s: it holds %zu, the "
                    "most one client may (a quarter of the %zu uroced keeps for its clients)",
                    client, what, mine, budget_);
    }
    if (held_ + count > budget_) {
        return fail(EMFILE,
                    "uroced has no file descriptors left for pid %d's %s: its clients hold "
                    "%zu of %zu; close other clients or raise uroced's RLIMIT_NOFILE",
                    client, what, held_, budget_);
    }
    by_client_[client] += count;
    held_ += count;
    return ok();
}

void DescriptorLedger::give_back(pid_t client, size_t count) {
    auto it = by_client_.find(client);
    if (it == by_client_.end()) {
        return;
    }
    const size_t returned = std::min(count, it->second);
    it->second -= returned;
    held_ -= returned;
    if (it->second == 0) {
        by_client_.erase(it);
    }
}

size_t DescriptorLedger::held_by(pid_t client) const {
    auto it = by_client_.find(client);
    return it == by_client_.end() ? 0 : it->second;
}

}  // namespace uroce
