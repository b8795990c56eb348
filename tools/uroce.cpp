// uroce: the user's handle on the emulated devices.
//
//   uroce start [--device NAME=IPV4]... [--config FILE] [--udp-port N]
//   uroce stop | status | env
//   uroce exec -- COMMAND [ARGS...]
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/client.h"
#include "protocol/runtime_dir.h"

namespace fs = std::filesystem;
using uroce::RuntimePaths;

namespace {

constexpr const char* kUsage =
    "usage: uroce start [--device NAME=IPV4]... [--config FILE] [--udp-port N]\n"
    "       uroce stop\n"
    "       uroce status\n"
    "       uroce env\n"
    "       uroce exec -- COMMAND [ARGS...]\n"
    "\n"
    "The runtime directory is $UROCE_RUNTIME_DIR, or a per-user default.\n";
constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr auto kStopTimeout = std::chrono::seconds(10);
constexpr int kExitNotRunning = 3;

fs::path self_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path();
}

// Next to the tool in a build tree (bin/ and lib/), else where cmake --install put it.
struct Locations {
    fs::path uroced;
    fs::path bridge;
    fs::path provider;  // empty when installed: libibverbs finds it through uroce.driver
};

Locations locate() {
    const fs::path bin = self_dir();
    Locations where{bin / "uroced", bin.parent_path() / "lib" / "liburoce-bridge.so", {}};
    if (fs::exists(bin.parent_path() / "lib" / "liburoce-rdmav34.so")) {
        where.provider = bin.parent_path() / "lib" / "liburoce";
    } else {
        where.bridge = UROCE_INSTALLED_BRIDGE;
    }
    return where;
}

// The daemon's status text, or empty when no daemon answers.
std::string query_status(const RuntimePaths& paths) {
    std::string why;
    std::unique_ptr<uroce::ControlClient> client(
        uroce::ControlClient::connect(paths.socket().c_str(), "", -1, why));
    std::string text;
    if (!client || client->call_text(uroce::rpc::Op::kStatus, text) != 0) {
        return {};
    }
    return text;
}

int not_running(const RuntimePaths& paths) {
    std::cerr << "uroced is not running (runtime directory " << paths.dir.native()
              << ").\nStart it with: uroce start\n";
    return kExitNotRunning;
}

void print_log_tail(const RuntimePaths& paths) {
    std::ifstream log(paths.log_file());
    std::vector<std::string> lines;
    for (std::string line; std::getline(log, line);) {
        lines.push_back(line);
    }
    const size_t first = lines.size() > 10 ? lines.size() - 10 : 0;
    for (size_t i = first; i < lines.size(); ++i) {
        std::cerr << "  " << lines[i] << "\n";
    }
}

int start(const RuntimePaths& paths, const std::vector<std::string>& daemon_args) {
    if (std::string status = query_status(paths); !status.empty()) {
        std::cout << "uroced is already running.\n" << status;
        return 0;
    }
    std::error_code ignored;
    fs::create_directories(paths.dir, ignored);
    chmod(paths.dir.c_str(), 0700);
    const Locations where = locate();
    std::vector<std::string> args = {where.uroced.native(), "--runtime-dir", paths.dir.native()};
    args.insert(args.end(), daemon_args.begin(), daemon_args.end());

    const pid_t pid = fork();
    if (pid < 0) {
        perror("uroce: fork");
        return 1;
    }
    if (pid == 0) {
        setsid();
        const int null = open("/dev/null", O_RDONLY);
        const int log = open(paths.log_file().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (null < 0 || log < 0) {
            _exit(127);
        }
        dup2(null, STDIN_FILENO);
        dup2(log, STDOUT_FILENO);
        dup2(log, STDERR_FILENO);
        std::vector<char*> argv;
        for (auto& arg : args) {
            argv.push_back(arg.data());
        }
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        fprintf(stderr, "uroce: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
        int wstatus;
        if (waitpid(pid, &wstatus, WNOHANG) == pid) {
            std::cerr << "uroce: uroced exited at start; its log says:\n";
            print_log_tail(paths);
            return 1;
        }
        if (std::string status = query_status(paths); !status.empty()) {
            std::cout << status
                      << "\nTo use the devices: eval \"$(uroce env)\" or uroce exec -- "
                         "COMMAND\n";
            return 0;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGTERM);
    std::cerr << "uroce: uroced did not become ready in " << kStartTimeout.count()
              << " s; its log says:\n";
    print_log_tail(paths);
    return 1;
}

// The daemon's pid from its pid file, if that process is still a uroced.
pid_t daemon_pid(const RuntimePaths& paths) {
    pid_t pid = 0;
    std::ifstream(paths.pid_file()) >> pid;
    if (pid <= 0) {
        return 0;
    }
    std::string comm;
    std::ifstream("/proc/" + std::to_string(pid) + "/comm") >> comm;
    return comm == "uroced" ? pid : 0;
}

// Gone, or a zombie that its parent has not reaped yet.
bool exited(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    stat >> pid_field >> comm >> state;
    return !stat || state == "Z";
}

int stop(const RuntimePaths& paths) {
    const pid_t pid = daemon_pid(paths);
    if (!pid) {
        std::cout << "uroced is not running.\n";
        return 0;
    }
    kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kStopTimeout;
    while (!exited(pid)) {
        if (std::chrono::steady_clock::now() >= deadline) {
            std::cerr << "uroce: uroced (pid " << pid << ") ignored SIGTERM; killing it\n";
            kill(pid, SIGKILL);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::cout << "uroced stopped.\n";
    return 0;
}

// What a program needs to see the devices: the tree, the bridge, the provider.
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

int print_env(const RuntimePaths& paths) {
    for (const auto& [name, value] : environment(paths)) {
        std::cout << "export " << name << "=" << shell_quote(value) << "\n";
    }
    return 0;
}

int exec(const RuntimePaths& paths, std::vector<std::string> command) {
    if (command.empty()) {
        std::cerr << kUsage;
        return 2;
    }
    if (query_status(paths).empty()) {
        std::cerr << "uroce: warning: uroced is not running; no uroce device will be visible\n";
    }
    for (const auto& [name, value] : environment(paths)) {
        setenv(name.c_str(), value.c_str(), 1);
    }
    std::vector<char*> argv;
    for (auto& arg : command) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "uroce: cannot run " << argv[0] << ": " << strerror(errno) << "\n";
    return 127;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << kUsage;
        return 2;
    }
    const std::string command = argv[1];
    std::vector<std::string> rest(argv + 2, argv + argc);
    const RuntimePaths paths{uroce::default_runtime_dir()};
    if (command == "start") {
        return start(paths, rest);
    }
    if (command == "exec") {
        if (!rest.empty() && rest.front() == "--") {
            rest.erase(rest.begin());
        }
        return exec(paths, rest);
    }
    if (!rest.empty()) {
        std::cerr << "uroce " << command << " takes no arguments\n" << kUsage;
        return 2;
    }
    if (command == "stop") {
        return stop(paths);
    }
    if (command == "status") {
        const std::string status = query_status(paths);
        if (status.empty()) {
            return not_running(paths);
        }
        std::cout << status;
        return 0;
    }
    if (command == "env") {
        return print_env(paths);
    }
    if (command == "--help" || command == "-h" || command == "help") {
        std::cout << kUsage;
        return 0;
    }
    std::cerr << "uroce: unknown command '" << command << "'\n" << kUsage;
    return 2;
}
