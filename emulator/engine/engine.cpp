#include "engine/engine.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <stdexcept>

#include "engine/engines.h"
#include "engine/frame_steering.h"
#include "net/interfaces.h"
#include "transport/completion.h"
#include "transport/invariants.h"
#include "transport/receive_queue.h"
#include "util/client_pipe.h"
#include "util/coverage.h"
#include "util/log.h"
#include "util/ownership.h"
#include "wire/packet.h"
#include "wire/psn.h"
#include "wire/udp_port.h"

namespace uroce {
namespace {

using transport::Clock;

// How often a busy loop looks at the control plane: each look is a syscall
// (epoll_wait), which the data path should not pay on every turn.
constexpr auto kControlPoll = std::chrono::microseconds(20);
// Request packets all QPs together send in one turn, at most: what one turn
// reads from a socket. A thousand QPs, each with a window of 128 packets,
// would otherwise overrun the receiving socket, and go-back-N would send the
// overflow again, and again.
constexpr uint32_t kTurnPackets = UdpNetwork::kMaxReceivesPerPoll;

}  // namespace

Engine::Engine(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
               const EngineOptions& options, Engines& engines, uint32_t index)
    : io_(io),
      devices_(devices),
      options_(options),
      engines_(engines),
      index_(index),
      doorbell_(engines.doorbell()),
      network_(options.udp_port, options.socket_io),
      transport_(*this),
      send_path_(*this, sockets_, buffers_, engines.packet_log(), network_.port()),
      outboxes_(engines.size()),
      wake_wait_(io),
      doorbell_wait_(io),
      network_wait_(io),
      timer_(io) {
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) {
        throw std::runtime_error("cannot create an engine's eventfd");
    }
    for (const auto& device : devices_) {
        if (!owns(*device)) {
            continue;
        }
        if (Result r = add_device(*device); !r) {
            if (r.error == EADDRINUSE) {
                throw AddressInUse(r.message);
            }
            throw std::runtime_error(r.message);
        }
    }
    wake_wait_.assign(dup(wake_.get()));
    doorbell_wait_.assign(dup(doorbell_.eventfd()));
    network_wait_.assign(dup(network_.wait_fd()));
    network_.on_sent([this](std::vector<uint8_t>&& bytes) { buffers_.recycle(std::move(bytes)); });
    // Received packets lend their payloads to the writes into applications
    // until the network refills its receive buffers.
    network_.on_refill([this] { transport_.finish_placements(); });
    network_.on_send_failed(
        [this](size_t socket, const wire::IpAddress& dest_ip, int error, unsigned packets) {
            send_failed(socket, dest_ip, error, packets);
        });
}

Engine::~Engine() = default;

Result Engine::add_device(Device& device) {
    ownership::touch(index_);
    if (Result r = sockets_.open(device, 0, device.config().address); !r) {
        return r;
    }
    sockets_.follow_gids(device);
    device.set_doorbell(&doorbell_);
    sockets_.listen_to_groups(device);
    own_.push_back(&device);
    return ok();
}

void Engine::follow_gids(Device& device) {
    ownership::touch(index_);
    sockets_.follow_gids(device);
}

void Engine::remove_device(const Device& device) {
    forget_packets(device);
    std::erase(own_, &device);
    sockets_.close_all(device);
}

void Engine::forget_packets(const Device& device) {
    ownership::touch(index_);
    const auto to_device = [&](const LocalPacket& p) { return p.to == &device; };
    std::erase_if(local_, to_device);
    {
        std::lock_guard lock(inbox_mutex_);
        std::erase_if(inbox_, to_device);
    }
    for (auto& outbox : outboxes_) {
        std::erase_if(outbox, to_device);
    }
    send_path_.forget(device);
}

Device* Engine::device_at(const wire::IpAddress& address) const {
    return engines_.device_at(address);
}

void Engine::send(Device& from, const Qp& qp, uint8_t sgid, const wire::IpAddress& dest_ip,
                  const wire::PacketHeaders& headers, std::span<const std::byte> payload) {
    send_from(from, qp.qpn, sgid, dest_ip, headers, payload);
}

