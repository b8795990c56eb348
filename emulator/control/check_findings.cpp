#include "control/check_findings.h"

#include <string.h>

#include <nlohmann/json.hpp>

#include "util/log.h"

namespace uroce {
namespace {

// A field of a client's request, which need not end in a NUL.
std::string bounded(const char* text, size_t size) {
    return std::string(text, strnlen(text, size));
}

}  // namespace

void CheckFindings::add(pid_t pid, const std::string& device,
                        const rpc::CheckFindingRequest& finding, const std::string& case_id) {
    Finding kept{std::chrono::system_clock::now(),
                 pid,
                 device,
                 bounded(finding.kind, sizeof(finding.kind)),
                 finding.qpn,
                 bounded(finding.text, sizeof(finding.text)),
                 case_id};
    ++total_;
    if (logged_.allow(RateLimit::Clock::now())) {
        const std::string first_line = kept.text.substr(0, kept.text.find('\n'));
        log_warn("check: client pid %d on %s: %s%s", pid, device.c_str(), first_line.c_str(),
                 logged_.suppressed() ? " (and findings not logged before it)" : "");
    }
    if (kept_.size() == kKept) {
        kept_.pop_front();
    }
    kept_.push_back(std::move(kept));
}

void CheckFindings::forget(const std::string& device) {
    total_ -= std::erase_if(kept_, [&device](const Finding& f) { return f.device == device; });
}

std::string CheckFindings::json() const {
    nlohmann::json list = nlohmann::json::array();
    for (const Finding& f : kept_) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(f.time.time_since_epoch())
                .count();
        list.push_back({{"time_ms", ms},
                        {"pid", f.pid},
                        {"device", f.device},
                        {"kind", f.kind},
                        {"qpn", f.qpn},
                        {"text", f.text},
                        {"case", f.case_id}});
    }
    // A client's text need not be UTF-8.
    return nlohmann::json{{"total", total_}, {"kept", list}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace uroce
