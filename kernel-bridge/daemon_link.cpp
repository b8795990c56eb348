#undef _FORTIFY_SOURCE  // its inline wrappers would clash with the bridge's definitions

#include "daemon_link.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emulator/protocol/bridge_abi.h"
#include "interpose.h"

namespace uroce::bridge {
namespace {

constexpr char kSocketFile[] = "/class/misc/rdma_cm/" UROCE_SYSFS_SOCKET_FILE;

}  // namespace

int exchange(int sock, uint32_t seq, rpc::Op op, const void* body, size_t size, int pass_fd,
             void* reply, size_t reply_size, size_t* got) {
    rpc::RequestHeader header{rpc::kMagic, rpc::kVersion, op,
                              static_cast<uint32_t>(sizeof(header) + size), seq};
    iovec out[2] = {{&header, sizeof(header)}, {const_cast<void*>(body), size}};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = out;
    msg.msg_iovlen = 2;
    if (pass_fd >= 0) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    ssize_t n;
    do {
        n = NEXT(sendmsg)(sock, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(header.length)) {
        return ENODEV;
    }

    rpc::ReplyHeader answer;
    iovec in[2] = {{&answer, sizeof(answer)}, {reply, reply_size}};
    msghdr rmsg{};
    rmsg.msg_iov = in;
    rmsg.msg_iovlen = 2;
    do {
        n = NEXT(recvmsg)(sock, &rmsg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < static_cast<ssize_t>(sizeof(answer)) || (rmsg.msg_flags & MSG_TRUNC) ||
        answer.magic != rpc::kMagic || answer.seq != seq || answer.op != op) {
        return ENODEV;
    }
    if (answer.error) {
        return answer.error;
    }
    *got = static_cast<size_t>(n) - sizeof(answer);
    return 0;
}

bool daemon_address(sockaddr_un* addr) {
    const char* sysfs = getenv("SYSFS_PATH");
    char path[PATH_MAX];
    if (!sysfs || !*sysfs ||
        snprintf(path, sizeof(path), "%s%s", sysfs, kSocketFile) >= int(sizeof(path))) {
        return false;
    }
    const int fd = NEXT(open)(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    char text[sizeof(addr->sun_path) + 1];
    const ssize_t n = read(fd, text, sizeof(text));
    NEXT(close)(fd);
    const size_t length = n > 0 ? static_cast<size_t>(n) - (text[n - 1] == '\n') : 0;
    if (length == 0 || length >= sizeof(addr->sun_path)) {
        return false;
    }
    *addr = {};
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, text, length);
    return true;
}

}  // namespace uroce::bridge
