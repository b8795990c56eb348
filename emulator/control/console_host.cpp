#include "control/console_host.h"

#include <arpa/inet.h>

#include "control/packet_json.h"
#include "control/qp_snapshot.h"
#include "control/server.h"
#include "control/session.h"
#include "control/wire_controls.h"
#include "net/interfaces.h"
#include "util/log.h"

namespace uroce {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

json objects_json(const ObjectCounts& c) {
    return {{"pd", c.pd},
            {"mr", c.mr},
            {"mw", c.mw},
            {"cq", c.cq},
            {"qp", c.qp},
            {"srq", c.srq},
            {"wq", c.wq},
            {"rwq_ind_table", c.rwq_ind_table},
            {"ah", c.ah},
            {"xrcd", c.xrcd},
            {"comp_channel", c.comp_channel},
            {"dm", c.dm},
            {"dm_bytes", c.dm_bytes}};
}

json counters_json(const DeviceStats& stats) {
    json out = json::object();
#define UROCE_COUNTER_JSON(name, text) out[#name] = stats.name;
    UROCE_DEVICE_COUNTERS(UROCE_COUNTER_JSON)
#undef UROCE_COUNTER_JSON
    return out;
}

const char* fate_name(PacketLog::Fate fate) {
    switch (fate) {
        case PacketLog::Fate::kSent:
            return "sent";
        case PacketLog::Fate::kLost:
            return "lost";
        case PacketLog::Fate::kHeld:
            return "held";
        case PacketLog::Fate::kReleased:
            return "released";
    }
    return "sent";
}

std::optional<rpc::StepAction> step_action(const std::string& name) {
    static constexpr std::pair<const char*, rpc::StepAction> kActions[] = {
        {"pause", rpc::StepAction::kPause},
        {"next", rpc::StepAction::kNext},
        {"drop", rpc::StepAction::kDrop},
        {"duplicate", rpc::StepAction::kDuplicate},
        {"run", rpc::StepAction::kRun}};
    for (const auto& [text, action] : kActions) {
        if (name == text) {
            return action;
        }
    }
    return std::nullopt;
}

// A number from a command, or `fallback` when absent; nullopt when it is
// there but not a number.
std::optional<double> number(const json& command, const char* name, double fallback = 0) {
    if (!command.contains(name)) {
        return fallback;
    }
    if (!command[name].is_number()) {
        return std::nullopt;
    }
    return command[name].get<double>();
}

}  // namespace

json ConsoleHost::snapshot() const {
    const auto now = Clock::now();
    json devices = json::array();
    const ClientList clients = server_.clients();
    for (const auto& device : server_.devices()) {
        const ibv_port_attr& port = device->port_attr();
        json gids = json::array();
        for (const ibv_gid& gid : device->gids()) {
            char text[INET6_ADDRSTRLEN];
            inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
            gids.push_back(text);
        }
        size_t clients_of_device = 0;
        for (const auto& [pid, context] : clients) {
            clients_of_device += &context->device() == device.get();
        }
        const FaultSettings& faults = device->faults().settings();
        devices.push_back({{"name", device->name()},
                           {"address", device->config().address.text()},
                           {"netdev", device->config().netdev},
                           {"port_state", ibv_port_state_str(port.state)},
                           {"max_mtu", 128 << port.max_mtu},
                           {"gids", std::move(gids)},
                           {"clients", clients_of_device},
                           {"objects", objects_json(device->counts())},
                           {"counters", counters_json(device->stats())},
                           {"faults",
                            {{"drop", faults.drop},
                             {"duplicate", faults.duplicate},
                             {"reorder", faults.reorder},
                             {"delay_us", faults.delay.count()}}},
                           {"step", WireControls::step_json(*device, now)}});
    }
    return {{"devices", std::move(devices)}, {"qps", qp_snapshot(clients, {}, now)["qps"]}};
}

json ConsoleHost::record(const PacketLog::Record& r) const {
    std::string device = "device " + std::to_string(r.device_index);
    for (const auto& d : server_.devices()) {
        if (d->index() == r.device_index) {
            device = d->name();
        }
    }
    return {{"seq", r.seq},
            {"device", device},
            {"src", r.src_ip.text()},
            {"dst", r.dest_ip.text()},
            {"src_port", r.src_port},
            {"src_qp", r.src_qpn},
            {"fate", fate_name(r.fate)},
            {"step_id", r.step_id},
            {"packet", packet_json(r.error, r.info, r.headers, r.payload_bytes,
                                   std::span(r.bytes.data(), r.captured), r.total)}};
}

