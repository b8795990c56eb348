#include "net/fault_log.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "net/fault_injector.h"

namespace uroce {

void FaultLog::settings(const FaultSettings& settings, size_t replayed) {
    if (!file_) {
        return;
    }
    char seed[24] = "null";
    if (settings.seed) {
        snprintf(seed, sizeof(seed), "%" PRIu64, *settings.seed);
    }
    char line[256];
    const int length = snprintf(
        line, sizeof(line),
        "{\"faults\":{\"drop\":%.17g,\"duplicate\":%.17g,\"reorder\":%.17g,\"delay_us\":%lld,"
        "\"seed\":%s,\"replay\":%zu}}\n",
        settings.drop, settings.duplicate, settings.reorder,
        static_cast<long long>(settings.delay.count()), seed, replayed);
    write_line(line, length);
}

void FaultLog::decision(const PacketIdentity& packet, uint32_t attempt,
                        const FaultVerdict& verdict) {
    if (!file_) {
        return;
    }
    char line[256];
    const int length = snprintf(
        line, sizeof(line),
        "{\"src_qpn\":%u,\"dest_qpn\":%u,\"opcode\":%u,\"psn_offset\":%u,\"mad_tid\":%" PRIu64
        ",\"attempt\":%u,\"drop\":%s,\"copies\":%d,\"delay_us\":%lld}\n",
        packet.src_qpn, packet.dest_qpn, packet.opcode, packet.psn_offset, packet.mad_tid, attempt,
        verdict.drop ? "true" : "false", verdict.copies,
        static_cast<long long>(verdict.delay.count()));
    write_line(line, length);
    if (file_) {
        ++decisions_;
    }
}

void FaultLog::write_line(const char* line, int length) {
    if (length <= 0 || write(file_.get(), line, static_cast<size_t>(length)) != length) {
        file_.reset();  // the disk is full or the file went away: stop recording
    }
}

}  // namespace uroce
