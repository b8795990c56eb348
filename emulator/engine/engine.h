// One engine thread's data plane (engine/engines.h: the daemon has one or
// more): it polls the shared send queues of its devices' QPs, runs the
// transport, moves packets (between this daemon's own devices directly,
// to other hosts over UDP) and fires timers. Engine 0 also drives the
// control plane's io_context, between its turns. When idle it tells
// clients to ring the doorbell and sleeps until a doorbell, a packet, a
// timer, another engine or a control request wakes it.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include "device/device.h"
#include "engine/device_sockets.h"
#include "engine/packet_buffers.h"
#include "engine/send_path.h"
#include "engine/slot_set.h"
#include "net/udp_network.h"
#include "queues/doorbell.h"
#include "transport/transport.h"
#include "util/rate_limit.h"
#include "util/unique_fd.h"

namespace uroce {

struct EngineOptions {
    uint16_t udp_port = 4791;
    // Deliver packets between devices of this daemon without UDP (traces and
    // faults still see them).
    bool shortcut = true;
    // uroced --paranoid: each QP's invariants after every step on it.
    bool paranoid = false;
    // How the sockets are driven (net/socket_io.h), chosen once for all.
    SocketIo::Kind socket_io = SocketIo::Kind::kIoUring;
    // uroced --open: devices on loopback take packets from anyone, not only
    // from this daemon's own devices (takes_only_own).
    bool open = false;
};

class Engines;

// Thrown when another socket holds a device's address and port.
struct AddressInUse : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Engine : public transport::PacketOutput,
               public transport::ReceiveSink,
               public SendPath::Route {
  public:
    // Engine `index` of `engines`; it runs the devices whose engine() is
    // `index`.
    Engine(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
           const EngineOptions& options, Engines& engines, uint32_t index);
    ~Engine() override;

    uint32_t index() const { return index_; }
    bool owns(const Device& device) const { return device.engine() == index_; }
    // Opens the network for a device of this engine's appended to the
    // devices (rdma link add).
    Result add_device(Device& device);
    // Before a device leaves the devices (rdma link delete): its sockets
    // close and the packets waiting for or from it go.
    void remove_device(const Device& device);
    // Drops the packets to the device waiting here, and those from it that
    // faults delay (uroce reset).
    void forget_packets(const Device& device);
    // After the device's GID table changed: each address in it that is the
    // interface's gets a socket of its own, and those of addresses gone
    // close.
    void follow_gids(Device& device);
    // Engine 0: runs until the io_context is stopped.
    void run();
    // The other engines, each on a thread of its own: until the engines stop.
    void run_alone();
    // Held by the engine's thread during its turns; Engines::pause takes it
    // once the engine saw pause_requested and let it go between two turns.
    std::mutex& turn() { return turn_; }
    void set_pause_requested(bool requested) {
        pause_requested_.store(requested, std::memory_order_release);
    }
    bool pause_requested() const { return pause_requested_.load(std::memory_order_acquire); }
    // Wakes the engine if it sleeps.
    void wake();
    bool asleep() const;
    // Packets and frames for this engine's devices from other engines (any
    // thread): taken at the start of its next turn.
    struct LocalPacket;
    void accept(std::vector<LocalPacket>& arrivals);
    // Whether packets from other engines wait for its next turn, or its
    // sockets still held unread packets at the end of the last.
    bool behind() const {
        return inbox_waiting_.load(std::memory_order_relaxed) ||
               socket_backlog_.load(std::memory_order_relaxed);
    }
    // The device of this engine with a socket on `address`.
    Device* device_with_socket_at(const wire::IpAddress& address) const {
        return sockets_.device_at(address);
    }

    void send(Device& from, const Qp& qp, uint8_t sgid, const wire::IpAddress& dest_ip,
              const wire::PacketHeaders& headers, std::span<const std::byte> payload) override;
    void send_frame(Device& from, const Qp& sender, std::span<const std::byte> frame) override;

    // The General Services Interface: QP1 of every device. A MAD goes out as
    // a UD datagram to QP1 of `dest_ip`; those that arrive go to `receiver`.
    using MadReceiver =
        std::function<void(Device& to, const wire::IpAddress& src_ip,
                           const wire::IpAddress& dest_ip, std::span<const uint8_t> mad)>;
    void send_mad(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                  std::span<const std::byte> mad);
    void set_mad_receiver(MadReceiver receiver) { mad_receiver_ = std::move(receiver); }

    // A UDP datagram that arrived for device `index` from src_ip:src_port
    // (network order address, host order port): the receive path of the
    // network, and where tests feed crafted packets in. `now`: the engine
    // turn's clock, read once per turn.
    void receive_datagram(size_t index, std::span<const uint8_t> bytes,
                          const wire::IpAddress& src_ip, uint16_t src_port,
                          transport::Clock::time_point now = transport::Clock::now());
    // One turn of the loop without sleeping; true when it did work. `now`:
    // the turn's clock (tests pass their own to make time stand still).
    bool run_once(transport::Clock::time_point now = transport::Clock::now());
    // What clients have posted is taken and sent now, as far as windows
    // and bursts allow in a few passes over the QPs.
    void take_posted_work();

    struct LocalPacket {
        Device* to;
        wire::IpAddress src_ip;
        wire::IpAddress dest_ip;  // the device's address, or a multicast group's
        uint16_t src_port;
        std::vector<uint8_t> bytes;
        bool frame = false;  // a RAW_PACKET frame for the device's flow rules
    };

  private:
    // Builds the packet and sends it on through the send path.
    void send_from(Device& from, uint32_t src_qpn, uint8_t sgid, const wire::IpAddress& dest_ip,
                   const wire::PacketHeaders& headers, std::span<const std::byte> payload);
    void receive_local(Device& to, std::vector<uint8_t>&& bytes, const wire::IpAddress& src_ip,
                       const wire::IpAddress& dest_ip, uint16_t src_port,
                       transport::Clock::time_point now);
    // Makes the turn's writes into applications; the lent buffers are free.
    void finish_placements();
    // SendPath::Route, the send path's last stage (engine/delivery.cpp):
    // to a device of this engine, another engine's inbox, or the network.
    void route(Device& from, OutgoingPacket&& packet) override;
    bool run_queue_pairs(transport::Clock::time_point now);
    void run_due_timers(transport::Clock::time_point now);
    bool run_responders();
    bool run_requesters(transport::Clock::time_point now);
    // After a packet for `qp`: it gets turns if the packet gave it work (or
    // moved it to ERR).
    void activate_if_busy(const Qp& qp);
    // Lowers timers_due_ to the QP's earliest timer.
    void note_timer(const Qp& qp);
    // --paranoid: aborts the daemon, naming the QP's case, when an invariant
    // of the QP broke in `step` (transport/invariants.h).
    void check_invariants(const Device& device, const Qp& qp, const char* step) const;
    bool deliver_local(transport::Clock::time_point now);
    // Packets the kernel would not send: counted (send_err) and logged.
    void send_failed(size_t index, const wire::IpAddress& dest_ip, int error, unsigned packets);
    void receive_from_network(size_t index, std::span<const uint8_t> bytes,
                              const wire::IpAddress& src_ip, uint16_t src_port,
                              const wire::IpAddress& dest_ip, transport::Clock::time_point now);
    // A device on loopback takes over UDP only what this daemon's own
    // devices send from its port, so that another local user (whose
    // sockets cannot be bound where this daemon's are) cannot reach its
    // QPs; --open lets everyone in.
    bool takes_only_own(const Device& device) const;
    // Whether `device` takes a packet from src_ip:src_port; a refusal is
    // counted (rcvd_foreign) and logged, at most 10 lines a second.
    bool admits(Device& device, const wire::IpAddress& src_ip, uint16_t src_port);
    void receive_frame_from_network(size_t index, std::span<const uint8_t> frame);
    // A line in the log for a packet or frame not sent, at most 10 a second.
    void log_send_failure(const Device& device, const char* format, ...)
        __attribute__((format(printf, 3, 4)));
    // Hands a packet to the transport's receive path (transport/receive.cpp);
    // `lent`: its bytes stay until finish_placements().
    void receive(Device& to, std::span<const uint8_t> bytes, const wire::IpAddress& src_ip,
                 const wire::IpAddress& dest_ip, bool from_udp, uint16_t src_port,
                 transport::Clock::time_point now, bool lent);
    // transport::ReceiveSink: MADs to the connection manager, QPs to turns.
    void receive_mad(Device& to, const wire::IpAddress& src_ip, const wire::IpAddress& dest_ip,
                     std::span<const uint8_t> mad) override;
    void qp_touched(const Qp& qp) override;
    bool signal_due_cq_events(transport::Clock::time_point now);
    // Tells the pollers whether some CQ holds completions its program has
    // not taken (queues::DoorbellPage::completions_waiting).
    void publish_unpolled(transport::Clock::time_point now);
    void set_completions_waiting(bool waiting);
    bool work_pending();
    transport::Clock::time_point next_deadline() const;
    void sleep();
    // run_alone's sleep: the turn is let go meanwhile.
    void sleep_alone(std::unique_lock<std::mutex>& turn);
    // Says in the doorbell page whether this engine sleeps; false when work
    // came meanwhile.
    bool fall_asleep();
    void wake_up();
    // What other engines sent: into local_.
    void take_arrivals();
    // What this turn sent to other engines' devices: into their inboxes.
    void send_arrivals();
    void send_to_engine(Device& to, LocalPacket&& packet);
    void steer_arrived_frame(Device& to, std::span<const uint8_t> frame);
    // The device of this daemon with a socket on `address`.
    Device* device_at(const wire::IpAddress& address) const;
    // Whether a packet (its BTH first) is for QP1.
    static bool to_gsi(std::span<const uint8_t> packet) {
        return packet.size() >= wire::kBthBytes &&
               wire::decode_bth(packet.first<wire::kBthBytes>()).dest_qp == wire::kGsiQpn;
    }

    boost::asio::io_context& io_;
    std::vector<std::unique_ptr<Device>>& devices_;  // of the daemon
    std::vector<Device*> own_;                       // this engine's
    EngineOptions options_;
    Engines& engines_;
    const uint32_t index_;
    Doorbell& doorbell_;
    UdpNetwork network_;
    DeviceSockets sockets_{network_};
    transport::Transport transport_;
    std::deque<LocalPacket> local_;
    // The QPs that get turns, by doorbell slot; idle QPs cost a turn
    // nothing. Requesters: posted to, changed by a control request, or with
    // messages or a timer under way (Transport::requester_busy); and where
    // the next turn's requesters start among them. Responders: with requests
    // queued or responses to send (Transport::responder_busy).
    SlotSet requesters_{queues::kDoorbellSlots};
    size_t first_sender_ = 0;
    SlotSet responders_{queues::kDoorbellSlots};
    // No later than the requesters' earliest timer (run_due_timers).
    transport::Clock::time_point timers_due_ = transport::kNever;
    // The turn's clock while requesters run: a packet from one of the
    // daemon's devices to another is then received at once, from the buffer
    // it was just built in (still in the cache, and reused for the next
    // packet), instead of queued for the turn's end. The answers it causes
    // are queued, as are packets to QP1 (the CM) and to the sending device
    // (which may be the sender's own QP, in the middle of its turn).
    std::optional<transport::Clock::time_point> receive_at_once_;
    PacketBuffers buffers_;
    SendPath send_path_;
    // Packets from other engines, beyond which they are dropped (counted
    // and logged): the receiving engine has fallen behind.
    static constexpr size_t kMaxArrivals = 65536;
    std::mutex inbox_mutex_;
    std::vector<LocalPacket> inbox_;     // under inbox_mutex_
    std::vector<LocalPacket> arrivals_;  // inbox_ taken, kept for reuse
    std::atomic<bool> inbox_waiting_{false};
    std::atomic<bool> socket_backlog_{false};
    std::atomic<uint64_t> arrivals_dropped_{0};
    uint64_t arrivals_dropped_logged_ = 0;
    std::vector<std::vector<LocalPacket>> outboxes_;  // by engine
    bool outboxes_used_ = false;
    std::mutex turn_;
    std::atomic<bool> pause_requested_{false};
    UniqueFd wake_;  // an eventfd: another engine, or the control plane, has work for this one
    boost::asio::posix::stream_descriptor wake_wait_;
    bool wake_armed_ = false;
    boost::asio::posix::stream_descriptor doorbell_wait_;
    boost::asio::posix::stream_descriptor network_wait_;
    boost::asio::steady_timer timer_;
    bool doorbell_armed_ = false;
    bool network_armed_ = false;
    bool timer_armed_ = false;
    bool programs_starving_ = false;  // UnpolledCqs::starving() on some device
    MadReceiver mad_receiver_;
    RateLimit send_failures_logged_{10, 1};
    RateLimit foreign_logged_{10, 1};
    uint32_t gsi_psn_ = 0;
    transport::Clock::time_point last_control_poll_{};
};

}  // namespace uroce
