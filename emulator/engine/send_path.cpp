#include "engine/send_path.h"

#include "util/coverage.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace uroce {
namespace {

using transport::Clock;
using Fate = PacketLog::Fate;

// What seeded and replayed faults decide by, and their records name
// (net/fault_injector.h): the BTH's opcode, destination QP and PSN (counted
// from the sending QP's first PSN of that direction, which programs often
// choose at random), and a MAD's transaction.
PacketIdentity identity_of(const Device& from, const OutgoingPacket& packet) {
    constexpr size_t kBth = 12;
    constexpr size_t kMadTid = kBth + 8 + 8;  // after the BTH and DETH, 8 bytes into the MAD
    const std::vector<uint8_t>& bytes = packet.bytes;
    PacketIdentity id;
    id.src_qpn = packet.src_qpn;
    if (bytes.size() < kBth) {
        return id;
    }
    const auto be24 = [&bytes](size_t at) {
        return uint32_t{bytes[at]} << 16 | uint32_t{bytes[at + 1]} << 8 | bytes[at + 2];
    };
    id.opcode = bytes[0];
    id.dest_qpn = be24(5);
    uint32_t first_psn = 0;
    if (const Qp* qp = from.qps().find(packet.src_qpn)) {
        const auto* info = wire::opcode_info(id.opcode);
        const bool response = info && info->direction() == wire::Direction::kResponse;
        first_psn = response ? qp->attr.rq_psn : qp->attr.sq_psn;
    }
    id.psn_offset = (be24(9) - first_psn) & wire::kPsnMask;
    if (id.dest_qpn == 1 && bytes.size() >= kMadTid + 8) {
        for (size_t i = 0; i < 8; ++i) {
            id.mad_tid = id.mad_tid << 8 | bytes[kMadTid + i];
        }
    }
    return id;
}

}  // namespace

void SendPath::send(Device& from, OutgoingPacket&& packet) {
    from.trace().record(packet.bytes, sockets_.source_ip(from, packet.sgid), packet.dest_ip,
                        packet.src_port, udp_port_);
    if (!packet.bytes.empty()) {
        coverage::packet(true, packet.bytes[0]);
    }
    if (from.step_gate().paused()) [[unlikely]] {
        const uint64_t id = from.step_gate().hold(packet);
        if (id == 0) {
            ++from.stats().fault_dropped;  // the paused wire is full
        }
        log(from, packet, id ? Fate::kHeld : Fate::kLost, id);
        buffers_.recycle(std::move(packet.bytes));
        return;
    }
    pass_faults(from, std::move(packet));
}

bool SendPath::release_stepped(const std::vector<Device*>& devices) {
    bool any = false;
    for (Device* device : devices) {
        if (!device->step_gate().has_outgoing()) {
            continue;
        }
        for (StepGate::Packet& packet : device->step_gate().take_outgoing()) {
            log(*device, packet, Fate::kReleased, packet.id);
            pass_faults(*device, std::move(packet));
        }
        any = true;
    }
    return any;
}

// Without faults or a console, nothing but the route (the common case,
// kept inline).
void SendPath::pass_faults(Device& from, OutgoingPacket&& packet) {
    if (from.faults().active()) [[unlikely]] {
        apply_faults(from, std::move(packet));
        return;
    }
    log(from, packet, Fate::kSent);
    route_.route(from, std::move(packet));
}

// The faults a device has: loss, duplication, reordering, delay.
void SendPath::apply_faults(Device& from, OutgoingPacket&& packet) {
    const FaultVerdict verdict = from.faults().wants_identity()
                                     ? from.faults().decide(identity_of(from, packet))
                                     : from.faults().decide();
    if (verdict.drop) {
        ++from.stats().fault_dropped;
        log(from, packet, Fate::kLost);
        buffers_.recycle(std::move(packet.bytes));
        return;
    }
    if (verdict.copies > 1) {
        ++from.stats().fault_duplicated;
    }
    const bool delayed = verdict.delay.count() > 0;
    for (int copy = 0; copy < verdict.copies; ++copy) {
        OutgoingPacket one = copy + 1 < verdict.copies ? packet : std::move(packet);
        if (delayed && delayed_.size() >= kMaxDelayed) {
            ++from.stats().fault_dropped;  // the delay line is full
            log(from, one, Fate::kLost);
            continue;
        }
        log(from, one, Fate::kSent);
        if (delayed) {
            delayed_.emplace(Clock::now() + verdict.delay, Delayed{&from, std::move(one)});
        } else {
            route_.route(from, std::move(one));
        }
    }
}

bool SendPath::release_delayed(Clock::time_point now) {
    bool any = false;
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
        Delayed delayed = std::move(delayed_.begin()->second);
        delayed_.erase(delayed_.begin());
        route_.route(*delayed.from, std::move(delayed.packet));
        any = true;
    }
    return any;
}

void SendPath::forget(const Device& device) {
    std::erase_if(delayed_, [&](const auto& entry) { return entry.second.from == &device; });
}

void SendPath::log(const Device& from, const OutgoingPacket& packet, Fate fate, uint64_t step_id) {
    if (packet_log_.enabled()) [[unlikely]] {
        packet_log_.record(from.index(), sockets_.source_ip(from, packet.sgid), packet.dest_ip,
                           packet.src_port, packet.src_qpn, fate, step_id, packet.bytes);
    }
}

}  // namespace uroce
