#include "engine/engines.h"

#include <stdexcept>

namespace uroce {

Engines::Engines(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
                 const EngineOptions& options, uint32_t threads)
    : io_(io), devices_(devices), count_(threads) {
    if (Result r = Doorbell::create(doorbell_, threads); !r) {
        throw std::runtime_error(r.message);
    }
    for (const auto& device : devices_) {
        place(*device);
    }
    for (uint32_t index = 0; index < threads; ++index) {
        engines_.push_back(std::make_unique<Engine>(io, devices, options, *this, index));
    }
    if (threads > 1) {
        ControlSection::set_pauser(this);
    }
}

Engines::~Engines() {
    stop_threads();
    if (size() > 1) {
        ControlSection::set_pauser(nullptr);
    }
}

void Engines::place(Device& device) const {
    device.set_engine(device.index() % size());
}

Result Engines::add_device(Device& device) {
    place(device);
    return owner(device).add_device(device);
}

void Engines::remove_device(const Device& device) {
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

void Engines::take_posted_work() {
    for (auto& engine : engines_) {
        engine->take_posted_work();
    }
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
    for (uint32_t index = 1; index < size(); ++index) {
        threads_.emplace_back([this, index] { engines_[index]->run_alone(); });
    }
    engines_[0]->run();
    stop_threads();
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

// The flag first: an engine that sees it lets its turn go between two
// turns, and waits; the locks then wait for those in the middle of one.
void Engines::pause() {
    pause_requested_.store(true, std::memory_order_release);
    for (uint32_t index = 1; index < size(); ++index) {
        engines_[index]->turn().lock();
    }
}

void Engines::resume() {
    for (uint32_t index = 1; index < size(); ++index) {
        engines_[index]->turn().unlock();
    }
    pause_requested_.store(false, std::memory_order_release);
    for (uint32_t index = 1; index < size(); ++index) {
        engines_[index]->wake();
    }
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
