#include "control/tool_requests.h"

#include <string.h>

#include <algorithm>
#include <array>
#include <memory>

#include "control/coverage_map.h"
#include "control/decode.h"
#include "control/server.h"
#include "control/session.h"

namespace uroce {
namespace {

// A tool request names a device: the name ends within its field.
template <class Request>
Result decode_tool_request(std::span<const std::byte> body, Request& request) {
    Result r = decode(body, request);
    request.device[sizeof(request.device) - 1] = '\0';
    return r;
}

// A request's decoded body, the server's answer, and the reply body.
template <class Request, class Reply, class Serve>
Answer serve(std::span<const std::byte> body, Serve serve_request) {
    Answer answer;
    Request request;
    Reply reply{};
    if constexpr (requires { request.device; }) {
        answer.result = decode_tool_request(body, request);
    } else {
        answer.result = decode(body, request);
    }
    if (answer.result && (answer.result = serve_request(request, reply))) {
        answer.body = bytes_of(reply);
    }
    return answer;
}

using Handler = Answer (*)(Session&, std::span<const std::byte>, std::vector<UniqueFd>&);

constexpr std::array<std::pair<rpc::Op, Handler>, 9> kHandlers = {{
    {rpc::Op::kSetFaults,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
         return serve<rpc::SetFaultsRequest, rpc::Empty>(body, [&](auto& request, auto&) {
             return s.server().wire().set_faults(s.peer().pid, request, fds);
         });
     }},
    {rpc::Op::kStep,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::StepRequest, rpc::StepReply>(body, [&](auto& request, auto& reply) {
             return s.server().wire().step(s.peer().pid, request, reply);
         });
     }},
    {rpc::Op::kCoverage,
     [](Session&, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         Answer answer;
         rpc::CoverageRequest request;
         if ((answer.result = decode(body, request))) {
             auto reply = std::make_unique<rpc::CoverageReply>();  // large
             if ((answer.result = read_coverage(request, *reply))) {
                 answer.body = bytes_of(*reply);
             }
         }
         return answer;
     }},
    {rpc::Op::kConsoleStart,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::ConsoleStartRequest, rpc::ConsoleStartReply>(
             body, [&](auto& request, auto& reply) {
                 return s.server().console().start(s, request, reply);
             });
     }},
    {rpc::Op::kTraceStart,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
         return serve<rpc::TraceStartRequest, rpc::Empty>(body, [&](auto& request, auto&) {
             return s.server().wire().start_trace(s, request, fds);
         });
     }},
    {rpc::Op::kReset,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::DeviceRequest, rpc::ResetReply>(body, [&](auto& request, auto& reply) {
             return s.server().reset(s.peer().pid, request.device, reply);
         });
     }},
    {rpc::Op::kStats,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::DeviceRequest, rpc::StatsReply>(body, [&](auto& request, auto& reply) {
             std::string text;
             Result r = s.server().stats_text(request.device, text);
             if (r) {
                 memcpy(reply.text, text.c_str(), text.size() + 1);  // stats_text bounds it
             }
             return r;
         });
     }},
    {rpc::Op::kTraceStop,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::DeviceRequest, rpc::TraceReply>(body, [&](auto& request, auto& reply) {
             return s.server().wire().stop_trace(s, request.device, reply);
         });
     }},
    {rpc::Op::kTraceQuery,
     [](Session& s, std::span<const std::byte> body, std::vector<UniqueFd>&) {
         return serve<rpc::DeviceRequest, rpc::TraceReply>(body, [&](auto& request, auto& reply) {
             return s.server().wire().query_trace(request.device, reply);
         });
     }},
}};

Handler handler_of(rpc::Op op) {
    for (const auto& [handled, handler] : kHandlers) {
        if (handled == op) {
            return handler;
        }
    }
    return nullptr;
}

}  // namespace

bool ToolRequests::handles(rpc::Op op) {
    return handler_of(op) || is_report(op);
}

bool ToolRequests::is_report(rpc::Op op) {
    return op == rpc::Op::kStatus || op == rpc::Op::kQpSnapshot || op == rpc::Op::kWireSnapshot ||
           op == rpc::Op::kCheckReport || op == rpc::Op::kCoverageMap;
}

void ToolRequests::request(const rpc::RequestHeader& header, std::span<const std::byte> body,
                           std::vector<UniqueFd>& fds) {
    if (is_report(header.op)) {
        report_page(header, body);
        return;
    }
    const Answer answer = handler_of(header.op)(session_, body, fds);
    session_.reply(header, answer.result, answer.body);
}

Result ToolRequests::make_report(rpc::Op op, const rpc::ReportRequest& request) {
    Server& server = session_.server();
    switch (op) {
        case rpc::Op::kStatus:
            report_ = server.status_text();
            return ok();
        case rpc::Op::kCheckReport:
            report_ = server.check_findings().json();
            return ok();
        case rpc::Op::kCoverageMap:
            report_ = coverage_map_json();
            return ok();
        case rpc::Op::kWireSnapshot:
            return server.wire().wire_snapshot(request.device, report_);
        default: {
            QpSelection selection{request.device, std::nullopt};
            if (request.has_qpn) {
                selection.qpn = request.qpn;
            }
            return server.qp_snapshot(selection, report_);
        }
    }
}

void ToolRequests::report_page(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::ReportRequest request{};
    if (Result r = decode(body, request); !r) {
        session_.reply(header, r, {});
        return;
    }
    request.device[sizeof(request.device) - 1] = '\0';
    if (request.offset == 0) {
        report_op_ = header.op;
        if (Result r = make_report(header.op, request); !r) {
            session_.reply(header, r, {});
            return;
        }
    } else if (header.op != report_op_) {
        session_.reply(
            header,
            fail(EINVAL,
                 "a report page at offset %llu asks for another report than the one being read",
                 static_cast<unsigned long long>(request.offset)),
            {});
        return;
    }
    if (request.offset > report_.size()) {
        session_.reply(header,
                       fail(EINVAL, "report offset %llu is past the report's %zu bytes",
                            static_cast<unsigned long long>(request.offset), report_.size()),
                       {});
        return;
    }
    const size_t page = std::min(rpc::kReportPageBytes, report_.size() - size_t(request.offset));
    const rpc::ReportReply head{report_.size()};
    std::vector<std::byte> out = bytes_of(head);
    const auto text = std::as_bytes(std::span(report_).subspan(request.offset, page));
    out.insert(out.end(), text.begin(), text.end());
    session_.reply(header, ok(), out);
}

}  // namespace uroce
