// The descriptors uroced holds for its clients, per client (process): a
// connection one, a context's async event pipe one, an rdma_cm channel's
// pipe two, a completion channel one. Clients may hold the daemon's
// RLIMIT_NOFILE less a reserve for the daemon itself (its devices'
// sockets, io_uring, the console, the log); one client a quarter of that,
// so that a program that opens channels, contexts and completion channels
// until refused leaves the others room. A descriptor beyond either share
// is refused with EMFILE and a sentence before it is taken.
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include <unordered_map>

#include "util/result.h"

namespace uroce {

class DescriptorLedger {
  public:
    // `limit`: the daemon's RLIMIT_NOFILE.
    explicit DescriptorLedger(size_t limit);

    // `count` more for `client` (what they are for names them in the refusal).
    Result take(pid_t client, size_t count, const char* what);
    void give_back(pid_t client, size_t count);

    size_t held() const { return held_; }
    size_t held_by(pid_t client) const;
    size_t budget() const { return budget_; }              // for all clients
    size_t client_share() const { return client_share_; }  // for one

  private:
    size_t budget_;
    size_t client_share_;
    size_t held_ = 0;
    std::unordered_map<pid_t, size_t> by_client_;
};

}  // namespace uroce
