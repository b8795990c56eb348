// The uroce command: what its commands share. Each command is in its own
// file (daemon.cpp: start, stop, status; environment.cpp: env, exec;
// observe.cpp: stats, fault; trace.cpp: trace; qp.cpp: qp;
// step.cpp: step; console.cpp: console; check.cpp: check) and returns the
// exit status.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "protocol/client.h"
#include "protocol/messages.h"
#include "protocol/runtime_dir.h"

namespace uroce::tool {

using Args = std::vector<std::string>;

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotRunning = 3;
inline constexpr int kExitCommandNotFound = 127;

extern const char* const kUsage;

// Prints "uroce: <why>" and the usage; returns kExitUsage.
int usage_error(const std::string& why);

// Next to the tool in a build tree (bin/ and lib/), else where cmake --install put it.
struct Locations {
    std::filesystem::path uroced;
    std::filesystem::path bridge;
    // For RDMAV_DRIVERS: the provider's path less "-rdmav<N>.so"; empty
    // when it is not beside the tool (libibverbs finds it by uroce.driver).
    std::filesystem::path provider;
};
Locations locate();

// The daemon's status text, or empty when none came: then `refusal` (when
// given) holds why a daemon that answered refused (out of descriptors, say),
// and stays empty when none answered.
std::string query_status(const RuntimePaths& paths, std::string* refusal = nullptr);
// Says that no daemon runs and how to start one; returns kExitNotRunning.
int not_running(const RuntimePaths& paths);

// A tool connection to the daemon, or nullptr after saying why; `exit_code`
// is then kExitNotRunning or kExitFailure.
std::unique_ptr<ControlClient> connect_tool(const RuntimePaths& paths, int& exit_code);
// Prints why the daemon refused the last call; returns kExitFailure.
int refused(const ControlClient& client);
// Copies a device name into a request; false (after saying so) when no
// device can have that name.
bool set_device_name(char (&field)[rpc::kNameLen], const std::string& name);
// `command`'s request `op` about the device `args` names (every device when
// none), its reply in `reply`: 0, or the exit status (usage, no daemon,
// refused).
int ask_about_device(const RuntimePaths& paths, const Args& args, const std::string& command,
                     rpc::Op op, void* reply, size_t reply_size);

int start(const RuntimePaths& paths, const Args& daemon_args);
int stop(const RuntimePaths& paths);
int status(const RuntimePaths& paths);
int print_env(const RuntimePaths& paths);
// `checking`: the command runs in check mode (UROCE_CHECK=report, unless
// the environment says otherwise).
int exec(const RuntimePaths& paths, Args command, bool checking);
// Every client's objects on the device (or every device) destroyed, its
// faults, step mode and counters as at start.
int reset(const RuntimePaths& paths, const Args& args);
int stats(const RuntimePaths& paths, const Args& args);
int fault(const RuntimePaths& paths, const Args& args);
// The decisions of a `uroce trace --faults` record (schedule.cpp); false
// with `error` set when the file cannot be read or a line is not one.
bool read_fault_schedule(const std::string& path, std::vector<rpc::ReplayedFault>& schedule,
                         std::string& error);
int trace(const RuntimePaths& paths, const Args& args);
int qp(const RuntimePaths& paths, const Args& args);
int step(const RuntimePaths& paths, const Args& args);
int console(const RuntimePaths& paths, const Args& args);
int check(const RuntimePaths& paths, const Args& args);
int coverage(const RuntimePaths& paths, const Args& args);
int show_log(const RuntimePaths& paths, const Args& args);
// Runs argv (a child, not exec) and adds what the device did meanwhile to
// the AFL++ map `shm_id` (coverage.cpp); exits as the child did.
int exec_with_afl_map(const RuntimePaths& paths, char* const argv[], int shm_id);

}  // namespace uroce::tool
