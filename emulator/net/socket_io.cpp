#include "net/socket_io.h"

namespace uroce {

SocketIoChoice choose_socket_io(bool readiness) {
    if (readiness) {
        return {SocketIo::Kind::kReadiness, "--no-io-uring"};
    }
    std::string refusal = io_uring_refusal();
    if (refusal.empty()) {
        return {SocketIo::Kind::kIoUring, ""};
    }
    return {SocketIo::Kind::kReadiness, refusal};
}

std::string describe(const SocketIoChoice& choice) {
    if (choice.kind == SocketIo::Kind::kIoUring) {
        return "network io_uring";
    }
    return "network readiness loop (epoll, sendmmsg, recvmmsg), io_uring not used: " +
           choice.reason;
}

std::unique_ptr<SocketIo> make_socket_io(SocketIo::Kind kind) {
    return kind == SocketIo::Kind::kIoUring ? make_io_uring() : make_readiness_loop();
}

}  // namespace uroce
