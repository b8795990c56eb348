#include "net/packet_log.h"

#include <string.h>

#include <algorithm>

#include "util/ownership.h"

namespace uroce {

// Every engine records into the log: it is switched and read with all of
// them paused.
void PacketLog::enable() {
    ownership::claim_all();
    if (ring_.empty()) {
        ring_.resize(kCapacity);
        first_seq_ = next_seq_;
    }
}

void PacketLog::disable() {
    ownership::claim_all();
    ring_.clear();
    ring_.shrink_to_fit();
}

void PacketLog::record(uint32_t device_index, const wire::IpAddress& src_ip,
                       const wire::IpAddress& dest_ip, uint16_t src_port, uint32_t src_qpn,
                       Fate fate, uint64_t step_id, std::span<const uint8_t> bytes) {
    if (ring_.empty()) {
        return;
    }
    // Engines record from their threads; the console reads in a control
    // turn, with the engines paused.
    std::lock_guard lock(record_mutex_);
    Record& r = ring_[next_seq_ % kCapacity];
    r.seq = next_seq_++;
    r.at = std::chrono::steady_clock::now();
    r.device_index = device_index;
    r.src_ip = src_ip;
    r.dest_ip = dest_ip;
    r.src_port = src_port;
    r.src_qpn = src_qpn;
    r.fate = fate;
    r.step_id = step_id;
    r.total = static_cast<uint32_t>(bytes.size());
    r.captured = static_cast<uint16_t>(std::min(bytes.size(), kMaxBytes));
    memcpy(r.bytes.data(), bytes.data(), r.captured);
    wire::ParsedPacket parsed;
    r.error = wire::parse_headers(bytes, parsed);
    r.info = parsed.info;
    r.headers = parsed.hdr;
    r.payload_bytes = static_cast<uint32_t>(parsed.payload.size());
}

std::vector<const PacketLog::Record*> PacketLog::since(uint64_t seq, uint64_t& missed) const {
    ownership::claim_all();
    std::vector<const Record*> out;
    missed = 0;
    const uint64_t last = next_seq_ - 1;
    if (ring_.empty() || seq >= last) {
        return out;
    }
    const uint64_t oldest = std::max(first_seq_, last >= kCapacity ? last - kCapacity + 1 : 1);
    const uint64_t first = std::max(seq + 1, oldest);
    missed = first - std::max(seq + 1, first_seq_);
    out.reserve(last - first + 1);
    for (uint64_t s = first; s <= last; ++s) {
        out.push_back(&ring_[s % kCapacity]);
    }
    return out;
}

}  // namespace uroce
