// The uroce tool's requests, which any connection may send (they name a
// device, or none): counters, faults, step mode, traces, the console,
// reset, coverage (a table of handlers, as dispatcher.cpp's), and the
// reports read page by page (status, QP and wire snapshots, check mode's
// findings, the coverage map).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "control/dispatcher.h"
#include "protocol/messages.h"
#include "util/unique_fd.h"

namespace uroce {

class Session;

class ToolRequests {
  public:
    explicit ToolRequests(Session& session) : session_(session) {}
    // Whether `op` is one of the tool's requests, and one of its reports.
    static bool handles(rpc::Op op);
    static bool is_report(rpc::Op op);
    // Runs a tool request or serves a report's page; answered.
    void request(const rpc::RequestHeader& header, std::span<const std::byte> body,
                 std::vector<UniqueFd>& fds);

  private:
    void report_page(const rpc::RequestHeader& header, std::span<const std::byte> body);
    // Makes the whole report `op` names, for its pages.
    Result make_report(rpc::Op op, const rpc::ReportRequest& request);

    Session& session_;
    // The report this connection is reading page by page.
    std::string report_;
    rpc::Op report_op_ = rpc::Op::kStatus;
};

}  // namespace uroce
