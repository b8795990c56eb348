#include "control/wire_controls.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "control/packet_json.h"
#include "control/session.h"
#include "device/device_named.h"
#include "util/log.h"
#include "wire/headers.h"
#include "wire/psn.h"

namespace uroce {
namespace {

bool is_probability(double p) {
    return p >= 0 && p <= 1;  // false for NaN
}

// The name of what `fd` refers to, as /proc shows it.
std::string fd_target(int fd) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), error);
    return error ? "descriptor " + std::to_string(fd) : target.native();
}

// The schedule `uroce fault --replay` hands over: request.replayed records
// in fd[0], each checked as a packet's fate could be.
Result read_schedule(const rpc::SetFaultsRequest& request, std::vector<UniqueFd>& fds,
                     std::vector<ScheduledFault>& schedule) {
    if (request.drop != 0 || request.duplicate != 0 || request.reorder != 0 || request.delay_us ||
        request.seeded) {
        return fail(EINVAL, "a replayed schedule goes alone, without probabilities, delay or seed");
    }
    if (request.replayed > rpc::kMaxReplayedFaults) {
        return fail(E2BIG, "a schedule of %u decisions is more than the %u a device replays",
                    request.replayed, rpc::kMaxReplayedFaults);
    }
    if (fds.size() != 1) {
        return fail(EBADF, "a replayed schedule comes as one file descriptor, not %zu", fds.size());
    }
    const size_t bytes = size_t{request.replayed} * sizeof(rpc::ReplayedFault);
    struct stat st;
    if (fstat(fds.front().get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<size_t>(st.st_size) != bytes) {
        return fail(EINVAL, "the schedule's file is not a regular file of %zu bytes (%u decisions)",
                    bytes, request.replayed);
    }
    std::vector<rpc::ReplayedFault> records(request.replayed);
    if (pread(fds.front().get(), records.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
        return fail(EIO, "cannot read the schedule's %zu bytes", bytes);
    }
    for (size_t i = 0; i < records.size(); ++i) {
        const rpc::ReplayedFault& r = records[i];
        if (r.src_qpn > wire::kQpnMask || r.dest_qpn > wire::kQpnMask ||
            r.psn_offset > wire::kPsnMask || r.drop > 1 || r.copies < 1 || r.copies > 2 ||
            r.delay_us > rpc::kMaxFaultDelayUs || r.reserved) {
            return fail(EINVAL, "decision %zu of the schedule is not one a device makes", i + 1);
        }
        schedule.push_back({{r.src_qpn, r.dest_qpn, r.opcode, r.psn_offset, r.mad_tid},
                            r.attempt,
                            {r.drop == 1, r.copies, std::chrono::microseconds(r.delay_us)}});
    }
    return ok();
}

// A file the tool opened for the daemon to record into: writes happen on
// the data path, so a pipe or device that blocks would stall it.
Result check_trace_file(const UniqueFd& file, const std::string& device, const char* what) {
    const int flags = fcntl(file.get(), F_GETFL);
    if (flags < 0 || ((flags & O_ACCMODE) != O_WRONLY && (flags & O_ACCMODE) != O_RDWR)) {
        return fail(EBADF, "the %s file for %s is not open for writing", what, device.c_str());
    }
    struct stat st;
    if (fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return fail(EINVAL, "the %s file for %s is not a regular file", what, device.c_str());
    }
    return ok();
}

}  // namespace

Result WireControls::set_faults(pid_t caller, const rpc::SetFaultsRequest& request,
                                std::vector<UniqueFd>& fds) {
    Device* device;
    if (Result r = find(request.device, device); !r) {
        return r;
    }
    if (request.replayed) {
        std::vector<ScheduledFault> schedule;
        if (Result r = read_schedule(request, fds, schedule); !r) {
            return r;
        }
        if (auto repeated = device->faults().replay(schedule)) {
            return fail(EINVAL, "decision %zu of the schedule decides a packet decided before",
                        *repeated + 1);
        }
        log_info("client pid %d set faults on %s: %s", caller, device->name().c_str(),
                 device->faults().text().c_str());
        return ok();
    }
    for (const auto& [what, p] : {std::pair{"drop", request.drop},
                                  {"duplicate", request.duplicate},
                                  {"reorder", request.reorder}}) {
        if (!is_probability(p)) {
            return fail(EINVAL, "%s probability %.10g is not between 0 and 1", what, p);
        }
    }
    if (request.delay_us < 0 || request.delay_us > rpc::kMaxFaultDelayUs) {
        return fail(EINVAL, "delay %lld us is not between 0 and %lld us (10 s)",
                    static_cast<long long>(request.delay_us),
                    static_cast<long long>(rpc::kMaxFaultDelayUs));
    }
    FaultSettings settings;
    settings.drop = request.drop;
    settings.duplicate = request.duplicate;
    settings.reorder = request.reorder;
    settings.delay = std::chrono::microseconds(request.delay_us);
    if (request.seeded) {
        settings.seed = request.seed;
    }
    device->faults().configure(settings);
    if (device->faults().active()) {
        log_info("client pid %d set faults on %s: %s", caller, device->name().c_str(),
                 device->faults().text().c_str());
    } else {
        log_info("client pid %d cleared the faults on %s", caller, device->name().c_str());
    }
    return ok();
}

Result WireControls::step(pid_t caller, const rpc::StepRequest& request, rpc::StepReply& reply) {
    Device* device;
    if (Result r = find(request.device, device); !r) {
        return r;
    }
    StepGate& gate = device->step_gate();
    const auto action = request.action;
    if (action == rpc::StepAction::kPause || action == rpc::StepAction::kRun) {
        if (action == rpc::StepAction::kPause) {
            gate.pause();
        } else {
            gate.run();
        }
        log_info("client pid %d %s %s's wire", caller,
                 action == rpc::StepAction::kPause ? "paused" : "ran", device->name().c_str());
    } else if (action == rpc::StepAction::kNext || action == rpc::StepAction::kDrop ||
               action == rpc::StepAction::kDuplicate) {
        const StepGate::Packet* packet = gate.find(request.packet);
        if (!packet) {
            return request.packet ? fail(ENOENT, "%s holds no packet %llu", device->name().c_str(),
                                         static_cast<unsigned long long>(request.packet))
                                  : fail(ENOENT, "%s holds no packet%s", device->name().c_str(),
                                         gate.paused() ? "" : ": its wire is not paused");
        }
        snprintf(reply.summary, sizeof(reply.summary), "%s",
                 packet_summary(packet_json(packet->bytes)).c_str());
        if (action == rpc::StepAction::kNext) {
            reply.packet = gate.release(request.packet);
        } else if (action == rpc::StepAction::kDrop) {
            const StepGate::Packet& held = *packet;
            if (packet_log_.enabled()) {
                packet_log_.record(device->index(), device->config().address, held.dest_ip,
                                   held.src_port, held.src_qpn, PacketLog::Fate::kLost, held.id,
                                   held.bytes);
            }
            reply.packet = gate.drop(request.packet);
            ++device->stats().fault_dropped;
        } else {
            reply.packet = gate.duplicate(request.packet);
            ++device->stats().fault_duplicated;
        }
    } else {
        return fail(EINVAL, "step action %u is not pause, next, drop, duplicate or run",
                    static_cast<unsigned>(action));
    }
    reply.paused = gate.paused() ? 1 : 0;
    reply.held = static_cast<uint32_t>(gate.held().size());
    return ok();
}

Result WireControls::start_trace(const Session& session, const rpc::TraceStartRequest& request,
                                 std::vector<UniqueFd>& fds) {
    const std::string name = request.device;
    Device* device;
    if (Result r = find(name, device); !r) {
        return r;
    }
    if (auto it = traces_.find(device); it != traces_.end()) {
        return fail(EBUSY, "%s is already being traced to %s by client pid %d", name.c_str(),
                    it->second.files.c_str(), it->second.owner_pid);
    }
    const bool packets = request.files & rpc::kTracePackets;
    const bool faults = request.files & rpc::kTraceFaults;
    if (request.files & ~(rpc::kTracePackets | rpc::kTraceFaults) || !request.files) {
        return fail(EINVAL, "trace files 0x%x are not packets (1), faults (2) or both",
                    request.files);
    }
    if (fds.size() != size_t{packets} + size_t{faults}) {
        return fail(EBADF, "trace start for %s carries %zu file descriptors, not %d", name.c_str(),
                    fds.size(), int{packets} + int{faults});
    }
    for (size_t i = 0; i < fds.size(); ++i) {
        const bool pcap = packets && i == 0;
        if (Result r = check_trace_file(fds[i], name, pcap ? "trace" : "fault record"); !r) {
            return r;
        }
    }
    std::string files;
    if (packets) {
        files = fd_target(fds.front().get());
        if (!device->trace().open(std::move(fds.front()))) {
            return fail(EIO, "cannot write the pcap header to %s: %s", files.c_str(),
                        strerror(errno));
        }
    }
    if (faults) {
        files += (packets ? ", fault decisions to " : "fault decisions to ") +
                 fd_target(fds.back().get());
        device->faults().record_to(std::move(fds.back()));
    }
    traces_[device] = {&session, session.peer().pid, files, packets, faults};
    log_info("client pid %d started tracing %s to %s", session.peer().pid, name.c_str(),
             files.c_str());
    return ok();
}

Result WireControls::stop_trace(const Session& session, const std::string& name,
                                rpc::TraceReply& reply) {
    if (Result r = query_trace(name, reply); !r) {
        return r;
    }
    Device* device;
    if (Result r = find(name, device); !r) {
        return r;
    }
    const Trace& trace = traces_.at(device);
    if (trace.owner != &session) {
        return fail(EPERM, "the trace of %s belongs to client pid %d", name.c_str(),
                    trace.owner_pid);
    }
    log_info("client pid %d stopped tracing %s: %s recorded to %s", trace.owner_pid, name.c_str(),
             trace_counts(*device, trace).c_str(), trace.files.c_str());
    close_trace(*device);
    traces_.erase(device);
    return ok();
}

Result WireControls::query_trace(const std::string& name, rpc::TraceReply& reply) const {
    Device* device;
    if (Result r = find(name, device); !r) {
        return r;
    }
    auto it = traces_.find(device);
    if (it == traces_.end()) {
        return fail(EINVAL, "%s is not being traced", name.c_str());
    }
    reply.packets = device->trace().packets();
    reply.decisions = device->faults().log().decisions();
    reply.write_failed = trace_failed(*device, it->second) ? 1 : 0;
    return ok();
}

bool WireControls::trace_failed(Device& device, const Trace& trace) {
    return (trace.packets && !device.trace().is_open()) ||
           (trace.faults && !device.faults().log().is_open());
}

std::string WireControls::trace_counts(Device& device, const Trace& trace) {
    std::string counts;
    if (trace.packets) {
        counts = std::to_string(device.trace().packets()) + " packets";
    }
    if (trace.faults) {
        counts += (trace.packets ? ", " : "") + std::to_string(device.faults().log().decisions()) +
                  " fault decisions";
    }
    return counts;
}

void WireControls::close_trace(Device& device) {
    device.trace().close();
    device.faults().log().close();
}

void WireControls::end_traces_of(const Session& session) {
    std::erase_if(traces_, [&](const auto& entry) {
        const auto& [device, trace] = entry;
        if (trace.owner != &session) {
            return false;
        }
        log_info("client pid %d disconnected: stopped tracing %s, %s recorded to %s",
                 trace.owner_pid, device->name().c_str(), trace_counts(*device, trace).c_str(),
                 trace.files.c_str());
        close_trace(*device);
        return true;
    });
}

Result WireControls::find(const std::string& name, Device*& device) const {
    device = device_named(devices_, name);
    return device ? ok() : fail(ENODEV, "no device named %s", name.c_str());
}

nlohmann::json WireControls::step_json(const Device& device,
                                       std::chrono::steady_clock::time_point now) {
    using nlohmann::json;
    json held = json::array();
    for (const StepGate::Packet& packet : device.step_gate().held()) {
        json decoded = packet_json(packet.bytes);
        held.push_back(
            {{"id", packet.id},
             {"to", packet.dest_ip.text()},
             {"held_us",
              std::chrono::duration_cast<std::chrono::microseconds>(now - packet.held_at).count()},
             {"summary", packet_summary(decoded)},
             {"packet", std::move(decoded)}});
    }
    return {{"paused", device.step_gate().paused()},
            {"held", std::move(held)},
            {"max_held", StepGate::kMaxHeld}};
}

Result WireControls::wire_snapshot(const std::string& name, std::string& json_text) const {
    Device* found;
    if (!name.empty()) {
        if (Result r = find(name, found); !r) {
            return r;
        }
    }
    const auto now = std::chrono::steady_clock::now();
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& device : devices_) {
        if (name.empty() || device->name() == name) {
            nlohmann::json entry = step_json(*device, now);
            entry["name"] = device->name();
            devices.push_back(std::move(entry));
        }
    }
    json_text = nlohmann::json{{"devices", std::move(devices)}}.dump();
    return ok();
}

void WireControls::device_removed(const Device& device) {
    for (auto it = traces_.begin(); it != traces_.end(); ++it) {
        if (it->first == &device) {
            close_trace(*it->first);
            log_info("stopped tracing %s: the device was removed", device.name().c_str());
            traces_.erase(it);
            return;
        }
    }
}

std::string WireControls::trace_line(Device& device) const {
    auto it = traces_.find(&device);
    if (it == traces_.end()) {
        return "";
    }
    const Trace& trace = it->second;
    return (trace_failed(device, trace) ? "  trace stopped by a write error (" : "  tracing (") +
           trace_counts(device, trace) + ") to " + trace.files + " for client pid " +
           std::to_string(trace.owner_pid) + "\n";
}

}  // namespace uroce
