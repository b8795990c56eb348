// uroce env and exec: what a program needs to see the devices.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <iostream>
#include <sstream>
#include <utility>

#include "uroce.h"

namespace uroce::tool {
namespace {

// An AddressSanitizer program checks that its runtime comes first among
// the libraries loaded, and the bridge is preloaded ahead of it: it would
// abort at once ("ASan runtime does not come first"). The bridge replaces
// nothing ASan intercepts (it calls through to what follows it), so the
// order is harmless and the check is turned off, unless the user's own
// $ASAN_OPTIONS names it. Programs without ASan ignore the variable.
std::string asan_options() {
    const std::string order = "verify_asan_link_order=0";
    const char* given = getenv("ASAN_OPTIONS");
    if (!given || !*given) {
        return order;
    }
    return strstr(given, "verify_asan_link_order") ? given : order + ":" + given;
}

// What a program needs to see the devices: the tree, the bridge, the
// provider, and what a sanitized program needs to run with the bridge.
std::vector<std::pair<std::string, std::string>> environment(const RuntimePaths& paths) {
    const Locations where = locate();
    std::vector<std::pair<std::string, std::string>> vars = {
        {"UROCE_RUNTIME_DIR", paths.dir.native()},
        {"SYSFS_PATH", paths.sysfs().native()},
    };
    // A sanitizer build's libraries need the sanitizer runtimes loaded first.
    std::string preload = UROCE_SANITIZER_PRELOAD + where.bridge.native();
    if (const char* old = getenv("LD_PRELOAD"); old && *old) {
        if (std::string(old).find(preload) == std::string::npos) {
            preload += ":" + std::string(old);
        } else {
            preload = old;
        }
    }
    vars.emplace_back("LD_PRELOAD", preload);
    vars.emplace_back("ASAN_OPTIONS", asan_options());
    if (!where.provider.empty()) {
        vars.emplace_back("RDMAV_DRIVERS", where.provider.native());
    }
    return vars;
}

std::string shell_quote(const std::string& value) {
    std::string quoted = "'";
    for (char c : value) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return quoted + "'";
}

// The running daemon's devices and UDP port, as shell comments: a daemon
// whose standard port another holds takes one of its own (uroced.md).
void print_fabric(const RuntimePaths& paths) {
    std::istringstream status(query_status(paths));
    std::string line;
    while (std::getline(status, line)) {
        std::istringstream words(line);
        std::string kind, name, key, address;
        if (words >> kind >> name >> key >> address && kind == "device" && key == "address") {
            std::cout << "# " << name << " on " << address << "\n";
        } else if (line.rfind("udp port ", 0) == 0) {
            std::cout << "# RoCEv2 on " << line.substr(4) << "\n";
        }
    }
}

}  // namespace

int print_env(const RuntimePaths& paths) {
    for (const auto& [name, value] : environment(paths)) {
        std::cout << "export " << name << "=" << shell_quote(value) << "\n";
    }
    print_fabric(paths);
    return 0;
}

int exec(const RuntimePaths& paths, Args command, bool checking) {
    if (command.empty()) {
        return usage_error("exec needs a command");
    }
    if (query_status(paths).empty()) {
        std::cerr << "uroce: warning: uroced is not running; no uroce device will be visible\n";
    }
    for (const auto& [name, value] : environment(paths)) {
        setenv(name.c_str(), value.c_str(), 1);
    }
    if (checking) {
        setenv("UROCE_CHECK", "report", 0);
    }
    std::vector<char*> argv;
    for (auto& arg : command) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    if (const char* shm = getenv("__AFL_SHM_ID")) {
        char* end = nullptr;
        const long id = strtol(shm, &end, 10);
        if (*shm && !*end && id >= 0 && id <= INT32_MAX) {
            return exec_with_afl_map(paths, argv.data(), static_cast<int>(id));
        }
        std::cerr << "uroce: __AFL_SHM_ID '" << shm << "' is not a shared memory id\n";
        return kExitFailure;
    }
    execvp(argv[0], argv.data());
    std::cerr << "uroce: cannot run " << argv[0] << ": " << strerror(errno) << "\n";
    return kExitCommandNotFound;
}

}  // namespace uroce::tool
