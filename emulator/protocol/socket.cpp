#include "protocol/socket.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "protocol/messages.h"

namespace uroce::rpc {

int send_message(int sock, std::span<const std::byte> data, std::span<const int> fds) {
    if (fds.size() > kMaxFds) {
        return EINVAL;
    }
    iovec iov{const_cast<std::byte*>(data.data()), data.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (n >= 0) {
            return static_cast<size_t>(n) == data.size() ? 0 : EMSGSIZE;
        }
        if (errno != EINTR) {
            return errno;
        }
    }
}

int receive_message(int sock, std::vector<std::byte>& buffer, std::vector<int>& fds) {
    buffer.resize(kMaxMessage + 1);
    iovec iov{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n;
    do {
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        buffer.clear();
        return errno;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; ++i) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                fds.push_back(fd);
            }
        }
    }
    if (n == 0) {
        // A read of 0 is an empty message or the peer's close; only the
        // latter leaves the socket hung up.
        buffer.clear();
        pollfd p{sock, POLLRDHUP, 0};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)) ? ECONNRESET : 0;
    }
    if ((msg.msg_flags & MSG_TRUNC) || static_cast<size_t>(n) > kMaxMessage) {
        buffer.clear();
        return EMSGSIZE;
    }
    buffer.resize(static_cast<size_t>(n));
    // The message is whole but not all its descriptors came: more than a
    // message may carry, or none left to install them in this process.
    if (msg.msg_flags & MSG_CTRUNC) {
        return fds.size() < kMaxFds ? EMFILE : ETOOMANYREFS;
    }
    return 0;
}

}  // namespace uroce::rpc
