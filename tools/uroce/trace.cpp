// uroce trace: records a device's packets to a pcap file, like tcpdump -w,
// and its fault decisions (one JSON object per line) for `uroce fault --replay`.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "uroce.h"

namespace uroce::tool {
namespace {

using Clock = std::chrono::steady_clock;

// How often the packet count is checked; also how soon a lost daemon is seen.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

struct TraceOptions {
    std::string device;
    std::string file;
    std::string faults;  // the fault decisions' file
    double seconds = 0;  // 0: no limit
    uint64_t count = 0;  // 0: no limit
};

// Fills `options`; returns 0 or the exit status of a usage error.
int parse(const Args& args, TraceOptions& options) {
    if (args.empty() || args.front().starts_with("-")) {
        return usage_error("trace needs a device");
    }
    options.device = args.front();
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string& option = args[i];
        if (i + 1 == args.size()) {
            return usage_error("trace: " + option + " needs a value");
        }
        const std::string& value = args[++i];
        char* end = nullptr;
        if (option == "--pcap") {
            options.file = value;
        } else if (option == "--faults") {
            options.faults = value;
        } else if (option == "--seconds") {
            options.seconds = strtod(value.c_str(), &end);
            if (value.empty() || *end || !(options.seconds > 0) || std::isinf(options.seconds)) {
                return usage_error("trace: --seconds takes a positive number, not '" + value + "'");
            }
        } else if (option == "--count") {
            errno = 0;
            options.count = strtoull(value.c_str(), &end, 10);
            if (value.empty() || *end || errno || options.count == 0 || value.front() == '-') {
                return usage_error("trace: --count takes a positive integer, not '" + value + "'");
            }
        } else {
            return usage_error("trace: unknown option " + option);
        }
    }
    if (options.file.empty() && options.faults.empty()) {
        return usage_error("trace needs --pcap FILE, --faults FILE or both");
    }
    if (options.count && options.file.empty()) {
        return usage_error("trace: --count counts the packets of --pcap FILE");
    }
    return 0;
}

int trace_call(ControlClient& client, rpc::Op op, const rpc::DeviceRequest& request,
               rpc::TraceReply& reply) {
    return client.call(op, &request, sizeof(request), &reply, sizeof(reply));
}

// Waits for SIGINT or SIGTERM (blocked by the caller), the time limit, the
// packet count, or the end of the trace. Returns 0 or an errno from the daemon.
int wait_for_end(ControlClient& client, const rpc::DeviceRequest& request,
                 const TraceOptions& options, const sigset_t& stop_signals) {
    const auto deadline = options.seconds > 0
                              ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(options.seconds))
                              : Clock::time_point::max();
    for (;;) {
        rpc::TraceReply state;
        if (int error = trace_call(client, rpc::Op::kTraceQuery, request, state)) {
            return error;
        }
        if (state.write_failed || (options.count && state.packets >= options.count)) {
            return 0;
        }
        const auto now = Clock::now();
        if (now >= deadline) {
            return 0;
        }
        const auto wait = std::min<Clock::duration>(kPollInterval, deadline - now);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        const timespec timeout{ns / 1'000'000'000, ns % 1'000'000'000};
        if (sigtimedwait(&stop_signals, nullptr, &timeout) >= 0) {
            return 0;
        }
    }
}

sigset_t stop_signal_set() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    return signals;
}

// Opens the files (they are the user's: the tool opens them and hands the
// daemon the descriptors) and starts the trace with SIGINT and SIGTERM
// blocked, so that an early Ctrl-C still stops it cleanly. 0 or an exit status.
int start_trace(ControlClient& client, const rpc::DeviceRequest& request,
                const TraceOptions& options) {
    std::vector<std::string> files;
    rpc::TraceStartRequest start{};
    memcpy(start.device, request.device, sizeof(start.device));
    if (!options.file.empty()) {
        files.push_back(options.file);
        start.files |= rpc::kTracePackets;
    }
    if (!options.faults.empty()) {
        files.push_back(options.faults);
        start.files |= rpc::kTraceFaults;
    }
    std::vector<bool> existed;
    std::vector<int> fds;
    for (const std::string& file : files) {
        existed.push_back(access(file.c_str(), F_OK) == 0);
        const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            std::cerr << "uroce: cannot open " << file << ": " << strerror(errno) << "\n";
            for (int opened : fds) {
                close(opened);
            }
            return kExitFailure;
        }
        fds.push_back(fd);
    }
    const sigset_t stop_signals = stop_signal_set();
    sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
    rpc::Empty none;
    const int started =
        client.call(rpc::Op::kTraceStart, &start, sizeof(start), &none, sizeof(none), fds);
    for (size_t i = 0; i < fds.size(); ++i) {
        close(fds[i]);
        if (started && !existed[i]) {
            unlink(files[i].c_str());
        }
    }
    return started ? refused(client) : 0;
}

}  // namespace

int trace(const RuntimePaths& paths, const Args& args) {
    TraceOptions options;
    if (int usage = parse(args, options)) {
        return usage;
    }
    rpc::DeviceRequest request{};
    if (!set_device_name(request.device, options.device)) {
        return kExitFailure;
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    if (int failed = start_trace(*client, request, options)) {
        return failed;
    }
    std::string what = options.file;
    if (!options.faults.empty()) {
        what += (what.empty() ? "fault decisions to " : ", fault decisions to ") + options.faults;
    }
    std::cerr << "uroce: tracing " << options.device << " to " << what << "; stop with Ctrl-C\n";
    if (wait_for_end(*client, request, options, stop_signal_set())) {
        return refused(*client);
    }
    rpc::TraceReply result;
    if (trace_call(*client, rpc::Op::kTraceStop, request, result)) {
        return refused(*client);
    }
    if (!options.file.empty()) {
        std::cout << result.packets << " packets recorded to " << options.file << "\n";
    }
    if (!options.faults.empty()) {
        std::cout << result.decisions << " fault decisions recorded to " << options.faults << "\n";
    }
    if (result.write_failed) {
        std::cerr << "uroce: writing " << what << " failed; the trace stopped early\n";
        return kExitFailure;
    }
    return 0;
}

}  // namespace uroce::tool
