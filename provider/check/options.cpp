// UROCE_CHECK_OPTIONS, read once (options.h).
#include "check/options.h"

#include <stdio.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

namespace uroce::check {
namespace {

// * and ? over the whole of `text`.
bool glob(std::string_view pattern, std::string_view text) {
    if (pattern.empty()) {
        return text.empty();
    }
    if (pattern[0] == '*') {
        for (size_t skip = 0; skip <= text.size(); ++skip) {
            if (glob(pattern.substr(1), text.substr(skip))) {
                return true;
            }
        }
        return false;
    }
    return !text.empty() && (pattern[0] == '?' || pattern[0] == text[0]) &&
           glob(pattern.substr(1), text.substr(1));
}

// An exit status, 0 to 255.
bool exit_status(const std::string& text, int& status) {
    char* end = nullptr;
    const long value = strtol(text.c_str(), &end, 10);
    if (text.empty() || *end || value < 0 || value > 255) {
        return false;
    }
    status = static_cast<int>(value);
    return true;
}

void read_suppressions(const std::string& path, Options& options) {
    std::ifstream file(path);
    if (!file) {
        fprintf(stderr, "uroce: UROCE_CHECK_OPTIONS: cannot read suppressions file %s\n",
                path.c_str());
        return;
    }
    std::string line;
    for (int number = 1; std::getline(file, line); ++number) {
        const size_t start = line.find_first_not_of(" \t");
        if (start == std::string::npos || line[start] == '#') {
            continue;
        }
        const size_t colon = line.find(':', start);
        const size_t end = line.find_last_not_of(" \t\r");
        if (colon == std::string::npos || colon == start || colon == end) {
            fprintf(stderr, "uroce: UROCE_CHECK_OPTIONS: %s:%d is not CLASS:PATTERN; left out\n",
                    path.c_str(), number);
            continue;
        }
        options.suppressions.push_back(
            {line.substr(start, colon - start), line.substr(colon + 1, end - colon)});
    }
}

Options parse(const char* value) {
    Options options;
    std::istringstream settings(value ? value : "");
    std::string setting;
    while (std::getline(settings, setting, ':')) {
        const size_t equals = setting.find('=');
        const std::string name = setting.substr(0, equals);
        const std::string given = equals == std::string::npos ? "" : setting.substr(equals + 1);
        if (setting.empty()) {
            continue;
        } else if (name == "suppressions" && !given.empty()) {
            read_suppressions(given, options);
        } else if (name == "log_path" && !given.empty()) {
            options.log_path = given;
        } else if (name == "exitcode" && exit_status(given, options.exitcode)) {
            continue;
        } else {
            fprintf(stderr,
                    "uroce: UROCE_CHECK_OPTIONS: '%s' is not suppressions=FILE, exitcode=0..255 "
                    "or log_path=PATH; left out\n",
                    setting.c_str());
        }
    }
    return options;
}

}  // namespace

const Options& options() {
    static const Options read = parse(getenv("UROCE_CHECK_OPTIONS"));
    return read;
}

bool pattern_matches(std::string_view pattern, std::string_view text) {
    const bool at_start = !pattern.empty() && pattern.front() == '^';
    if (at_start) {
        pattern.remove_prefix(1);
    }
    const bool at_end = !pattern.empty() && pattern.back() == '$';
    if (at_end) {
        pattern.remove_suffix(1);
    }
    const std::string whole =
        std::string(at_start ? "" : "*") + std::string(pattern) + (at_end ? "" : "*");
    return glob(whole, text);
}

}  // namespace uroce::check
