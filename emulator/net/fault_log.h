// The record of a device's fault decisions that `uroce trace --faults`
// keeps: one JSON object per line, the settings whenever they change and
// each packet the faults acted on, by identity and attempt
// (net/fault_injector.h), so that two runs compare line by line and
// `uroce fault --replay` meets the same packets with the same fates.
// Written on the data path to a regular file the tool opened; a write that
// fails stops the record.
#pragma once

#include <stdint.h>

#include "util/unique_fd.h"

namespace uroce {

struct FaultSettings;
struct FaultVerdict;
struct PacketIdentity;

class FaultLog {
  public:
    void open(UniqueFd file) {
        file_ = std::move(file);
        decisions_ = 0;
    }
    bool is_open() const { return static_cast<bool>(file_); }
    void close() { file_.reset(); }
    // {"faults":{"drop":..,"duplicate":..,"reorder":..,"delay_us":..,"seed":N|null,"replay":N}}
    void settings(const FaultSettings& settings, size_t replayed);
    // {"src_qpn":..,"dest_qpn":..,"opcode":..,"psn_offset":..,"mad_tid":..,"attempt":..,
    //  "drop":true|false,"copies":1|2,"delay_us":..}
    void decision(const PacketIdentity& packet, uint32_t attempt, const FaultVerdict& verdict);
    uint64_t decisions() const { return decisions_; }

  private:
    void write_line(const char* line, int length);

    UniqueFd file_;
    uint64_t decisions_ = 0;
};

}  // namespace uroce