void Engine::send_mad(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                      std::span<const std::byte> mad) {
    ownership::touch(index_);
    coverage::cm_message(true, std::span(reinterpret_cast<const uint8_t*>(mad.data()), mad.size()));
    wire::PacketHeaders headers;
    headers.bth.opcode = wire::make_opcode(wire::Service::kUd, wire::Operation::kSendOnly);
    headers.bth.dest_qp = wire::kGsiQpn;
    headers.bth.psn = gsi_psn_++ & wire::kPsnMask;
    headers.deth.qkey = wire::kGsiQkey;
    headers.deth.src_qp = wire::kGsiQpn;
    send_from(from, wire::kGsiQpn, sgid, dest_ip, headers, mad);
}

void Engine::send_from(Device& from, uint32_t src_qpn, uint8_t sgid, const wire::IpAddress& dest_ip,
                       const wire::PacketHeaders& headers, std::span<const std::byte> payload) {
    const size_t socket = sockets_.source(from, sgid);
    const wire::IpAddress& src_ip = sockets_.address_of(socket);
    Device* local = options_.shortcut ? device_at(dest_ip) : nullptr;
    // The QP's own source port; over UDP, one the daemon can send from (a
    // device on loopback sends from the daemon's port, which is what its
    // peers of this daemon take: takes_only_own).
    const uint16_t wanted = wire::roce_source_port(src_qpn);
    const uint16_t src_port = local                  ? wanted
                              : takes_only_own(from) ? network_.port()
                                                     : network_.source_port(socket, wanted);
    const auto addresses = wire::IcrcAddresses::between(src_ip, dest_ip, src_port, network_.port());
    const auto data = std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    std::vector<uint8_t> bytes = buffers_.take();
    bytes.resize(wire::packet_size(*wire::opcode_info(headers.bth.opcode), payload.size()));
    // The ICRC matters on the wire and in traces; a packet between two of
    // this daemon's devices that nobody records does without.
    const bool icrc = !local || from.traced() || local->traced();
    if (wire::build_packet(headers, data, icrc ? &addresses : nullptr, bytes).error !=
        wire::BuildError::kOk) {
        return;
    }
    ++from.stats().sent_pkts;
    send_path_.send(from, {sgid, dest_ip, src_port, src_qpn, std::move(bytes)});
}

// The segment joins every device of the daemon. As a NIC's embedded switch
// loops a port's frames back to its own flow rules, the sending device
// steers the frame too, to every QP but the one that sent it. A device on
// a network also puts the frame on its interface.
void Engine::send_frame(Device& from, const Qp& sender, std::span<const std::byte> frame) {
    const auto bytes = std::span(reinterpret_cast<const uint8_t*>(frame.data()), frame.size());
    from.trace().record_frame(bytes);
    if (!steer_frame(from, frame, &sender)) {
        ++from.stats().raw_unmatched;
    }
    for (const auto& device : devices_) {
        if (device.get() == &from) {
            continue;
        }
        if (!owns(*device)) {
            send_to_engine(*device, {device.get(), {}, {}, 0, {bytes.begin(), bytes.end()}, true});
            continue;
        }
        steer_arrived_frame(*device, bytes);
    }
    if (DeviceSockets::on_a_network(from) && sockets_.open_frames(from)) {
        if (const int error = network_.send_frame(DeviceSockets::own(from), bytes)) {
            ++from.stats().send_err;
            log_send_failure(from, "a frame not sent on %s: %s", from.config().netdev.c_str(),
                             strerror(error));
        }
    }
}

// A frame another device of the daemon sent: the device's rules take it.
void Engine::steer_arrived_frame(Device& to, std::span<const uint8_t> frame) {
    to.trace().record_frame(frame);
    if (!steer_frame(to, std::as_bytes(frame))) {
        ++to.stats().raw_unmatched;
    }
}

// A frame from the device's interface: what its rules take (the rest is
// the host's, as a NIC passes it to the kernel).
void Engine::receive_frame_from_network(size_t index, std::span<const uint8_t> frame) {
    if (Device* device = sockets_.device_of(index)) {
        device->trace().record_frame(frame);
        steer_frame(*device, std::as_bytes(frame));
    }
}

