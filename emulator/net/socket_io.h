// How the UDP network's sends leave and how it hears that a socket is
// readable: through an io_uring (sends completed by the kernel, readiness
// as poll completions), or, where io_uring is refused (a container
// runtime's default seccomp profile, kernel.io_uring_disabled, gVisor),
// through a readiness loop: epoll for readiness and sendmmsg for the sends,
// which complete at submit(). UdpNetwork (udp_network.h) keeps everything
// else (sockets, trains, receives) the same for both.
#pragma once

#include <stdint.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

namespace uroce {

class SocketIo {
  public:
    // A send's outcome (`data` as given to send(), `result` its bytes or
    // -errno) or a watched socket's readiness (`data` its tag, `result` 0).
    struct Event {
        uint64_t data;
        int result;
    };
    enum class Kind { kIoUring, kReadiness };

    virtual ~SocketIo() = default;
    virtual Kind kind() const = 0;
    // Readable while there are events to take: what an engine sleeps on.
    virtual int wait_fd() const = 0;
    // Reports `tag` once `fd` is readable; after its event, watch() again
    // to hear of it again.
    virtual void watch(int fd, uint64_t tag) = 0;
    virtual void unwatch(int fd, uint64_t tag) = 0;
    // Sends `message` on `fd` at the next submit(); `message` and what it
    // points at stay untouched until its event.
    virtual void send(int fd, msghdr& message, uint64_t data) = 0;
    virtual void submit() = 0;
    // Appends the events there are now; with `wait`, waits for one when
    // there are none and a send is on its way.
    virtual void take_events(std::vector<Event>& events, bool wait) = 0;
};

// How this daemon's engines reach the network, chosen once at start.
struct SocketIoChoice {
    SocketIo::Kind kind = SocketIo::Kind::kIoUring;
    std::string reason;  // why the readiness loop, when it is the choice
};
// io_uring when it can be set up and does what the network needs (tried
// here: a ring, its opcodes, one request), else the readiness loop with
// the reason; `readiness` chooses the loop without trying.
SocketIoChoice choose_socket_io(bool readiness);
// One line for the log and `uroce status`: the path and, for the loop, why.
std::string describe(const SocketIoChoice& choice);

// Why io_uring cannot carry the network here, or "" when it can.
std::string io_uring_refusal();
// Throws std::runtime_error when io_uring cannot be set up.
std::unique_ptr<SocketIo> make_io_uring();
std::unique_ptr<SocketIo> make_readiness_loop();
std::unique_ptr<SocketIo> make_socket_io(SocketIo::Kind kind);

}  // namespace uroce
