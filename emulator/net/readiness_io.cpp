// The readiness way (socket_io.h), for where io_uring is refused: epoll
// (level-triggered) says which sockets are readable, and submit() hands
// each run of sends on one socket to one sendmmsg, so every send has its
// outcome when submit() returns. Segmentation offload and GRO trains are
// the socket's, so they stay as they are with io_uring.
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>

#include <stdexcept>
#include <unordered_map>

#include "net/socket_io.h"
#include "util/unique_fd.h"

namespace uroce {
namespace {

constexpr unsigned kMessagesPerCall = 64;  // sendmmsg's batch
constexpr unsigned kEventsPerWait = 64;
// A socket whose send buffer is full (a slow interface) gets this long to
// take a send; after it the send fails, its packets lost as on a wire and
// reported, so that one socket cannot stop the engine.
constexpr int kFullSocketWaitMs = 10;

class ReadinessLoop final : public SocketIo {
  public:
    ReadinessLoop() : epoll_(epoll_create1(EPOLL_CLOEXEC)) {
        if (!epoll_) {
            throw std::runtime_error(std::string("epoll: ") + strerror(errno));
        }
    }

    Kind kind() const override { return Kind::kReadiness; }
    int wait_fd() const override { return epoll_.get(); }

    // Level-triggered: a socket once watched is reported at each
    // take_events() while it has datagrams, so watching it again costs
    // nothing.
    void watch(int fd, uint64_t tag) override {
        auto [it, added] = watched_.try_emplace(fd, tag);
        if (!added && it->second == tag) {
            return;
        }
        it->second = tag;
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.u64 = tag;
        if (epoll_ctl(epoll_.get(), added ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event) != 0) {
            throw std::runtime_error(std::string("epoll_ctl: ") + strerror(errno));
        }
    }

    void unwatch(int fd, uint64_t tag) override {
        auto it = watched_.find(fd);
        if (it == watched_.end() || it->second != tag) {
            return;
        }
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
        watched_.erase(it);
    }

    void send(int fd, msghdr& message, uint64_t data) override {
        pending_.push_back({fd, &message, data});
    }

    void submit() override {
        for (size_t first = 0; first < pending_.size();) {
            size_t end = first + 1;
            while (end < pending_.size() && pending_[end].fd == pending_[first].fd &&
                   end - first < kMessagesPerCall) {
                ++end;
            }
            send_run(first, end);
            first = end;
        }
        pending_.clear();
    }

    void take_events(std::vector<Event>& events, bool) override {
        events.insert(events.end(), done_.begin(), done_.end());
        done_.clear();
        epoll_event ready[kEventsPerWait];
        const int n = epoll_wait(epoll_.get(), ready, kEventsPerWait, 0);
        for (int i = 0; i < n; ++i) {
            events.push_back({ready[i].data.u64, 0});
        }
    }

  private:
    struct Pending {
        int fd;
        msghdr* message;
        uint64_t data;
    };

    // Sends pending_[first, end), all on one socket, noting each outcome.
    void send_run(size_t first, size_t end) {
        mmsghdr messages[kMessagesPerCall];
        const int fd = pending_[first].fd;
        const unsigned count = static_cast<unsigned>(end - first);
        for (unsigned i = 0; i < count; ++i) {
            messages[i] = {*pending_[first + i].message, 0};
        }
        unsigned sent = 0;
        bool waited = false;
        while (sent < count) {
            const int n = sendmmsg(fd, messages + sent, count - sent, 0);
            if (n > 0) {
                for (int i = 0; i < n; ++i, ++sent) {
                    done_.push_back(
                        {pending_[first + sent].data, static_cast<int>(messages[sent].msg_len)});
                }
                waited = false;
                continue;
            }
            const int error = n < 0 ? errno : EIO;
            if (error == EINTR) {
                continue;
            }
            if ((error == EAGAIN || error == ENOBUFS) && !waited) {
                pollfd writable{fd, POLLOUT, 0};
                poll(&writable, 1, kFullSocketWaitMs);
                waited = true;
                continue;
            }
            // This send fails (its packets are lost, and reported); the
            // ones after it are tried.
            done_.push_back({pending_[first + sent].data, -error});
            ++sent;
            waited = false;
        }
    }

    UniqueFd epoll_;
    std::unordered_map<int, uint64_t> watched_;  // socket: its tag
    std::vector<Pending> pending_;
    std::vector<Event> done_;
};

}  // namespace

std::unique_ptr<SocketIo> make_readiness_loop() {
    return std::make_unique<ReadinessLoop>();
}

}  // namespace uroce