void Engine::receive(Device& to, std::span<const uint8_t> bytes, const wire::IpAddress& src_ip,
                     const wire::IpAddress& dest_ip, bool from_udp, uint16_t src_port,
                     Clock::time_point now, bool lent) {
    transport_.receive(to, bytes, {src_ip, dest_ip, src_port, network_.port(), from_udp, now, lent},
                       *this);
}

void Engine::finish_placements() {
    transport_.finish_placements();
    buffers_.release_lent();
}

void Engine::receive_mad(Device& to, const wire::IpAddress& src_ip, const wire::IpAddress& dest_ip,
                         std::span<const uint8_t> mad) {
    coverage::cm_message(false, mad);
    if (!mad_receiver_) {
        ++to.stats().rcvd_unknown_qp;
    } else if (engines_.size() == 1) {
        mad_receiver_(to, src_ip, dest_ip, mad);
    } else {
        // The CM is the control plane's: its handler runs with the engines
        // paused, on engine 0's thread, and finds the device by its index
        // (it may be deleted meanwhile).
        boost::asio::post(io_,
                          in_control_turn([this, index = to.index(), src_ip, dest_ip,
                                           bytes = std::vector<uint8_t>(mad.begin(), mad.end())] {
                              for (const auto& device : devices_) {
                                  if (device->index() == index) {
                                      mad_receiver_(*device, src_ip, dest_ip, bytes);
                                  }
                              }
                          }));
    }
}

void Engine::qp_touched(const Qp& qp) {
    if (options_.paranoid) [[unlikely]] {
        if (const Device* device = doorbell_.owner(qp.doorbell_slot).device) {
            check_invariants(*device, qp, "a packet it received");
        }
    }
    activate_if_busy(qp);
}

void Engine::check_invariants(const Device& device, const Qp& qp, const char* step) const {
    const std::string broken = transport::broken_invariant(device, qp);
    if (broken.empty()) {
        return;
    }
    const InCase tagged(qp.owner_case.get());
    log_warn(
        "paranoid: a daemon invariant broke on %s QP 0x%x after %s: %s. This is a bug of "
        "uroced, not of the program; aborting",
        device.name().c_str(), qp.qpn, step, broken.c_str());
    abort();
}

void Engine::activate_if_busy(const Qp& qp) {
    // A QP that the packet moved to ERR has its queues to flush.
    if (transport::Transport::requester_busy(qp) || qp.attr.qp_state == IBV_QPS_ERR) {
        requesters_.add(qp.doorbell_slot);
    }
    if (transport::Transport::responder_busy(qp)) {
        responders_.add(qp.doorbell_slot);
    }
    note_timer(qp);
}

void Engine::note_timer(const Qp& qp) {
    timers_due_ = std::min(timers_due_, transport::Transport::next_deadline(qp));
}

bool Engine::run_queue_pairs(Clock::time_point now) {
    // The QPs clients posted to, or control requests changed, since the last turn.
    doorbell_.take_posted(index_, [this](uint32_t slot) { requesters_.add(slot); });
    // Answers still waiting in a socket may be the ones a timer waits for:
    // timers fire only once they are read, or a slow turn of the loop would
    // retransmit what was acknowledged, and its answers would bury the rest.
    // So too while another engine is behind: packets from the others still
    // to take, or its own sockets' (requests not yet answered, or the
    // answers themselves).
    if (now >= timers_due_ && !network_.backlogged() && !engines_.any_behind()) {
        run_due_timers(now);
    }
    bool any = run_responders();
    for (Device* device : own_) {
        for (auto& [wq_num, wq] : device->wqs()) {
            if (wq->state == IBV_WQS_ERR) {
                any |= transport::flush_wq(*wq);
            }
        }
    }
    any |= run_requesters(now);
    return any;
}

