// socket(AF_NETLINK, *, NETLINK_RDMA) in a uroce environment: a connection to
// uroced, which answers RDMA netlink (RDMA_NL_NLDEV) as the kernel's nldev.c
// does, for the `rdma` tool and libibverbs' own enumeration.
//
// The program's descriptor is a SOCK_SEQPACKET Unix socket: one netlink
// datagram per packet both ways, so send, recv, read, write, poll and epoll
// work on it unchanged. Only what differs from a Unix socket is answered
// here: bind and getsockname speak sockaddr_nl, sendto/sendmsg drop the
// kernel's address, recvfrom/recvmsg report it, and SOL_NETLINK options are
// accepted. Built without the C++ runtime, as preload.cpp is.
#undef _FORTIFY_SOURCE  // its inline wrappers would clash with these definitions

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon_link.h"
#include "interpose.h"
#include "rdma_netlink_socket.h"

namespace uroce::bridge {
namespace {

// Netlink sockets open at once in one process (more fail with ENOBUFS, as a
// kernel out of port ids would); each is one entry.
constexpr int kMaxSockets = 64;

struct Socket {
    bool used;
    int fd;
    uint32_t port;
    // The socket's, to notice the number naming another file after the
    // program closed it behind the bridge's back (dup2, close_range).
    dev_t dev;
    ino_t ino;
};

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
Socket g_sockets[kMaxSockets];
int g_count;  // entries in use: at 0, every call goes straight through

bool any_open() {
    return __atomic_load_n(&g_count, __ATOMIC_ACQUIRE) != 0;
}

// The netlink port of `fd`, when it is one of these sockets.
bool port_of(int fd, uint32_t* port) {
    if (!any_open() || fd < 0) {
        return false;
    }
    struct stat st;
    bool found = false;
    pthread_mutex_lock(&g_mutex);
    for (Socket& s : g_sockets) {
        if (s.used && s.fd == fd) {
            if (NEXT(fstat)(fd, &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino) {
                *port = s.port;
                found = true;
            } else {
                s.used = false;  // the number names another file now
                __atomic_sub_fetch(&g_count, 1, __ATOMIC_RELEASE);
            }
            break;
        }
    }
    pthread_mutex_unlock(&g_mutex);
    return found;
}

bool is_netlink(int fd) {
    uint32_t port;
    return port_of(fd, &port);
}

int fail(int sock, int error) {
    if (sock >= 0) {
        NEXT(close)(sock);
    }
    errno = error;
    return -1;
}

sockaddr_nl kernel_address() {
    sockaddr_nl nl{};
    nl.nl_family = AF_NETLINK;
    return nl;  // port 0, no groups: the kernel
}

// Writes sockaddr_nl to a program's (name, length) pair, truncating as the
// kernel's move_addr_to_user does.
void report_address(void* name, socklen_t* length, const sockaddr_nl& nl) {
    if (!name || !length) {
        return;
    }
    memcpy(name, &nl, *length < sizeof(nl) ? *length : sizeof(nl));
    *length = sizeof(nl);
}

}  // namespace

bool open_rdma_netlink(int domain, int type, int protocol, int* fd) {
    sockaddr_un addr;
    if (domain != AF_NETLINK || protocol != NETLINK_RDMA || !daemon_address(&addr)) {
        return false;
    }
    const int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (base != SOCK_RAW && base != SOCK_DGRAM) {
        *fd = fail(-1, ESOCKTNOSUPPORT);
        return true;
    }
    const int sock = NEXT(socket)(AF_UNIX, SOCK_SEQPACKET | (type & SOCK_CLOEXEC), 0);
    if (sock < 0) {
        *fd = -1;
        return true;
    }
    if (connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        *fd = fail(sock, EPROTONOSUPPORT);  // no daemon: as a kernel without RDMA netlink
        return true;
    }
    const rpc::NetlinkOpenRequest request{};
    rpc::NetlinkOpenReply reply{};
    size_t got = 0;
    int error = exchange(sock, 1, rpc::Op::kNetlinkOpen, &request, sizeof(request), -1, &reply,
                         sizeof(reply), &got);
    struct stat st;
    if (!error && got != sizeof(reply)) {
        error = EPROTONOSUPPORT;
    }
    if (!error && NEXT(fstat)(sock, &st) != 0) {
        error = errno;
    }
    if (!error && (type & SOCK_NONBLOCK) && fcntl(sock, F_SETFL, O_NONBLOCK) != 0) {
        error = errno;
    }
    if (error) {
        *fd = fail(sock, error);
        return true;
    }
    pthread_mutex_lock(&g_mutex);
    Socket* entry = nullptr;
    for (Socket& s : g_sockets) {
        if (s.used && s.fd == sock) {
            entry = &s;  // left by a socket the program closed behind the bridge's back
            break;
        }
        if (!s.used && !entry) {
            entry = &s;
        }
    }
    if (entry && !entry->used) {
        __atomic_add_fetch(&g_count, 1, __ATOMIC_RELEASE);
    }
    if (entry) {
        *entry = {true, sock, reply.port_id, st.st_dev, st.st_ino};
    }
    pthread_mutex_unlock(&g_mutex);
    *fd = entry ? sock : fail(sock, ENOBUFS);
    return true;
}

void forget_rdma_netlink(int fd) {
    if (!any_open()) {
        return;
    }
    pthread_mutex_lock(&g_mutex);
    for (Socket& s : g_sockets) {
        if (s.used && s.fd == fd) {
            s.used = false;
            __atomic_sub_fetch(&g_count, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&g_mutex);
}

}  // namespace uroce::bridge

using uroce::bridge::is_netlink;
using uroce::bridge::port_of;

// A netlink socket binds to its port; the daemon assigned it, as the kernel
// assigns one to a socket bound with nl_pid 0.
EXPORT int bind(int fd, const sockaddr* addr, socklen_t length) noexcept {
    if (!is_netlink(fd)) {
        return NEXT(bind)(fd, addr, length);
    }
    if (!addr || length < sizeof(sockaddr_nl) || addr->sa_family != AF_NETLINK) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

EXPORT int getsockname(int fd, sockaddr* __restrict addr, socklen_t* __restrict length) noexcept {
    uint32_t port;
    if (!port_of(fd, &port)) {
        return NEXT(getsockname)(fd, addr, length);
    }
    sockaddr_nl nl = uroce::bridge::kernel_address();
    nl.nl_pid = port;
    uroce::bridge::report_address(addr, length, nl);
    return 0;
}

// SOL_NETLINK's options (NETLINK_EXT_ACK, NETLINK_CAP_ACK, ...) change
// nothing the daemon sends; SOL_SOCKET's apply to the Unix socket.
EXPORT int setsockopt(int fd, int level, int name, const void* value, socklen_t length) noexcept {
    if (level == SOL_NETLINK && is_netlink(fd)) {
        return 0;
    }
    return NEXT(setsockopt)(fd, level, name, value, length);
}

EXPORT int getsockopt(int fd, int level, int name, void* __restrict value,
                      socklen_t* __restrict length) noexcept {
    if (level == SOL_NETLINK && is_netlink(fd)) {
        if (value && length && *length >= sizeof(int)) {
            memset(value, 0, sizeof(int));
            *length = sizeof(int);
        }
        return 0;
    }
    return NEXT(getsockopt)(fd, level, name, value, length);
}

EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
                      socklen_t length) {
    if (!addr || !is_netlink(fd)) {
        return NEXT(sendto)(fd, buf, len, flags, addr, length);
    }
    return NEXT(send)(fd, buf, len, flags | MSG_NOSIGNAL);
}

EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
    if (!msg || !msg->msg_name || !is_netlink(fd)) {
        return NEXT(sendmsg)(fd, msg, flags);
    }
    msghdr unnamed = *msg;
    unnamed.msg_name = nullptr;
    unnamed.msg_namelen = 0;
    return NEXT(sendmsg)(fd, &unnamed, flags | MSG_NOSIGNAL);
}

EXPORT ssize_t recvfrom(int fd, void* __restrict buf, size_t len, int flags,
                        sockaddr* __restrict addr, socklen_t* __restrict length) {
    if (!addr || !is_netlink(fd)) {
        return NEXT(recvfrom)(fd, buf, len, flags, addr, length);
    }
    const ssize_t n = NEXT(recv)(fd, buf, len, flags);
    if (n >= 0) {
        uroce::bridge::report_address(addr, length, uroce::bridge::kernel_address());
    }
    return n;
}

EXPORT ssize_t recvmsg(int fd, msghdr* msg, int flags) {
    if (!msg || !msg->msg_name || !is_netlink(fd)) {
        return NEXT(recvmsg)(fd, msg, flags);
    }
    void* name = msg->msg_name;
    socklen_t length = msg->msg_namelen;
    msg->msg_name = nullptr;
    msg->msg_namelen = 0;
    const ssize_t n = NEXT(recvmsg)(fd, msg, flags);
    msg->msg_name = name;
    uroce::bridge::report_address(name, &length, uroce::bridge::kernel_address());
    msg->msg_namelen = length;
    return n;
}
