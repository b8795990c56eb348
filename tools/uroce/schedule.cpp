// uroce fault --replay: reads the fault decisions `uroce trace --faults`
// recorded (one JSON object per line, net/fault_log.h) into the records the
// daemon replays. The settings lines are skipped; every decision line is
// checked, and the first bad one is named by its line number.
#include <fstream>

#include <nlohmann/json.hpp>

#include "uroce.h"

namespace uroce::tool {
namespace {

using nlohmann::json;

// `object[name]` as an unsigned number no larger than `max`.
bool field(const json& object, const char* name, uint64_t max, uint64_t& value) {
    const auto it = object.find(name);
    if (it == object.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max) {
        return false;
    }
    value = it->get<uint64_t>();
    return true;
}

bool decision_of(const json& line, rpc::ReplayedFault& record) {
    uint64_t src_qpn, dest_qpn, opcode, psn_offset, mad_tid, attempt, copies, delay_us;
    const auto drop = line.find("drop");
    if (!field(line, "src_qpn", 0xffffff, src_qpn) ||
        !field(line, "dest_qpn", 0xffffff, dest_qpn) || !field(line, "opcode", 0xff, opcode) ||
        !field(line, "psn_offset", 0xffffff, psn_offset) ||
        !field(line, "mad_tid", UINT64_MAX, mad_tid) ||
        !field(line, "attempt", UINT32_MAX, attempt) || !field(line, "copies", 2, copies) ||
        copies == 0 || !field(line, "delay_us", rpc::kMaxFaultDelayUs, delay_us) ||
        drop == line.end() || !drop->is_boolean()) {
        return false;
    }
    record = {};
    record.src_qpn = static_cast<uint32_t>(src_qpn);
    record.dest_qpn = static_cast<uint32_t>(dest_qpn);
    record.opcode = static_cast<uint8_t>(opcode);
    record.psn_offset = static_cast<uint32_t>(psn_offset);
    record.mad_tid = mad_tid;
    record.attempt = static_cast<uint32_t>(attempt);
    record.drop = drop->get<bool>() ? 1 : 0;
    record.copies = static_cast<uint8_t>(copies);
    record.delay_us = static_cast<uint32_t>(delay_us);
    return true;
}

}  // namespace

bool read_fault_schedule(const std::string& path, std::vector<rpc::ReplayedFault>& schedule,
                         std::string& error) {
    std::ifstream in(path);
    if (!in) {
        error = "cannot read " + path;
        return false;
    }
    std::string text;
    for (size_t number = 1; std::getline(in, text); ++number) {
        const json line = json::parse(text, nullptr, false);
        if (line.is_object() && line.contains("faults")) {
            continue;  // the settings the record was made under
        }
        rpc::ReplayedFault record;
        if (!line.is_object() || !decision_of(line, record)) {
            error = path + ":" + std::to_string(number) +
                    ": not a fault decision as `uroce trace --faults` records them";
            return false;
        }
        if (schedule.size() == rpc::kMaxReplayedFaults) {
            error = path + " holds more than the " + std::to_string(rpc::kMaxReplayedFaults) +
                    " decisions a device replays";
            return false;
        }
        schedule.push_back(record);
    }
    return true;
}

}  // namespace uroce::tool