// Each QP with a timer running is among the requesters. They are visited
// only once the earliest timer noted is due, so that many streaming QPs,
// each with a retransmission timer, cost a turn nothing until then.
void Engine::run_due_timers(Clock::time_point now) {
    timers_due_ = transport::kNever;
    for (size_t i = 0; i < requesters_.size(); ++i) {
        const auto [qp, device] = doorbell_.owner(requesters_[i]);
        if (!qp || !transport::wire_service(qp->type)) {
            continue;
        }
        if (transport::Transport::next_deadline(*qp) <= now) {
            const coverage::CaseScope its_case(qp->owner_case->coverage.get());
            transport_.run_timers(*device, *qp, now);
            if (options_.paranoid) [[unlikely]] {
                check_invariants(*device, *qp, "its timers");
            }
        }
        note_timer(*qp);
    }
}

bool Engine::run_responders() {
    bool any = false;
    for (size_t i = 0; i < responders_.size(); ++i) {
        const uint32_t slot = responders_[i];
        const auto [qp, device] = doorbell_.owner(slot);
        if (qp) {
            const coverage::CaseScope its_case(qp->owner_case->coverage.get());
            any |= transport_.run_responder(*device, *qp);
            if (options_.paranoid) [[unlikely]] {
                check_invariants(*device, *qp, "its responder's turn");
            }
        }
        if (!qp || !transport::Transport::responder_busy(*qp)) {
            responders_.remove(slot);
        }
    }
    responders_.compact();
    return any;
}

// The requesters share one turn's budget, starting after the QP that used
// up the last one, so that each of many busy QPs gets its turn; the others'
// work waits in their queues. A QP whose requester ran and that has nothing
// under way leaves the requesters until its doorbell is rung again or a
// packet gives it work.
bool Engine::run_requesters(Clock::time_point now) {
    bool any = false;
    uint32_t budget = kTurnPackets;
    // Packets received at once may add QPs behind `count`: they wait for the next turn.
    const size_t count = requesters_.size();
    const size_t start = count ? first_sender_ % count : 0;
    for (size_t i = 0; i < count && budget > 0; ++i) {
        const size_t at = (start + i) % count;
        const uint32_t slot = requesters_[at];
        const auto [qp, device] = doorbell_.owner(slot);
        if (!qp) {
            requesters_.remove(slot);
            continue;
        }
        bool more;
        const coverage::CaseScope its_case(qp->owner_case->coverage.get());
        if (qp->type == IBV_QPT_RAW_PACKET) {
            more = transport_.run_raw_sender(*device, *qp);  // a burst: perhaps more behind it
            any |= more;
        } else {
            receive_at_once_ = now;
            any |= transport_.run_requester(*device, *qp, now, budget);
            receive_at_once_.reset();
            if (options_.paranoid) [[unlikely]] {
                check_invariants(*device, *qp, "its requester's turn");
            }
            more = transport::Transport::requester_busy(*qp);
            note_timer(*qp);
        }
        if (budget == 0) {
            first_sender_ = at + 1;
            any = true;  // what the budget held back goes next turn
        }
        if (!more) {
            requesters_.remove(slot);
        }
    }
    requesters_.compact();
    return any;
}

void Engine::take_posted_work() {
    ownership::touch(index_);
    // UC and UD send kUnreliableBurst packets per pass: 16 passes send 512.
    constexpr int kPasses = 16;
    for (int pass = 0; pass < kPasses && run_queue_pairs(Clock::now()); ++pass) {
    }
}

void Engine::receive_datagram(size_t index, std::span<const uint8_t> bytes,
                              const wire::IpAddress& src_ip, uint16_t src_port,
                              Clock::time_point now) {
    receive_from_network(index, bytes, src_ip, src_port, sockets_.address_of(index), now);
    finish_placements();
}

void Engine::send_failed(size_t index, const wire::IpAddress& dest_ip, int error,
                         unsigned packets) {
    Device* device = sockets_.device_of(index);
    if (!device) {
        return;
    }
    device->stats().send_err += packets;
    log_send_failure(*device, "%u packet%s to %s not sent: %s (%s's MTU is %u; lost, as on a wire)",
                     packets, packets == 1 ? "" : "s", dest_ip.text().c_str(), strerror(error),
                     device->config().netdev.c_str(), device->link().mtu);
}

