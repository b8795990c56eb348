// What the tool and the console do to a device's wire: faults (set, seeded
// or a replayed schedule), step mode (pause, next, drop, duplicate, run)
// and traces of its packets and fault decisions. A trace belongs to the
// session that started it: only it stops the trace, and its end stops the
// trace too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device/device.h"
#include "net/packet_log.h"
#include "protocol/messages.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

class Session;

class WireControls {
  public:
    WireControls(const std::vector<std::unique_ptr<Device>>& devices, PacketLog& packet_log)
        : devices_(devices), packet_log_(packet_log) {}

    // `caller`: the pid the log names; `fds`: a replayed schedule's file.
    Result set_faults(pid_t caller, const rpc::SetFaultsRequest& request,
                      std::vector<UniqueFd>& fds);
    Result step(pid_t caller, const rpc::StepRequest& request, rpc::StepReply& reply);
    // Each device's step mode and held packets as JSON (`device` empty: every device).
    Result wire_snapshot(const std::string& device, std::string& json_text) const;
    // The device's step mode and held packets (the console shows it too).
    static nlohmann::json step_json(const Device& device,
                                    std::chrono::steady_clock::time_point now);

    Result start_trace(const Session& session, const rpc::TraceStartRequest& request,
                       std::vector<UniqueFd>& fds);
    Result stop_trace(const Session& session, const std::string& device, rpc::TraceReply& reply);
    Result query_trace(const std::string& device, rpc::TraceReply& reply) const;
    // The session ended: its traces stop.
    void end_traces_of(const Session& session);
    // The device leaves: its trace stops.
    void device_removed(const Device& device);
    // uroce status's line for the device's trace, if it has one.
    std::string trace_line(Device& device) const;

  private:
    struct Trace {
        const Session* owner;  // compared, never followed
        pid_t owner_pid;
        std::string files;  // as the daemon sees them, for status and the log
        bool packets = false;
        bool faults = false;
    };

    Result find(const std::string& name, Device*& device) const;
    // Whether writing a file of the trace failed, which stopped it.
    static bool trace_failed(Device& device, const Trace& trace);
    // "N packets", "N fault decisions" or both, as recorded so far.
    static std::string trace_counts(Device& device, const Trace& trace);
    static void close_trace(Device& device);

    const std::vector<std::unique_ptr<Device>>& devices_;
    PacketLog& packet_log_;
    std::map<Device*, Trace> traces_;
};

}  // namespace uroce
