// The io_uring way (socket_io.h): each send is a SENDMSG request whose
// completion gives its buffer back; a socket's readiness is a one-shot
// POLL_ADD, armed again after each drain.
#include <liburing.h>
#include <poll.h>
#include <string.h>

#include <fstream>
#include <stdexcept>

#include "net/socket_io.h"
#include "net/udp_network.h"

namespace uroce {
namespace {

constexpr unsigned kRingEntries = 1024;
// Every send's completion, and each socket's readiness, fit the completion
// ring (twice the entries).
static_assert(UdpNetwork::kMaxSendBuffers <= kRingEntries);

class IoUring final : public SocketIo {
  public:
    IoUring() {
        if (int error = io_uring_queue_init(kRingEntries, &ring_, 0); error < 0) {
            throw std::runtime_error(std::string("io_uring: ") + strerror(-error));
        }
    }
    ~IoUring() override { io_uring_queue_exit(&ring_); }

    Kind kind() const override { return Kind::kIoUring; }
    int wait_fd() const override { return ring_.ring_fd; }

    void watch(int fd, uint64_t tag) override {
        io_uring_sqe* sqe = next_sqe();
        io_uring_prep_poll_add(sqe, fd, POLLIN);
        io_uring_sqe_set_data64(sqe, tag);
    }

    // The armed poll holds the socket: cancel it (its completion and this
    // request's carry the same tag, and the network skips both for a
    // closed socket).
    void unwatch(int, uint64_t tag) override {
        io_uring_sqe* sqe = next_sqe();
        io_uring_prep_poll_remove(sqe, tag);
        io_uring_sqe_set_data64(sqe, tag);
        submit();
    }

    void send(int fd, msghdr& message, uint64_t data) override {
        io_uring_sqe* sqe = next_sqe();
        io_uring_prep_sendmsg(sqe, fd, &message, 0);
        io_uring_sqe_set_data64(sqe, data);
    }

    void submit() override {
        if (unsubmitted_) {
            io_uring_submit(&ring_);
            unsubmitted_ = 0;
        }
    }

    void take_events(std::vector<Event>& events, bool wait) override {
        io_uring_cqe* cqe;
        const size_t before = events.size();
        while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
            take(cqe, events);
        }
        if (wait && events.size() == before && io_uring_wait_cqe(&ring_, &cqe) == 0) {
            take(cqe, events);
        }
    }

  private:
    io_uring_sqe* next_sqe() {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) {
            io_uring_submit(&ring_);
            unsubmitted_ = 0;
            sqe = io_uring_get_sqe(&ring_);
        }
        ++unsubmitted_;
        return sqe;
    }

    void take(io_uring_cqe* cqe, std::vector<Event>& events) {
        events.push_back({io_uring_cqe_get_data64(cqe), cqe->res});
        io_uring_cqe_seen(&ring_, cqe);
    }

    io_uring ring_{};
    unsigned unsubmitted_ = 0;
};

// What kernel.io_uring_disabled says, when it is set (Linux 6.6 and later).
std::string disabled_by_sysctl() {
    std::ifstream in("/proc/sys/kernel/io_uring_disabled");
    int disabled = 0;
    if (!(in >> disabled) || disabled == 0) {
        return "";
    }
    return disabled == 2 ? " (kernel.io_uring_disabled = 2)"
                         : " (kernel.io_uring_disabled = 1: only kernel.io_uring_group may)";
}

}  // namespace

// A ring, the opcodes the network uses, and one request through
// io_uring_enter (a seccomp filter may refuse io_uring_enter alone).
std::string io_uring_refusal() {
    io_uring ring{};
    if (int error = io_uring_queue_init(8, &ring, 0); error < 0) {
        return std::string("io_uring_setup: ") + strerror(-error) + disabled_by_sysctl();
    }
    std::string refusal;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    if (!probe) {
        refusal =
            "io_uring cannot list its operations (io_uring_register refused, or a kernel "
            "before 5.6)";
    } else {
        for (const auto& [op, name] : {std::pair{IORING_OP_SENDMSG, "SENDMSG"},
                                       {IORING_OP_POLL_ADD, "POLL_ADD"},
                                       {IORING_OP_POLL_REMOVE, "POLL_REMOVE"}}) {
            if (!io_uring_opcode_supported(probe, op)) {
                refusal = std::string("io_uring has no ") + name + " operation";
            }
        }
        io_uring_free_probe(probe);
    }
    if (refusal.empty()) {
        io_uring_prep_nop(io_uring_get_sqe(&ring));
        io_uring_cqe* cqe;
        int error = io_uring_submit(&ring);
        if (error >= 0) {
            error = io_uring_wait_cqe(&ring, &cqe);
        }
        if (error < 0) {
            refusal = std::string("io_uring_enter: ") + strerror(-error);
        }
    }
    io_uring_queue_exit(&ring);
    return refusal;
}

std::unique_ptr<SocketIo> make_io_uring() {
    return std::make_unique<IoUring>();
}

}  // namespace uroce