void Engine::log_send_failure(const Device& device, const char* format, ...) {
    if (!send_failures_logged_.allow(RateLimit::Clock::now())) {
        return;
    }
    if (send_failures_logged_.suppressed()) {
        log_warn("%llu more failed sends not logged",
                 static_cast<unsigned long long>(send_failures_logged_.suppressed()));
    }
    char text[512];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    log_warn("device %s: %s", device.name().c_str(), text);
}

void Engine::receive_from_network(size_t index, std::span<const uint8_t> bytes,
                                  const wire::IpAddress& src_ip, uint16_t src_port,
                                  const wire::IpAddress& dest_ip, Clock::time_point now) {
    if (index != UdpNetwork::kGroup) {
        Device* device = sockets_.device_of(index);
        if (device && admits(*device, src_ip, src_port)) {
            receive(*device, bytes, src_ip, dest_ip, true, src_port, now, true);
        }
        return;
    }
    // A multicast group's datagram: each device with a member takes it.
    for (Device* device : own_) {
        if (device->in_group(dest_ip) && admits(*device, src_ip, src_port)) {
            receive(*device, bytes, src_ip, dest_ip, true, src_port, now, true);
        }
    }
}

bool Engine::takes_only_own(const Device& device) const {
    return !options_.open && device.config().address.loopback();
}

bool Engine::admits(Device& device, const wire::IpAddress& src_ip, uint16_t src_port) {
    if (!takes_only_own(device) || (src_port == network_.port() && device_at(src_ip))) {
        return true;
    }
    ++device.stats().rcvd_foreign;
    if (foreign_logged_.allow(RateLimit::Clock::now())) {
        if (foreign_logged_.suppressed()) {
            log_warn("%llu more packets from outside the daemon not logged",
                     static_cast<unsigned long long>(foreign_logged_.suppressed()));
        }
        log_warn(
            "device %s: a packet from %s port %u dropped: a device on loopback takes "
            "packets only from this daemon's own devices (uroced --open lets others in)",
            device.name().c_str(), src_ip.text().c_str(), src_port);
    }
    return false;
}

// Moderated completion events whose period has ended.
bool Engine::signal_due_cq_events(Clock::time_point now) {
    bool any = false;
    for (Device* device : own_) {
        std::vector<Cq*> due;
        for (Cq* cq : device->due_cq_events()) {
            if (cq->event_due <= now) {
                due.push_back(cq);
            }
        }
        for (Cq* cq : due) {
            transport::signal_cq_event(*cq);
            any = true;
        }
    }
    return any;
}

bool Engine::run_once(Clock::time_point now) {
    if (index_ == 0 && now - last_control_poll_ >= kControlPoll) {
        io_.poll();
        last_control_poll_ = now;
    }
    take_arrivals();
    // A device with flow rules hears its interface's frames.
    for (Device* device : own_) {
        if (!device->flows().empty() && DeviceSockets::on_a_network(*device)) {
            sockets_.open_frames(*device);
        }
    }
    bool busy = network_.poll(
        [this, now](size_t index, std::span<const uint8_t> bytes, const wire::IpAddress& src_ip,
                    uint16_t src_port, const wire::IpAddress& dest_ip) {
            receive_from_network(index, bytes, src_ip, src_port, dest_ip, now);
        },
        [this](size_t index, std::span<const uint8_t> frame) {
            receive_frame_from_network(index, frame);
        });
    busy |= send_path_.release_stepped(own_);
    busy |= send_path_.release_delayed(now);
    busy |= deliver_local(now);
    busy |= run_queue_pairs(now);
    busy |= deliver_local(now);
    busy |= signal_due_cq_events(now);
    // Before control requests (next turn) may change what the writes were checked against.
    finish_placements();
    network_.submit();
    send_arrivals();
    socket_backlog_.store(network_.backlogged(), std::memory_order_relaxed);
    publish_unpolled(now);
    return busy;
}

}  // namespace uroce
