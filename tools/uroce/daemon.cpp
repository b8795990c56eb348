// uroce start, stop and status.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "uroce.h"

namespace fs = std::filesystem;

namespace uroce::tool {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr auto kStopTimeout = std::chrono::seconds(10);

// The last lines the daemon logged since `from` (the log's size when this
// start began: what earlier attempts wrote is not this one's reason).
void print_log_tail(const RuntimePaths& paths, uintmax_t from) {
    std::ifstream log(paths.log_file());
    log.seekg(static_cast<std::streamoff>(from));
    std::vector<std::string> lines;
    for (std::string line; std::getline(log, line);) {
        lines.push_back(line);
    }
    const size_t first = lines.size() > 10 ? lines.size() - 10 : 0;
    for (size_t i = first; i < lines.size(); ++i) {
        std::cerr << "  " << lines[i] << "\n";
    }
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

// uroce start --help: what start does, then the daemon's own options
// (uroced --help, run in the foreground); no daemon is started.
int start_help(const RuntimePaths& paths) {
    std::cout << "usage: uroce start [UROCED OPTIONS]\n\n"
              << "Starts uroced in the background on the runtime directory\n"
              << paths.dir.native() << " (its log: uroced.log there) and returns once its\n"
              << "devices are up. Its options are uroced's:\n\n"
              << std::flush;
    const Locations where = locate();
    const pid_t pid = fork();
    if (pid < 0) {
        perror("uroce: fork");
        return kExitFailure;
    }
    if (pid == 0) {
        execl(where.uroced.c_str(), where.uroced.c_str(), "--help", static_cast<char*>(nullptr));
        fprintf(stderr, "uroce: cannot run %s: %s\n", where.uroced.c_str(), strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : kExitFailure;
}

}  // namespace

int start(const RuntimePaths& paths, const Args& daemon_args) {
    if (std::find(daemon_args.begin(), daemon_args.end(), "--help") != daemon_args.end() ||
        std::find(daemon_args.begin(), daemon_args.end(), "-h") != daemon_args.end()) {
        return start_help(paths);
    }
    if (std::string status = query_status(paths); !status.empty()) {
        std::cout << "uroced is already running.\n" << status;
        return 0;
    }
    std::error_code ignored;
    fs::create_directories(paths.dir, ignored);
    chmod(paths.dir.c_str(), 0700);
    std::error_code no_log;
    uintmax_t log_start = fs::file_size(paths.log_file(), no_log);
    if (no_log) {
        log_start = 0;
    }
    const Locations where = locate();
    std::vector<std::string> args = {where.uroced.native(), "--runtime-dir", paths.dir.native()};
    args.insert(args.end(), daemon_args.begin(), daemon_args.end());

    const pid_t pid = fork();
    if (pid < 0) {
        perror("uroce: fork");
        return kExitFailure;
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
            print_log_tail(paths, log_start);
            return kExitFailure;
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
    print_log_tail(paths, log_start);
    return kExitFailure;
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

int status(const RuntimePaths& paths) {
    std::string refusal;
    const std::string text = query_status(paths, &refusal);
    if (text.empty() && !refusal.empty()) {
        std::cerr << "uroced (pid " << daemon_pid(paths)
                  << ") is running but refusing new clients: " << refusal << "\n";
        return kExitFailure;
    }
    if (text.empty()) {
        return not_running(paths);
    }
    std::cout << text;
    return 0;
}

int reset(const RuntimePaths& paths, const Args& args) {
    rpc::ResetReply reply{};
    if (int exit_code =
            ask_about_device(paths, args, "reset", rpc::Op::kReset, &reply, sizeof(reply))) {
        return exit_code;
    }
    printf("reset %s: %u context(s) lost, %.3f ms\n",
           args.empty() ? "every device" : args.front().c_str(), reply.contexts,
           static_cast<double>(reply.microseconds) / 1000);
    return 0;
}

}  // namespace uroce::tool
