// uroce step: step mode on a device's wire. pause holds its outgoing
// packets; next, drop and duplicate act on one held packet (the oldest, or
// the one named by id); run lets them all go. Without an action, lists what
// the device holds.
#include <errno.h>
#include <stdlib.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "uroce.h"

namespace uroce::tool {
namespace {

using nlohmann::json;

struct Action {
    const char* name;
    rpc::StepAction action;
    const char* done;  // what happened to the packet, for the message
};

constexpr Action kActions[] = {
    {"pause", rpc::StepAction::kPause, nullptr},
    {"next", rpc::StepAction::kNext, "released"},
    {"drop", rpc::StepAction::kDrop, "dropped"},
    {"duplicate", rpc::StepAction::kDuplicate, "duplicated (a copy sent, the packet still held)"},
    {"run", rpc::StepAction::kRun, nullptr},
};

int list(ControlClient& client, const std::string& device) {
    rpc::ReportRequest request{};
    set_device_name(request.device, device);
    std::string text;
    if (client.call_report(rpc::Op::kWireSnapshot, request, text) != 0) {
        return refused(client);
    }
    const json snapshot = json::parse(text, nullptr, false);
    if (snapshot.is_discarded() || snapshot["devices"].size() != 1) {
        std::cerr << "uroce: uroced sent a wire snapshot that is not JSON\n";
        return kExitFailure;
    }
    const json& wire = snapshot["devices"][0];
    const json& held = wire["held"];
    std::cout << device << ": wire " << (wire["paused"].get<bool>() ? "paused" : "running") << ", "
              << held.size() << " packets held\n";
    for (const json& packet : held) {
        std::cout << "  " << packet["id"].get<uint64_t>() << "  to "
                  << packet["to"].get<std::string>() << "  " << packet["summary"].get<std::string>()
                  << "  (held " << packet["held_us"].get<int64_t>() / 1000 << " ms)\n";
    }
    return 0;
}

}  // namespace

int step(const RuntimePaths& paths, const Args& args) {
    if (args.empty() || args.front().starts_with("-")) {
        return usage_error("step needs a device");
    }
    if (args.size() > 3) {
        return usage_error("step takes a device, an action and a packet id at most");
    }
    rpc::StepRequest request{};
    if (!set_device_name(request.device, args[0])) {
        return kExitFailure;
    }
    const Action* action = nullptr;
    if (args.size() > 1) {
        for (const Action& candidate : kActions) {
            if (args[1] == candidate.name) {
                action = &candidate;
            }
        }
        if (!action) {
            return usage_error("step: '" + args[1] +
                               "' is not pause, next, drop, duplicate or run");
        }
        request.action = action->action;
    }
    if (args.size() == 3) {
        char* end = nullptr;
        errno = 0;
        request.packet = strtoull(args[2].c_str(), &end, 10);
        if (!action->done || args[2].empty() || *end != '\0' || errno == ERANGE ||
            request.packet == 0) {
            return usage_error(
                "step: only next, drop and duplicate take a packet id, a number "
                "from `uroce step " +
                args[0] + "`");
        }
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    if (!action) {
        return list(*client, args[0]);
    }
    rpc::StepReply reply{};
    if (client->call(request, &reply)) {
        return refused(*client);
    }
    reply.summary[sizeof(reply.summary) - 1] = '\0';
    if (action->done) {
        std::cout << args[0] << ": packet " << reply.packet << " " << action->done << ": "
                  << reply.summary << "; " << reply.held << " held\n";
    } else {
        std::cout << args[0] << ": wire " << (reply.paused ? "paused" : "running") << ", "
                  << reply.held << " held\n";
    }
    return 0;
}

}  // namespace uroce::tool
