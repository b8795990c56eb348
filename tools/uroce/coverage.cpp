// uroce coverage: the device's coverage map and its counts (docs/fuzzing.md),
// and the AFL++ map `uroce exec` adds the device's coverage to.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "uroce.h"

namespace uroce::tool {
namespace {

using nlohmann::json;

// The counts by id, the daemon's or (`case_id` not empty) that case's;
// null when the daemon refused (the reason is printed). A case of which the
// daemon keeps nothing has counted nothing yet when `none_is_zero`.
std::unique_ptr<rpc::CoverageReply> read_counts(ControlClient& client, bool clear,
                                                const std::string& case_id = {},
                                                bool none_is_zero = false) {
    auto reply = std::make_unique<rpc::CoverageReply>();
    rpc::CoverageRequest request{};
    request.clear = clear ? 1 : 0;
    snprintf(request.case_id, sizeof(request.case_id), "%s", case_id.c_str());
    if (const int error = client.call(request, reply.get()); error != 0) {
        if (error == ENOENT && none_is_zero) {
            *reply = {};  // no ids: nothing counted
            return reply;
        }
        refused(client);
        return nullptr;
    }
    reply->ids = std::min(reply->ids, rpc::kMaxCoverageIds);
    return reply;
}

// The map's entries: {"ids": N, "entries": [{"id", "area", "name"}]}.
bool read_map(ControlClient& client, json& map) {
    std::string text;
    if (client.call_report(rpc::Op::kCoverageMap, {}, text) != 0) {
        refused(client);
        return false;
    }
    map = json::parse(text, nullptr, false);
    if (map.is_discarded() || !map.contains("entries")) {
        std::cerr << "uroce: uroced sent a coverage map that is not JSON\n";
        return false;
    }
    return true;
}

// Where a device entry lands in an AFL++ map of `size` bytes: the last
// `ids` bytes, clear of the program's own edges (which AFL++ numbers from
// 0); in a smaller map, its id modulo the size.
size_t afl_index(uint32_t id, uint32_t ids, size_t size) {
    return size >= ids ? size - ids + id : id % size;
}

// Adds what the device did between `before` and `after` into the AFL++
// shared-memory map `shm_id`, each count saturating at 255.
bool add_to_afl_map(int shm_id, const rpc::CoverageReply& before, const rpc::CoverageReply& after) {
    shmid_ds info{};
    if (shmctl(shm_id, IPC_STAT, &info) != 0 || info.shm_segsz == 0) {
        std::cerr << "uroce: __AFL_SHM_ID " << shm_id << " is no shared memory: " << strerror(errno)
                  << "\n";
        return false;
    }
    auto* map = static_cast<uint8_t*>(shmat(shm_id, nullptr, 0));
    if (map == reinterpret_cast<uint8_t*>(-1)) {
        std::cerr << "uroce: cannot attach the AFL++ map: " << strerror(errno) << "\n";
        return false;
    }
    for (uint32_t id = 0; id < after.ids; ++id) {
        if (after.counts[id] > before.counts[id]) {
            uint8_t& slot = map[afl_index(id, after.ids, info.shm_segsz)];
            slot = static_cast<uint8_t>(std::min<uint32_t>(
                255, slot + std::min<uint32_t>(255, after.counts[id] - before.counts[id])));
        }
    }
    shmdt(map);
    return true;
}

}  // namespace

int coverage(const RuntimePaths& paths, const Args& args) {
    bool as_json = false;
    bool clear = false;
    std::string case_id;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--json") {
            as_json = true;
        } else if (args[i] == "--reset") {
            clear = true;
        } else if (args[i] == "--case" && i + 1 < args.size() && !args[i + 1].empty()) {
            case_id = args[++i];
        } else {
            return usage_error("coverage takes --json, --reset and --case ID, not '" + args[i] +
                               "'");
        }
    }
    int exit_code = 0;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    json map;
    if (!read_map(*client, map)) {
        return kExitFailure;
    }
    const auto counts = read_counts(*client, clear, case_id);
    if (!counts) {
        return kExitFailure;
    }
    size_t lit = 0;
    json entries = json::array();
    for (json& entry : map["entries"]) {
        const uint32_t id = entry["id"].get<uint32_t>();
        const uint32_t count = id < counts->ids ? counts->counts[id] : 0;
        lit += count > 0;
        entry["count"] = count;
        if (as_json) {
            entries.push_back(std::move(entry));
        } else if (count) {
            std::cout << entry["area"].get<std::string>() << "  "
                      << entry["name"].get<std::string>() << "  " << count << "\n";
        }
    }
    if (as_json) {
        std::cout << json{{"ids", counts->ids}, {"lit", lit}, {"entries", std::move(entries)}}.dump(
                         1)
                  << "\n";
    } else {
        std::cout << lit << " of " << map["entries"].size() << " entries lit"
                  << (clear ? " (now cleared)" : "") << "\n";
    }
    return 0;
}

int exec_with_afl_map(const RuntimePaths& paths, char* const argv[], int shm_id) {
    int exit_code = 0;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    // The command's own coverage, whatever runs beside it: its case's, named
    // after the map (each AFL++ instance has its own) unless the harness
    // named it.
    if (!getenv("UROCE_CASE")) {
        setenv("UROCE_CASE", ("afl-" + std::to_string(shm_id)).c_str(), 1);
    }
    const std::string case_id = getenv("UROCE_CASE");
    const auto before = read_counts(*client, false, case_id, true);
    if (!before) {
        return kExitFailure;
    }
    const pid_t child = fork();
    if (child < 0) {
        std::cerr << "uroce: cannot fork: " << strerror(errno) << "\n";
        return kExitFailure;
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a fuzzer that kills us on a timeout kills it too
        execvp(argv[0], argv);
        std::cerr << "uroce: cannot run " << argv[0] << ": " << strerror(errno) << "\n";
        _exit(kExitCommandNotFound);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    const auto after = read_counts(*client, false, case_id, true);
    if (!after || !add_to_afl_map(shm_id, *before, *after)) {
        return kExitFailure;
    }
    if (WIFSIGNALED(status)) {
        // The fuzzer tells a crash by the signal: end by the same one.
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailure;
}

}  // namespace uroce::tool
