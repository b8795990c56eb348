// /dev/infiniband/rdma_cm for librdmacm, answered by uroced instead of the
// kernel's ucma module (drivers/infiniband/core/ucma.c), in a uroce
// environment: SYSFS_PATH names a tree with class/misc/rdma_cm/uroce_socket.
//
// The program's descriptor is the read end of a pipe whose readiness the
// daemon controls: the daemon opens the pipe again for itself and keeps a
// byte in it while events wait, so poll(2), epoll and O_NONBLOCK work on it
// as on the kernel's file with no bridge in the way. read(2) is refused as
// the kernel's file refuses it; writev(2) carries one command per iovec, as
// the kernel's. Commands
// travel on a private SOCK_SEQPACKET connection of the channel's, one request
// and reply per write(2). Command bytes are read, and responses written where
// the command says (as the kernel's copy_from_user/copy_to_user would), with
// process_vm_readv/writev on this process: a bad address in the program's
// write is EFAULT, never a crash in the bridge. A forked child that uses a
// channel it inherited gets a connection of its own on its first command
// (kCmAttach), so that its replies and its parent's never cross. Built
// without the C++ runtime, as preload.cpp is.
#undef _FORTIFY_SOURCE  // its inline wrappers would clash with these definitions

#include "rdma_cm_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>

#include "daemon_link.h"
#include "emulator/protocol/bridge_abi.h"
#include "emulator/protocol/case_id.h"
#include "emulator/protocol/messages.h"
#include "interpose.h"
#include "rdma_netlink_socket.h"

// Declared by the fortified headers this file does without.
extern "C" ssize_t __read_chk(int fd, void* buf, size_t len, size_t buflen);

