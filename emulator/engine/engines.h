// The daemon's engine threads (uroced --threads N). Each device belongs to
// one engine (device index mod N), and so do its QPs, CQs, SRQs, sockets,
// timers and counters: only that engine's thread touches them, and the
// data path takes no lock. An atomic is executed by the responder of its
// device's engine, so the atomics of one device stay serialised
// (IBV_ATOMIC_HCA). Packets between devices of different engines go
// through the receiving engine's inbox (engine/delivery.cpp).
//
// Engine 0 runs on the daemon's main thread and drives the control plane's
// io_context. Control handlers (requests, the CM, the console, link news)
// run in control turns (util/ownership.h): a turn pauses, between two of
// its turns, only an engine whose devices it touches (or all of them
// where the whole daemon is its subject), so that it sees and changes
// those devices as with one thread, and the other engines run on.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "device/device.h"
#include "engine/engine.h"
#include "net/packet_log.h"
#include "queues/doorbell.h"
#include "util/ownership.h"

namespace uroce {

class Engines final : public ownership::Pauser {
  public:
    // `threads`: engines, from 1 to queues::kMaxEngines.
    Engines(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
            const EngineOptions& options, uint32_t threads);
    ~Engines();

    uint32_t size() const { return count_; }
    Engine& engine(uint32_t index) { return *engines_[index]; }
    Engine& owner(const Device& device) const { return *engines_[device.engine()]; }
    const Doorbell& doorbell() const { return doorbell_; }
    Doorbell& doorbell() { return doorbell_; }
    // What the devices send, for the console (recorded only while enabled).
    PacketLog& packet_log() { return packet_log_; }

    // Gives a device its engine, which opens its network.
    Result add_device(Device& device);
    void remove_device(const Device& device);
    void forget_packets(const Device& device);
    void follow_gids(Device& device);
    // The CM's MADs leave through the engine of their device.
    void send_mad(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                  std::span<const std::byte> mad) {
        owner(from).send_mad(from, sgid, dest_ip, mad);
    }
    void set_mad_receiver(const Engine::MadReceiver& receiver);
    // The device's engine takes what was posted (before destroy_qp and the like).
    void take_posted_work(const Device& device) { owner(device).take_posted_work(); }
    // The device of this daemon with a socket on `address`, on any engine.
    Device* device_at(const wire::IpAddress& address) const;

    // Runs engine 0 on this thread and the others on threads of their own,
    // until the io_context stops.
    void run();

    // Stops engine `engine` between two turns for a control turn
    // (util/ownership.h); it waits until resume(), which wakes it, as the
    // control plane may have given it work.
    void pause(uint32_t engine) override;
    void resume(uint32_t engine, bool for_daemon) override;
    uint32_t engines() const override { return size(); }
    // How long an engine waited for control turns (uroce status): for
    // those on its own devices, and for those of the whole daemon.
    struct PausedTime {
        uint64_t for_devices_ns = 0;
        uint64_t for_daemon_ns = 0;
        uint64_t for_devices = 0;  // pauses
        uint64_t for_daemon = 0;
    };
    const PausedTime& paused_time(uint32_t engine) const { return paused_[engine]; }
    // A line per engine for uroce status: its devices and paused time.
    std::string status_text() const;
    // After the doorbell's eventfd was read: wakes each sleeping engine
    // whose slots have bits set (clients ring one eventfd for all), or all
    // of them when none has (a post to a WQ or an SRQ, which have no slot).
    void wake_posted();
    bool any_behind() const;
    bool stopping() const { return stopping_.load(std::memory_order_seq_cst); }

  private:
    // Which engine runs a device: its index mod the engines.
    void place(Device& device) const;
    // Tells the other engines to stop, wakes them and waits for them.
    void stop_threads();

    boost::asio::io_context& io_;
    std::vector<std::unique_ptr<Device>>& devices_;
    const uint32_t count_;  // set before the engines are made: they ask
    Doorbell doorbell_;
    PacketLog packet_log_;
    std::vector<std::unique_ptr<Engine>> engines_;
    std::vector<std::thread> threads_;  // engines 1 to N-1
    // By engine; written and read on the control plane's thread only.
    std::vector<PausedTime> paused_;
    std::vector<std::chrono::steady_clock::time_point> paused_since_;
    std::atomic<bool> stopping_{false};
};

}  // namespace uroce
