// uroce stats and uroce fault.
#include <errno.h>
#include <stdlib.h>

#include <iostream>
#include <optional>
#include <sstream>

#include "uroce.h"

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
        double* probability = option == "--drop"        ? &request.drop
                              : option == "--duplicate" ? &request.duplicate
                              : option == "--reorder"   ? &request.reorder
                                                        : nullptr;
        if (probability) {
            const auto p = parse_probability(value);
            if (!p) {
                return usage_error("fault: " + option +
                                   " takes a probability (0.05) or a "
                                   "percentage (5%), not '" +
                                   value + "'");
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
            continue;  // a seed alone sets no fault
        } else {
            return usage_error("fault: unknown option " + option);
        }
        set = true;
    }
    if (clear == set) {
        return usage_error(clear
                               ? "fault: --clear goes alone"
                               : "fault: give --drop, --duplicate, --reorder, --delay or --clear");
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
