// uroce log: the daemon's log (the rotated part first), or only the lines
// a case caused: those ending in " [case ID]" (docs/fuzzing.md#case-ids).
#include <fstream>
#include <iostream>

#include "uroce.h"

namespace uroce::tool {

int show_log(const RuntimePaths& paths, const Args& args) {
    std::string case_id;
    if (args.size() == 2 && args[0] == "--case" && !args[1].empty()) {
        case_id = args[1];
    } else if (!args.empty()) {
        return usage_error("log takes --case ID or nothing");
    }
    const std::string tag = " [case " + case_id + "]";
    const auto log_file = paths.log_file();
    bool found = false;
    for (const auto& file : {std::filesystem::path(log_file.native() + ".1"), log_file}) {
        std::ifstream in(file);
        if (!in) {
            continue;
        }
        found = true;
        std::string line;
        while (std::getline(in, line)) {
            if (case_id.empty() || line.ends_with(tag)) {
                std::cout << line << "\n";
            }
        }
    }
    if (!found) {
        std::cerr << "uroce: no log at " << log_file.native()
                  << " (uroce start writes it; a daemon started otherwise logs to its stderr)\n";
        return kExitFailure;
    }
    return 0;
}

}  // namespace uroce::tool
