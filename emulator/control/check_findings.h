// Check mode's findings as the daemon keeps them (docs/check.md): each
// client in check mode sends what it finds; the daemon logs it (a few a
// second) and keeps the latest for `uroce check`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <string>

#include "protocol/messages.h"
#include "util/rate_limit.h"

namespace uroce {

class CheckFindings {
  public:
    // At most this many are kept: an older one goes when a new one comes.
    static constexpr size_t kKept = 256;

    // Whether the daemon asks every client to check (uroced --check).
    bool every_client() const { return every_client_; }
    void set_every_client(bool every_client) { every_client_ = every_client; }
    // `case_id`: the client's UROCE_CASE ("" if none).
    void add(pid_t pid, const std::string& device, const rpc::CheckFindingRequest& finding,
             const std::string& case_id = {});
    // Forgets the device's findings (uroce reset).
    void forget(const std::string& device);
    // {"total": N, "kept": [{"time", "pid", "device", "kind", "qpn", "text", "case"}...]}
    std::string json() const;

  private:
    struct Finding {
        std::chrono::system_clock::time_point time;
        pid_t pid;
        std::string device;
        std::string kind;
        uint32_t qpn;
        std::string text;
        std::string case_id;
    };

    bool every_client_ = false;
    std::deque<Finding> kept_;
    uint64_t total_ = 0;
    RateLimit logged_{20, 5};
};

}  // namespace uroce
