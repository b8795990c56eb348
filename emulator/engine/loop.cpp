// The engine's loop between turns: spinning while there is work, yielding
// to programs that share its CPU, and sleeping (with the doorbell page
// saying so) until a client, a packet, a timer, another engine or the
// control plane wakes it.
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "engine/engine.h"
#include "engine/engines.h"
#include "util/client_pipe.h"
#include "util/ownership.h"

namespace uroce {

using transport::Clock;

namespace {

// How long the loop keeps polling after the last work before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

// Whether a client produced work that the loop has not seen yet.
bool Engine::work_pending() {
    if (doorbell_.any_posted(index_)) {
        return true;
    }
    for (Device* device : own_) {
        for (auto& [wq_num, wq] : device->wqs()) {
            if (wq->state == IBV_WQS_ERR && wq->ring.pending()) {
                return true;
            }
        }
        if (device->step_gate().has_outgoing()) {
            return true;
        }
    }
    return !local_.empty() || network_.readiness_pending() ||
           inbox_waiting_.load(std::memory_order_seq_cst);
}

Clock::time_point Engine::next_deadline() const {
    Clock::time_point next = send_path_.next_delayed();
    for (Device* device : own_) {
        for (const Cq* cq : device->due_cq_events()) {
            next = std::min(next, cq->event_due);
        }
    }
    // No later than the QPs' earliest timer: perhaps earlier, after which
    // the turn that runs the timers finds the next.
    return std::min(next, timers_due_);
}

bool Engine::fall_asleep() {
    // Asleep, the engine no longer watches the CQs: nobody is asked to yield.
    set_completions_waiting(false);
    doorbell_.page().daemon_sleeping.fetch_or(1u << index_, std::memory_order_seq_cst);
    if (work_pending()) {
        wake_up();
        return false;
    }
    return true;
}

void Engine::wake_up() {
    doorbell_.page().daemon_sleeping.fetch_and(~(1u << index_), std::memory_order_relaxed);
    uint64_t count;
    [[maybe_unused]] const ssize_t n = read(wake_.get(), &count, sizeof(count));
}

bool Engine::asleep() const {
    return doorbell_.page().daemon_sleeping.load(std::memory_order_seq_cst) & (1u << index_);
}

void Engine::wake() {
    if (asleep()) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(wake_.get(), &one, sizeof(one));
    }
}

// Engine 0 sleeps in the io_context, where control requests wake it too.
void Engine::sleep() {
    if (!fall_asleep()) {
        return;
    }
    if (!doorbell_armed_) {
        doorbell_armed_ = true;
        doorbell_wait_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                                  [this](const boost::system::error_code&) {
                                      doorbell_armed_ = false;
                                      uint64_t count;
                                      read_shared_eventfd(doorbell_.eventfd(), count);
                                      engines_.wake_posted();
                                  });
    }
    if (!wake_armed_) {
        wake_armed_ = true;
        wake_wait_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                              [this](const boost::system::error_code&) { wake_armed_ = false; });
    }
    if (!network_armed_) {
        network_armed_ = true;
        network_wait_.async_wait(
            boost::asio::posix::stream_descriptor::wait_read,
            [this](const boost::system::error_code&) { network_armed_ = false; });
    }
    const Clock::time_point deadline = next_deadline();
    if (deadline != transport::kNever) {
        timer_.expires_at(deadline);
        timer_armed_ = true;
        timer_.async_wait([this](const boost::system::error_code&) { timer_armed_ = false; });
    }
    io_.run_one();
    if (timer_armed_) {
        timer_.cancel();
    }
    wake_up();
}

// The other engines sleep in ppoll, their turn let go, until the doorbell,
// their network, their wake eventfd or their next deadline.
void Engine::sleep_alone(std::unique_lock<std::mutex>& turn) {
    if (!fall_asleep()) {
        return;
    }
    if (engines_.stopping()) {  // after the bit: a later stop wakes it
        wake_up();
        return;
    }
    pollfd fds[] = {{wake_.get(), POLLIN, 0},
                    {doorbell_.eventfd(), POLLIN, 0},
                    {network_.wait_fd(), POLLIN, 0}};
    const Clock::time_point deadline = next_deadline();
    timespec timeout{};
    if (deadline != transport::kNever) {
        const auto wait = std::max(deadline - Clock::now(), Clock::duration::zero());
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        timeout = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    turn.unlock();
    ppoll(fds, std::size(fds), deadline != transport::kNever ? &timeout : nullptr, nullptr);
    turn.lock();
    if (fds[1].revents & POLLIN) {
        uint64_t count;
        read_shared_eventfd(doorbell_.eventfd(), count);
        engines_.wake_posted();
    }
    wake_up();
}

void Engine::publish_unpolled(Clock::time_point now) {
    bool waiting = false;
    programs_starving_ = false;
    for (Device* device : own_) {
        UnpolledCqs& cqs = device->unpolled_cqs();
        cqs.refresh(now);
        waiting |= cqs.any();
        programs_starving_ |= cqs.starving();
    }
    set_completions_waiting(waiting);
}

void Engine::set_completions_waiting(bool waiting) {
    auto& flags = doorbell_.page().completions_waiting;
    const uint32_t bit = 1u << index_;
    if (static_cast<bool>(flags.load(std::memory_order_relaxed) & bit) == waiting) {
        return;
    }
    if (waiting) {
        flags.fetch_or(bit, std::memory_order_relaxed);
    } else {
        flags.fetch_and(~bit, std::memory_order_relaxed);
    }
}

void Engine::run() {
    auto last_work = Clock::now();
    while (!io_.stopped()) {
        const bool busy = run_once();
        const auto now = Clock::now();
        if (busy) {
            last_work = now;
        } else if (now - last_work > kSpin) {
            sleep();
            last_work = Clock::now();
            continue;
        }
        if (!busy || programs_starving_) {
            // A program that shares this CPU may have completions to take
            // or work to post: spinning on would keep it waiting (and a
            // receiver kept from re-posting its receives gets RNR NAKs).
            sched_yield();
        }
    }
}

void Engine::run_alone() {
    ownership::set_thread_engine(index_);
    std::unique_lock turn(turn_);
    auto last_work = Clock::now();
    while (!engines_.stopping()) {
        if (pause_requested()) {
            // A control turn touches this engine's devices: it takes the
            // turn once this is let go.
            turn.unlock();
            while (pause_requested()) {
                sched_yield();
            }
            turn.lock();
        }
        const bool busy = run_once();
        const auto now = Clock::now();
        if (busy) {
            last_work = now;
        } else if (now - last_work > kSpin) {
            sleep_alone(turn);
            last_work = Clock::now();
            continue;
        }
        if (!busy || programs_starving_) {
            sched_yield();
        }
    }
}

}  // namespace uroce
