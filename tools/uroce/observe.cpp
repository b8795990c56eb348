// uroce stats and uroce fault.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <iostream>
#include <optional>
#include <sstream>

#include "uroce.h"
#include "util/unique_fd.h"

namespace uroce::tool {
namespace {

// "0.05" or "5%". Out-of-range values pass: the daemon refuses them.
std::optional<double> parse_probability(std::string text) {
    double scale = 1;
    if (!text.empty() && text.back() == '%') {
        text.pop_back();
        scale = 100;
    }
    char* end = nullptr;
    const double value = strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') {
        return std::nullopt;
    }
    return value / scale;
}

std::optional<long long> parse_integer(const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const long long value = strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) {
        return std::nullopt;
    }
    return value;
}

std::string percent(double p) {
    std::ostringstream out;
    out << p * 100 << "%";
    return out.str();
}

// One of `uroce fault`'s settings into `request`; 0 or a usage error's status.
int fault_option(const std::string& option, const std::string& value,
                 rpc::SetFaultsRequest& request) {
    double* probability = option == "--drop"        ? &request.drop
                          : option == "--duplicate" ? &request.duplicate
                          : option == "--reorder"   ? &request.reorder
                                                    : nullptr;
    if (probability) {
        const auto p = parse_probability(value);
        if (!p) {
            return usage_error("fault: " + option +
                               " takes a probability (0.05) or a percentage (5%), not '" + value +
                               "'");
        }
        *probability = *p;
    } else if (option == "--delay") {
        const auto us = parse_integer(value);
        if (!us) {
            return usage_error("fault: --delay takes microseconds, not '" + value + "'");
        }
        request.delay_us = *us;
    } else if (option == "--seed") {
        const auto seed = parse_integer(value);
        if (!seed || *seed < 0) {
            return usage_error("fault: --seed takes a number, not '" + value + "'");
        }
        request.seed = static_cast<uint64_t>(*seed);
        request.seeded = 1;
    } else {
        return usage_error("fault: unknown option " + option);
    }
    return 0;
}

// uroce fault DEVICE --replay FILE: the decisions go to the daemon in a
// memfd, whose size says how many there are.
int replay_schedule(const RuntimePaths& paths, rpc::SetFaultsRequest& request,
                    const std::string& file) {
    std::vector<rpc::ReplayedFault> schedule;
    std::string error;
    if (!read_fault_schedule(file, schedule, error)) {
        std::cerr << "uroce: " << error << "\n";
        return kExitFailure;
    }
    if (schedule.empty()) {
        std::cerr << "uroce: " << file << " records no fault decision to replay\n";
        return kExitFailure;
    }
    const size_t bytes = schedule.size() * sizeof(schedule[0]);
    UniqueFd memory(memfd_create("uroce-fault-schedule", MFD_CLOEXEC));
    if (!memory || write(memory.get(), schedule.data(), bytes) != static_cast<ssize_t>(bytes)) {
        std::cerr << "uroce: cannot hand the schedule over: " << strerror(errno) << "\n";
        return kExitFailure;
    }
    request.replayed = static_cast<uint32_t>(schedule.size());
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    rpc::Empty none;
    const int fd = memory.get();
    if (client->call(request, &none, std::span(&fd, 1))) {
        return refused(*client);
    }
    std::cout << request.device << ": replaying " << schedule.size() << " fault decisions from "
              << file << "\n";
    return 0;
}

}  // namespace

int stats(const RuntimePaths& paths, const Args& args) {
    auto reply = std::make_unique<rpc::StatsReply>();
    if (int exit_code =
            ask_about_device(paths, args, "stats", rpc::Op::kStats, reply.get(), sizeof(*reply))) {
        return exit_code;
    }
    reply->text[sizeof(reply->text) - 1] = '\0';
    std::cout << reply->text;
    return 0;
}

int fault(const RuntimePaths& paths, const Args& args) {
    if (args.empty() || args.front().starts_with("-")) {
        return usage_error("fault needs a device");
    }
    rpc::SetFaultsRequest request{};
    if (!set_device_name(request.device, args.front())) {
        return kExitFailure;
    }
    bool clear = false;
    bool set = false;
    std::string replay;
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string& option = args[i];
        if (option == "--clear") {
            clear = true;
            continue;
        }
        if (i + 1 == args.size()) {
            return usage_error("fault: " + option + " needs a value");
        }
        const std::string& value = args[++i];
        if (option == "--replay") {
            replay = value;
        } else if (int usage = fault_option(option, value, request)) {
            return usage;
        } else {
            set = set || option != "--seed";  // a seed alone sets no fault
        }
    }
    if (!replay.empty()) {
        if (args.size() != 3) {
            return usage_error("fault: --replay FILE goes alone");
        }
        return replay_schedule(paths, request, replay);
    }
    if (clear == set) {
        return usage_error(clear ? "fault: --clear goes alone"
                                 : "fault: give --drop, --duplicate, --reorder, --delay, "
                                   "--replay or --clear");
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    rpc::Empty none;
    if (client->call(request, &none)) {
        return refused(*client);
    }
    if (clear) {
        std::cout << args.front() << ": faults cleared\n";
    } else {
        std::cout << args.front() << ": drop " << percent(request.drop) << ", duplicate "
                  << percent(request.duplicate) << ", reorder " << percent(request.reorder)
                  << ", delay " << request.delay_us << " us";
        if (request.seeded) {
            std::cout << ", seed " << request.seed;
        }
        std::cout << "\n";
    }
    return 0;
}

}  // namespace uroce::tool
