// uroce trace: records a device's packets to a pcap file, like tcpdump -w.
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
    if (options.file.empty()) {
        return usage_error("trace needs --pcap FILE");
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
    // The file is the user's: the tool opens it and hands the daemon the descriptor.
    const bool existed = access(options.file.c_str(), F_OK) == 0;
    const int file = open(options.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file < 0) {
        std::cerr << "uroce: cannot open " << options.file << ": " << strerror(errno) << "\n";
        return kExitFailure;
    }
    // Blocked before the trace starts, so that an early Ctrl-C still stops it cleanly.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop_signals, nullptr);

    rpc::Empty none;
    const int started = client->call(rpc::Op::kTraceStart, &request, sizeof(request), &none,
                                     sizeof(none), std::span(&file, 1));
    close(file);
    if (started) {
        if (!existed) {
            unlink(options.file.c_str());
        }
        return refused(*client);
    }
    std::cerr << "uroce: tracing " << options.device << " to " << options.file
              << "; stop with Ctrl-C\n";
    if (wait_for_end(*client, request, options, stop_signals)) {
        return refused(*client);
    }
    rpc::TraceReply result;
    if (trace_call(*client, rpc::Op::kTraceStop, request, result)) {
        return refused(*client);
    }
    std::cout << result.packets << " packets recorded to " << options.file << "\n";
    if (result.write_failed) {
        std::cerr << "uroce: writing " << options.file << " failed; the trace stopped early\n";
        return kExitFailure;
    }
    return 0;
}

}  // namespace uroce::tool
