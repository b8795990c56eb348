// Where a packet a device sends goes, the send path's last stage
// (engine/send_path.h): to a device of this engine (at once, while a
// requester runs, or at the turn's end), to a device of another engine
// (through its inbox), or to the network.
#include "engine/engine.h"
#include "engine/engines.h"
#include "util/log.h"

namespace uroce {

using transport::Clock;

void Engine::route(Device& from, OutgoingPacket&& packet) {
    const wire::IpAddress& dest_ip = packet.dest_ip;
    const uint16_t src_port = packet.src_port;
    std::vector<uint8_t>& bytes = packet.bytes;
    const size_t socket = sockets_.source(from, packet.sgid);
    const wire::IpAddress& src_ip = sockets_.address_of(socket);
    // A multicast packet reaches each of this daemon's devices with a member
    // of the group, whatever the path, and the group on the sender's
    // network (where other hosts' members are). A device of another engine
    // gets it whatever its groups, which only its engine may read: that
    // engine drops it there unless the device has a member (take_arrivals).
    if (dest_ip.multicast()) {
        for (const auto& device : devices_) {
            if (!owns(*device)) {
                send_to_engine(*device, {device.get(), src_ip, dest_ip, src_port, bytes});
            } else if (device->in_group(dest_ip)) {
                local_.push_back({device.get(), src_ip, dest_ip, src_port, bytes});
            }
        }
        if (DeviceSockets::on_a_network(from)) {
            network_.send(socket, dest_ip, std::move(bytes), src_port);
        } else {
            buffers_.recycle(std::move(bytes));
        }
        return;
    }
    if (Device* local = options_.shortcut ? device_at(dest_ip) : nullptr) {
        if (!owns(*local)) {
            send_to_engine(*local, {local, src_ip, dest_ip, src_port, std::move(bytes)});
            return;
        }
        if (receive_at_once_ && local != &from && !to_gsi(bytes)) {
            const auto now = *receive_at_once_;
            receive_at_once_.reset();
            receive_local(*local, std::move(bytes), src_ip, dest_ip, src_port, now);
            receive_at_once_ = now;
            return;
        }
        local_.push_back({local, src_ip, dest_ip, src_port, std::move(bytes)});
        return;
    }
    network_.send(socket, dest_ip, std::move(bytes), src_port);
}

// A local packet lends its payload to the writes into applications while
// the pool may keep its buffer until they are made.
void Engine::receive_local(Device& to, std::vector<uint8_t>&& bytes, const wire::IpAddress& src_ip,
                           const wire::IpAddress& dest_ip, uint16_t src_port,
                           Clock::time_point now) {
    const bool lent = buffers_.can_lend();
    receive(to, bytes, src_ip, dest_ip, false, src_port, now, lent);
    buffers_.give_back(std::move(bytes), lent);
}

bool Engine::deliver_local(Clock::time_point now) {
    bool any = false;
    // Deliveries may queue answers: take only what is here now.
    for (size_t n = local_.size(); n > 0; --n) {
        LocalPacket packet = std::move(local_.front());
        local_.pop_front();
        if (packet.frame) {
            steer_arrived_frame(*packet.to, packet.bytes);
        } else {
            receive_local(*packet.to, std::move(packet.bytes), packet.src_ip, packet.dest_ip,
                          packet.src_port, now);
        }
        any = true;
    }
    return any;
}

// Collected during the turn, handed over at its end: one lock per engine
// per turn rather than per packet.
void Engine::send_to_engine(Device& to, LocalPacket&& packet) {
    outboxes_[to.engine()].push_back(std::move(packet));
    outboxes_used_ = true;
}

void Engine::send_arrivals() {
    if (!outboxes_used_) {
        return;
    }
    outboxes_used_ = false;
    for (size_t engine = 0; engine < outboxes_.size(); ++engine) {
        if (!outboxes_[engine].empty()) {
            engines_.engine(static_cast<uint32_t>(engine)).accept(outboxes_[engine]);
        }
    }
}

void Engine::accept(std::vector<LocalPacket>& arrivals) {
    {
        std::lock_guard lock(inbox_mutex_);
        const size_t room = kMaxArrivals - std::min(kMaxArrivals, inbox_.size());
        if (arrivals.size() > room) {
            arrivals_dropped_.fetch_add(arrivals.size() - room, std::memory_order_relaxed);
            arrivals.resize(room);
        }
        for (LocalPacket& packet : arrivals) {
            inbox_.push_back(std::move(packet));
        }
        // Before the look at whether the engine sleeps (wake): either it
        // sees the inbox before it sleeps, or it is woken.
        inbox_waiting_.store(true, std::memory_order_seq_cst);
    }
    arrivals.clear();
    wake();
}

void Engine::take_arrivals() {
    if (!inbox_waiting_.load(std::memory_order_acquire)) {
        return;
    }
    {
        std::lock_guard lock(inbox_mutex_);
        arrivals_.swap(inbox_);
        inbox_waiting_.store(false, std::memory_order_relaxed);
    }
    for (LocalPacket& packet : arrivals_) {
        if (packet.dest_ip.multicast() && !packet.frame && !packet.to->in_group(packet.dest_ip)) {
            buffers_.recycle(std::move(packet.bytes));  // not a member's (deliver)
            continue;
        }
        local_.push_back(std::move(packet));
    }
    arrivals_.clear();
    if (const uint64_t dropped = arrivals_dropped_.load(std::memory_order_relaxed);
        dropped != arrivals_dropped_logged_ &&
        send_failures_logged_.allow(RateLimit::Clock::now())) {
        log_warn("engine %u: %llu packets from other engines dropped so far: it fell behind",
                 index_, static_cast<unsigned long long>(dropped));
        arrivals_dropped_logged_ = dropped;
    }
}

}  // namespace uroce
