// uroce check: the findings of check mode the daemon kept (docs/check.md),
// as the programs' reports or as the daemon's JSON.
#include <iostream>
#include <nlohmann/json.hpp>

#include "uroce.h"

namespace uroce::tool {

int check(const RuntimePaths& paths, const Args& args) {
    bool as_json = false;
    for (const std::string& arg : args) {
        if (arg != "--json") {
            return usage_error("check takes only --json, not '" + arg + "'");
        }
        as_json = true;
    }
    int exit_code = 0;
    std::unique_ptr<ControlClient> client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    std::string text;
    if (client->call_report(rpc::Op::kCheckReport, {}, text) != 0) {
        return refused(*client);
    }
    const nlohmann::json report = nlohmann::json::parse(text, nullptr, false);
    if (report.is_discarded() || !report.contains("kept")) {
        std::cerr << "uroce: uroced sent a check report that is not JSON\n";
        return kExitFailure;
    }
    if (as_json) {
        std::cout << report.dump(2) << "\n";
        return 0;
    }
    const uint64_t total = report["total"].get<uint64_t>();
    const size_t kept = report["kept"].size();
    for (const auto& finding : report["kept"]) {
        const std::string case_id = finding.value("case", "");
        std::cout << "pid " << finding["pid"].get<int>() << ", "
                  << finding["device"].get<std::string>()
                  << (case_id.empty() ? "" : ", case " + case_id) << ":\n"
                  << finding["text"].get<std::string>() << "\n";
    }
    std::cout << total << " finding(s)";
    if (total > kept) {
        std::cout << ", the latest " << kept << " shown";
    }
    std::cout << "\n";
    return 0;
}

}  // namespace uroce::tool