namespace uroce::bridge {
namespace {

constexpr char kCmNode[] = "/dev/infiniband/rdma_cm";
// A misc device's numbers. librdmacm checks only S_ISCHR when, as here, it
// found the ABI version in sysfs rather than through netlink.
constexpr unsigned kMiscMajor = 10;
constexpr unsigned kCmMinor = 58;

struct Channel {
    pthread_mutex_t mutex;  // the connection carries one request and reply at a time
    int open;               // atomic; set after the fields below, cleared under the mutex
    int sock;               // the connection to the daemon
    uint64_t token;         // names the channel in another's MIGRATE_ID and in kCmAttach
    uint32_t seq;
    int forked;  // this process was forked since `sock` was made: it is the parent's
    // The pipe's, to notice the descriptor number naming another file after
    // the program closed it behind the bridge's back (dup2, close_range).
    dev_t dev;
    ino_t ino;
};

// Channels by descriptor number: blocks allocated on first use, so that the
// table costs nothing until a channel is opened, and never freed.
constexpr int kBlockSize = 1024;
constexpr int kBlocks = 1024;  // channel descriptors below 1M; beyond, EMFILE
Channel* g_blocks[kBlocks];
int g_open;  // channels open: at 0, write, close and fstat go straight through

Channel* slot(int fd, bool create) {
    if (fd < 0 || fd >= kBlocks * kBlockSize) {
        return nullptr;
    }
    Channel** entry = &g_blocks[fd / kBlockSize];
    Channel* block = __atomic_load_n(entry, __ATOMIC_ACQUIRE);
    if (!block && create) {
        auto* fresh = static_cast<Channel*>(calloc(kBlockSize, sizeof(Channel)));
        if (!fresh) {
            return nullptr;
        }
        for (int i = 0; i < kBlockSize; ++i) {
            pthread_mutex_init(&fresh[i].mutex, nullptr);
        }
        if (__atomic_compare_exchange_n(entry, &block, fresh, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            block = fresh;
        } else {
            free(fresh);  // another thread's block is in place
        }
    }
    return block ? &block[fd % kBlockSize] : nullptr;
}

// Closing the connection ends the channel in the daemon, which then destroys
// its ids as the kernel does when the file is released.
void release(Channel* c) {
    if (!__atomic_load_n(&c->open, __ATOMIC_ACQUIRE)) {
        return;
    }
    pthread_mutex_lock(&c->mutex);
    if (c->open) {
        NEXT(close)(c->sock);
        __atomic_store_n(&c->open, 0, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&g_open, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->mutex);
}

Channel* open_slot(int fd) {
    Channel* c = slot(fd, false);
    return c && __atomic_load_n(&c->open, __ATOMIC_ACQUIRE) ? c : nullptr;
}

// The open channel on `fd`, given fd's st_dev and st_ino; a channel whose
// number now names another file is let go.
Channel* channel_of(int fd, dev_t dev, ino_t ino) {
    Channel* c = open_slot(fd);
    if (c && (c->dev != dev || c->ino != ino)) {
        release(c);
        return nullptr;
    }
    return c;
}

// Only a descriptor number that has a channel costs an fstat.
Channel* channel_of(int fd) {
    struct stat st;
    return open_slot(fd) && NEXT(fstat)(fd, &st) == 0 ? channel_of(fd, st.st_dev, st.st_ino)
                                                      : nullptr;
}

bool any_open() {
    return __atomic_load_n(&g_open, __ATOMIC_ACQUIRE) != 0;
}

int fail_open(int efd, int sock, int error) {
    if (sock >= 0) {
        NEXT(close)(sock);
    }
    NEXT(close)(efd);
    errno = error;
    return -1;
}

// A new event channel: the read end of a pipe, which the program gets,
// passed to the daemon on a connection of the channel's own. The daemon
// writes the pipe through an open file of its own; the write end made here
// goes at once.
int open_channel(const sockaddr_un& addr, int flags) {
    int ends[2];
    if (pipe2(ends, (flags & O_CLOEXEC ? O_CLOEXEC : 0) | (flags & O_NONBLOCK ? O_NONBLOCK : 0)) !=
        0) {
        return -1;
    }
    NEXT(close)(ends[1]);
    const int efd = ends[0];
    if (efd >= kBlocks * kBlockSize) {
        return fail_open(efd, -1, EMFILE);
    }
    Channel* c = slot(efd, true);
    if (!c) {
        return fail_open(efd, -1, ENOMEM);
    }
    const int sock = NEXT(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        return fail_open(efd, -1, errno);
    }
    if (connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        return fail_open(efd, sock, ENOENT);  // no daemon: as if there were no node
    }
    rpc::CmOpenRequest request{};
    rpc::case_id_from_environment(request.case_id);
    rpc::CmOpenReply reply{};
    size_t got = 0;
    int error = exchange(sock, 1, rpc::Op::kCmOpen, &request, sizeof(request), efd, &reply,
                         sizeof(reply), &got);
    if (!error && got != sizeof(reply)) {
        error = ENODEV;
    }
    struct stat st;
    if (!error && NEXT(fstat)(efd, &st) != 0) {
        error = errno;
    }
    if (error) {
        return fail_open(efd, sock, error);
    }
    release(c);  // a channel on this number that the program closed behind the bridge's back
    pthread_mutex_lock(&c->mutex);
    c->sock = sock;
    c->token = reply.channel_token;
    c->seq = 1;
    c->forked = 0;
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    __atomic_store_n(&c->open, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&g_open, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mutex);
    return efd;
}

// In a forked child, under c->mutex: a connection of the child's own to the
// same channel, in place of the one it inherited (which stays its parent's).
int attach_after_fork(Channel* c) {
    sockaddr_un addr;
    if (!daemon_address(&addr)) {
        return ENODEV;
    }
    const int sock = NEXT(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        return errno;
    }
    if (connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        NEXT(close)(sock);
        return ENODEV;
    }
    const rpc::CmAttachRequest request{c->token};
    uint8_t reply[8];
    size_t got = 0;
    const int error = exchange(sock, 1, rpc::Op::kCmAttach, &request, sizeof(request), -1, reply,
                               sizeof(reply), &got);
    if (error) {
        NEXT(close)(sock);
        return error == ENOENT ? ENODEV : error;
    }
    NEXT(close)(c->sock);
    c->sock = sock;
    c->seq = 1;
    c->forked = 0;
    return 0;
}

// The child of a fork: one thread, every channel's mutex as some parent
// thread may have held it. Each open channel attaches before its next command.
void after_fork_in_child() {
    for (Channel* block : g_blocks) {
        for (int i = 0; block && i < kBlockSize; ++i) {
            pthread_mutex_init(&block[i].mutex, nullptr);
            block[i].forked = block[i].open;
        }
    }
}

__attribute__((constructor)) void watch_forks() {
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
}

// copy_from_user / copy_to_user: 0 or an errno (EFAULT for a bad address).
int copy_in(void* dst, const void* src, size_t size) {
    const iovec local{dst, size};
    const iovec remote{const_cast<void*>(src), size};
    const ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return n < 0 ? errno : static_cast<size_t>(n) == size ? 0 : EFAULT;
}

int copy_out(uint64_t dst, const void* src, size_t size) {
    const iovec local{const_cast<void*>(src), size};
    const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), size};
    const ssize_t n = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    return n < 0 ? errno : static_cast<size_t>(n) == size ? 0 : EFAULT;
}

// The commands the kernel undoes (CREATE_ID, the joins) or holds back
// (GET_EVENT) when it cannot copy their response out: the bridge checks
// that the response address takes the response before it sends them, so
// that EFAULT leaves no ID or join behind and loses no event, as there.
struct ResponseField {
    uint32_t cmd;
    size_t offset;  // of the command's `response` in its body
    size_t size;    // of what is written there
};
constexpr ResponseField kUndoneOnEfault[] = {
    {RDMA_USER_CM_CMD_CREATE_ID, offsetof(rdma_ucm_create_id, response),
     sizeof(rdma_ucm_create_id_resp)},
    {RDMA_USER_CM_CMD_GET_EVENT, offsetof(rdma_ucm_get_event, response),
     sizeof(rdma_ucm_event_resp)},
    {RDMA_USER_CM_CMD_JOIN_IP_MCAST, offsetof(rdma_ucm_join_ip_mcast, response),
     sizeof(rdma_ucm_create_id_resp)},
    {RDMA_USER_CM_CMD_JOIN_MCAST, offsetof(rdma_ucm_join_mcast, response),
     sizeof(rdma_ucm_create_id_resp)},
};

// 0, or EFAULT when the response of such a command could not be written:
// its bytes are read and written back as they were.
int check_response_address(const rdma_ucm_cmd_hdr& hdr, const uint8_t* body) {
    for (const ResponseField& field : kUndoneOnEfault) {
        if (field.cmd != hdr.cmd || hdr.in < field.offset + sizeof(uint64_t)) {
            continue;
        }
        uint64_t address;
        memcpy(&address, body + field.offset, sizeof(address));
        uint8_t was[sizeof(rdma_ucm_event_resp)];
        const void* at = reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
        if (copy_in(was, at, field.size) || copy_out(address, was, field.size)) {
            return EFAULT;
        }
    }
    return 0;
}

// SET_OPTION's value is in the program's memory, where the daemon cannot
// read it. One too long for the message goes without its bytes, to be refused.
int add_option(const uint8_t* body, rpc::CmCommandRequest& request) {
    rdma_ucm_set_option cmd;
    memcpy(&cmd, body, sizeof(cmd));
    request.option_length = cmd.optlen;
    if (cmd.optlen > rpc::kMaxCmOptionValue) {
        return 0;
    }
    return copy_in(request.option, reinterpret_cast<const void*>(uintptr_t(cmd.optval)),
                   cmd.optlen);
}

// MIGRATE_ID names the channel it takes the id from by a descriptor, which
// only this process can resolve.
int add_migrate_token(const uint8_t* body, rpc::CmCommandRequest& request) {
    rdma_ucm_migrate_id cmd;
    memcpy(&cmd, body, sizeof(cmd));
    const int from = static_cast<int>(cmd.fd);
    if (fcntl(from, F_GETFD) < 0) {
        return ENOENT;  // as the kernel's fdget
    }
    Channel* other = channel_of(from);
    if (!other) {
        return EINVAL;  // not an rdma_cm file
    }
    pthread_mutex_lock(&other->mutex);
    request.migrate_token = other->token;
    pthread_mutex_unlock(&other->mutex);
    return 0;
}

int call(Channel* c, const rpc::CmCommandRequest& request, rpc::CmCommandReply& reply) {
    constexpr size_t kHead = offsetof(rpc::CmCommandReply, response);
    size_t got = 0;
    pthread_mutex_lock(&c->mutex);
    int error = __atomic_load_n(&c->open, __ATOMIC_ACQUIRE)
                    ? (c->forked ? attach_after_fork(c) : 0)
                    : EBADF;  // closed by another thread meanwhile
    if (!error) {
        error = exchange(c->sock, ++c->seq, rpc::Op::kCmCommand, &request, sizeof(request), -1,
                         &reply, sizeof(reply), &got);
    }
    pthread_mutex_unlock(&c->mutex);
    if (!error && (got < kHead || reply.response_length > rpc::kMaxCmResponse ||
                   got < kHead + reply.response_length)) {
        error = ENODEV;
    }
    return error;
}

// Whether `c` is still the channel whose token was `token` when the write
// began: another thread may have closed it, and a new channel taken its slot.
bool still_open(Channel* c, uint64_t token) {
    pthread_mutex_lock(&c->mutex);
    const bool same = c->open && c->token == token;
    pthread_mutex_unlock(&c->mutex);
    return same;
}

// A kernel's write(2) holds its file: a GET_EVENT asleep when another thread
// closes the descriptor sleeps on, until the process ends (rping's client
// closes its channel under its CM thread so, and exits 0). Here closing ends
// the channel in the daemon, which closes the pipe and wakes the waiter; it
// goes back to sleep as the kernel's would, or finds no event if O_NONBLOCK.
int sleep_as_on_a_held_file(bool blocking) {
    while (blocking) {
        poll(nullptr, 0, -1);
    }
    return EAGAIN;
}

// The kernel's GET_EVENT sleeps until an event waits unless the file is
// O_NONBLOCK. Here the wait is on the channel's pipe, outside the channel's
// mutex so that other threads' commands go on meanwhile; a thread that finds
// no event (another took it: the daemon answers EAGAIN) waits again. A
// daemon that goes away ends the wait with ENODEV rather than leaving the
// thread asleep.
int get_event(int fd, Channel* c, const rpc::CmCommandRequest& request,
              rpc::CmCommandReply& reply) {
    const int flags = fcntl(fd, F_GETFL);
    const bool blocking = flags >= 0 && !(flags & O_NONBLOCK);
    pthread_mutex_lock(&c->mutex);
    const uint64_t token = c->token;
    pthread_mutex_unlock(&c->mutex);
    for (;;) {
        if (!still_open(c, token)) {
            return sleep_as_on_a_held_file(blocking);
        }
        const int error = call(c, request, reply);
        if (error == EBADF && !still_open(c, token)) {
            return sleep_as_on_a_held_file(blocking);
        }
        if (!blocking || error != EAGAIN) {
            return error;
        }
        pollfd ready[] = {{fd, POLLIN, 0}, {c->sock, POLLRDHUP, 0}};
        if (poll(ready, 2, -1) < 0) {
            return errno;
        }
        if (!still_open(c, token)) {
            continue;  // closed by another thread: not the daemon gone
        }
        if (ready[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            return ENODEV;
        }
    }
}

// The kernel's ucma_write: a header, `in` bytes of command, and the response
// copied to the address in the command.
int command(int fd, Channel* c, const void* buf, size_t len) {
    rdma_ucm_cmd_hdr hdr;
    if (len < sizeof(hdr)) {
        return EINVAL;
    }
    if (int error = copy_in(&hdr, buf, sizeof(hdr))) {
        return error;
    }
    const size_t length = sizeof(hdr) + hdr.in;
    if (length > len || length > rpc::kMaxCmCommand) {
        return EINVAL;
    }
    rpc::CmCommandRequest request{};
    request.length = static_cast<uint32_t>(length);
    if (int error = copy_in(request.command, buf, length)) {
        return error;
    }
    const uint8_t* body = request.command + sizeof(hdr);
    int error = check_response_address(hdr, body);
    if (!error && hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION && hdr.in >= sizeof(rdma_ucm_set_option)) {
        error = add_option(body, request);
    } else if (!error && hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID &&
               hdr.in >= sizeof(rdma_ucm_migrate_id)) {
        error = add_migrate_token(body, request);
    }
    rpc::CmCommandReply reply;
    if (!error) {
        error = hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT ? get_event(fd, c, request, reply)
                                                      : call(c, request, reply);
    }
    if (!error) {
        error = copy_out(reply.response_address, reply.response, reply.response_length);
    }
    return error;
}

template <class Stat>
void describe(int fd, Stat* st) {
    if (any_open() && channel_of(fd, st->st_dev, st->st_ino)) {
        st->st_mode = S_IFCHR | 0666;
        st->st_rdev = makedev(kMiscMajor, kCmMinor);
    }
}

}  // namespace

bool open_cm_channel(const char* path, int flags, int* fd) {
    sockaddr_un addr;
    if (!path || strcmp(path, kCmNode) != 0 || !daemon_address(&addr)) {
        return false;
    }
    *fd = open_channel(addr, flags);
    return true;
}

void describe_cm_channel(int fd, struct stat* st) {
    describe(fd, st);
}

void describe_cm_channel(int fd, struct stat64* st) {
    describe(fd, st);
}

}  // namespace uroce::bridge

EXPORT ssize_t write(int fd, const void* buf, size_t len) {
    auto* c = uroce::bridge::any_open() ? uroce::bridge::channel_of(fd) : nullptr;
    if (!c) {
        return NEXT(write)(fd, buf, len);
    }
    if (int error = uroce::bridge::command(fd, c, buf, len)) {
        errno = error;
        return -1;
    }
    return static_cast<ssize_t>(len);
}

// ucma_write for each iovec in turn, as the kernel's loop over a file
// without write_iter: the bytes of the commands done, or the first error.
EXPORT ssize_t writev(int fd, const struct iovec* iov, int count) {
    auto* c = uroce::bridge::any_open() ? uroce::bridge::channel_of(fd) : nullptr;
    if (!c) {
        return NEXT(writev)(fd, iov, count);
    }
    if (count < 0 || count > IOV_MAX) {
        errno = EINVAL;
        return -1;
    }
    ssize_t done = 0;
    for (int i = 0; i < count; ++i) {
        struct iovec one;
        if (int error = uroce::bridge::copy_in(&one, &iov[i], sizeof(one))) {
            errno = error;
            return done ? done : -1;
        }
        if (one.iov_len == 0) {
            continue;
        }
        if (int error = uroce::bridge::command(fd, c, one.iov_base, one.iov_len)) {
            errno = error;
            return done ? done : -1;
        }
        done += static_cast<ssize_t>(one.iov_len);
    }
    return done;
}

// The kernel's rdma_cm file has no read: EINVAL. (The pipe's byte is the
// daemon's to take.)
EXPORT ssize_t read(int fd, void* buf, size_t len) {
    if (uroce::bridge::any_open() && uroce::bridge::channel_of(fd)) {
        errno = EINVAL;
        return -1;
    }
    return NEXT(read)(fd, buf, len);
}

EXPORT ssize_t __read_chk(int fd, void* buf, size_t len, size_t buflen) {
    if (uroce::bridge::any_open() && uroce::bridge::channel_of(fd)) {
        errno = EINVAL;
        return -1;
    }
    return NEXT(__read_chk)(fd, buf, len, buflen);
}

EXPORT ssize_t readv(int fd, const struct iovec* iov, int count) {
    if (uroce::bridge::any_open() && uroce::bridge::channel_of(fd)) {
        errno = EINVAL;
        return -1;
    }
    return NEXT(readv)(fd, iov, count);
}

EXPORT int close(int fd) {
    if (uroce::bridge::any_open()) {
        if (auto* c = uroce::bridge::open_slot(fd)) {
            uroce::bridge::release(c);
        }
    }
    uroce::bridge::forget_rdma_netlink(fd);
    return NEXT(close)(fd);
}

namespace {

// An fstat's result `r`, with an rdma_cm channel described as the kernel's
// device.
template <typename Stat>
int described(int fd, Stat* st, int r) {
    if (r == 0) {
        uroce::bridge::describe_cm_channel(fd, st);
    }
    return r;
}

}  // namespace

EXPORT int fstat(int fd, struct stat* st) noexcept {
    return described(fd, st, NEXT(fstat)(fd, st));
}

EXPORT int fstat64(int fd, struct stat64* st) noexcept {
    return described(fd, st, NEXT(fstat64)(fd, st));
}

// glibc's entries before 2.33, still exported: programs built against an
// older glibc call them instead of fstat, and so do ThreadSanitizer's
// interceptors.
EXPORT int __fxstat(int version, int fd, struct stat* st) noexcept {
    return described(fd, st, NEXT(__fxstat)(version, fd, st));
}

EXPORT int __fxstat64(int version, int fd, struct stat64* st) noexcept {
    return described(fd, st, NEXT(__fxstat64)(version, fd, st));
}