Result ConsoleHost::command(pid_t caller, const json& command) {
    const std::string what = command["command"].get<std::string>();
    if (!command.contains("device") || !command["device"].is_string()) {
        return fail(EINVAL, "%s needs a \"device\" string", what.c_str());
    }
    const std::string device = command["device"].get<std::string>();
    if (device.size() >= rpc::kNameLen) {
        return fail(ENODEV, "no device named %s", device.c_str());
    }
    if (what == "step") {
        rpc::StepRequest request{};
        memcpy(request.device, device.data(), device.size());
        const auto action = command.contains("action") && command["action"].is_string()
                                ? step_action(command["action"].get<std::string>())
                                : std::nullopt;
        if (!action) {
            return fail(EINVAL, "step needs an \"action\": pause, next, drop, duplicate or run");
        }
        request.action = *action;
        const auto packet = number(command, "packet");
        if (!packet || *packet < 0) {
            return fail(EINVAL, "\"packet\" is a held packet's id");
        }
        request.packet = static_cast<uint64_t>(*packet);
        rpc::StepReply reply{};
        return wire_.step(caller, request, reply);
    }
    if (what == "fault") {
        rpc::SetFaultsRequest request{};
        memcpy(request.device, device.data(), device.size());
        const auto drop = number(command, "drop");
        const auto duplicate = number(command, "duplicate");
        const auto reorder = number(command, "reorder");
        const auto delay = number(command, "delay_us");
        if (!drop || !duplicate || !reorder || !delay) {
            return fail(EINVAL, "drop, duplicate, reorder and delay_us are numbers");
        }
        request.drop = *drop;
        request.duplicate = *duplicate;
        request.reorder = *reorder;
        request.delay_us = static_cast<int64_t>(*delay);
        std::vector<UniqueFd> no_schedule;
        return wire_.set_faults(caller, request, no_schedule);
    }
    return fail(EINVAL, "unknown command \"%s\": step or fault", what.c_str());
}

console::Source ConsoleHost::source() {
    return {[this] { return snapshot(); }, [this](const PacketLog::Record& r) { return record(r); },
            [this](const json& c) { return command(owner_pid_, c); }, captured_packet_json};
}

Result ConsoleHost::start(const Session& session, const rpc::ConsoleStartRequest& request,
                          rpc::ConsoleStartReply& reply) {
    if (console_) {
        return fail(EBUSY, "a console runs already at http://127.0.0.1:%u/ for client pid %d",
                    unsigned(console_->port()), owner_pid_);
    }
    if (request.port > 65535) {
        return fail(EINVAL, "port %u is not a TCP port", request.port);
    }
    if (Result r = console::Console::start(io_, static_cast<uint16_t>(request.port),
                                           request.read_only != 0, packet_log_, source(), console_);
        !r) {
        return r;
    }
    owner_ = &session;
    owner_pid_ = session.peer().pid;
    reply.port = console_->port();
    snprintf(reply.token, sizeof(reply.token), "%s", console_->token().c_str());
    log_info("client pid %d started the console on http://127.0.0.1:%u/%s", owner_pid_,
             unsigned(reply.port), request.read_only ? " (read-only)" : "");
    return ok();
}

void ConsoleHost::stop(const char* why) {
    if (!console_) {
        return;
    }
    log_info("console on port %u stopped: %s", unsigned(console_->port()), why);
    console_->stop();
    console_.reset();
    owner_ = nullptr;
}

void ConsoleHost::session_ended(const Session& session) {
    if (console_ && owner_ == &session) {
        stop("its client disconnected");
    }
}

std::string ConsoleHost::status_line() const {
    if (!console_) {
        return "";
    }
    return "console http://127.0.0.1:" + std::to_string(console_->port()) + "/ for client pid " +
           std::to_string(owner_pid_) + (console_->read_only() ? " (read-only)" : "") + "\n";
}

}  // namespace uroce
