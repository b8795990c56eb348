#include "engine/engines.h"

#include <stdio.h>

#include <stdexcept>

namespace uroce {

Engines::Engines(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
                 const EngineOptions& options, uint32_t threads)
    : io_(io), devices_(devices), count_(threads), paused_(threads), paused_since_(threads) {
    if (Result r = Doorbell::create(doorbell_, threads); !r) {
        throw std::runtime_error(r.message);
    }
    for (const auto& device : devices_) {
        place(*device);
    }
    for (uint32_t index = 0; index < threads; ++index) {
        engines_.push_back(std::make_unique<Engine>(io, devices, options, *this, index));
    }
    ownership::set_thread_engine(0);  // this thread runs engine 0 (run())
    ownership::set_paranoid(options.paranoid);
}

Engines::~Engines() {
    stop_threads();
    ownership::set_pauser(nullptr);
}

void Engines::place(Device& device) const {
    device.set_engine(device.index() % size());
}

// A device added or removed, or its sockets changed: every engine looks
// up the devices and their sockets (device_at).
Result Engines::add_device(Device& device) {
    ownership::claim_all();
    place(device);
    return owner(device).add_device(device);
}

void Engines::remove_device(const Device& device) {
    ownership::claim_all();
    // Packets for the device may wait in any engine's inbox or outbox.
    for (auto& engine : engines_) {
        engine->remove_device(device);
    }
}

void Engines::forget_packets(const Device& device) {
    for (auto& engine : engines_) {
        engine->forget_packets(device);
    }
}

void Engines::set_mad_receiver(const Engine::MadReceiver& receiver) {
    for (auto& engine : engines_) {
        engine->set_mad_receiver(receiver);
    }
}

void Engines::follow_gids(Device& device) {
    ownership::claim_all();
    owner(device).follow_gids(device);
}

Device* Engines::device_at(const wire::IpAddress& address) const {
    for (const auto& device : devices_) {
        if (device->config().address == address) {
            return device.get();
        }
    }
    // Addresses of GIDs beyond the first.
    for (const auto& engine : engines_) {
        if (Device* device = engine->device_with_socket_at(address)) {
            return device;
        }
    }
    return nullptr;
}

void Engines::run() {
    // From now on, a touch of another engine's devices pauses it (or, out
    // of a control turn, is a bug).
    ownership::set_pauser(this);
    for (uint32_t index = 1; index < size(); ++index) {
        threads_.emplace_back([this, index] { engines_[index]->run_alone(); });
    }
    engines_[0]->run();
    stop_threads();
    ownership::set_pauser(nullptr);  // one thread again
}

void Engines::stop_threads() {
    stopping_.store(true, std::memory_order_seq_cst);
    for (auto& engine : engines_) {
        engine->wake();
    }
    for (std::thread& thread : threads_) {
        thread.join();
    }
    threads_.clear();
}

// The flag first: the engine sees it between two turns and lets its turn
// go; the lock then waits for one in the middle of a turn.
void Engines::pause(uint32_t engine) {
    Engine& paused = *engines_[engine];
    paused.set_pause_requested(true);
    paused.turn().lock();
    paused_since_[engine] = std::chrono::steady_clock::now();
}

void Engines::resume(uint32_t engine, bool for_daemon) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - paused_since_[engine])
                        .count();
    PausedTime& paused = paused_[engine];
    (for_daemon ? paused.for_daemon_ns : paused.for_devices_ns) += static_cast<uint64_t>(ns);
    ++(for_daemon ? paused.for_daemon : paused.for_devices);
    Engine& resumed = *engines_[engine];
    resumed.turn().unlock();
    resumed.set_pause_requested(false);
    resumed.wake();
}

std::string Engines::status_text() const {
    std::string text;
    char line[200];
    for (uint32_t index = 0; index < size(); ++index) {
        text += "engine " + std::to_string(index) + " devices";
        for (const auto& device : devices_) {
            if (device->engine() == index) {
                text += " " + device->name();
            }
        }
        if (index == 0) {
            text += " and the control plane\n";
            continue;
        }
        const PausedTime& paused = paused_[index];
        snprintf(line, sizeof(line),
                 " paused %.3f ms for its devices (%llu times), %.3f ms for the daemon (%llu "
                 "times)\n",
                 static_cast<double>(paused.for_devices_ns) / 1e6,
                 static_cast<unsigned long long>(paused.for_devices),
                 static_cast<double>(paused.for_daemon_ns) / 1e6,
                 static_cast<unsigned long long>(paused.for_daemon));
        text += line;
    }
    return text;
}

void Engines::wake_posted() {
    bool any = false;
    for (auto& engine : engines_) {
        if (doorbell_.any_posted(engine->index())) {
            engine->wake();
            any = true;
        }
    }
    if (!any) {
        for (auto& engine : engines_) {
            engine->wake();
        }
    }
}

bool Engines::any_behind() const {
    for (const auto& engine : engines_) {
        if (engine->behind()) {
            return true;
        }
    }
    return false;
}

}  // namespace uroce
