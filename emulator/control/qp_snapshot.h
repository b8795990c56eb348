// Every QP as structured data, for `uroce qp` and the console: state and
// where it came from, peer, PSNs, queues, READ/atomic resources, retry
// budgets, the next timer, the last NAK and the transitions it took.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace uroce {

class Context;

struct QpSelection {
    std::string device;           // empty: every device
    std::optional<uint32_t> qpn;  // none: every QP
};

// The clients to report on, each with its pid, in the order they opened.
using ClientList = std::vector<std::pair<pid_t, const Context*>>;

// {"qps": [...]} with one object per QP the selection names, by device and
// QPN. `now` is when the snapshot is taken (times are reported relative to
// it and as Unix milliseconds).
nlohmann::json qp_snapshot(const ClientList& clients, const QpSelection& selection,
                           std::chrono::steady_clock::time_point now);

}  // namespace uroce
