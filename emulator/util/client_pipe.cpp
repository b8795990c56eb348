#include "util/client_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/log.h"

namespace uroce {
namespace {

// An open file of the daemon's own on the pipe `fd` names.
Result reopen(int fd, int access, const char* what, UniqueFd& out) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    out.reset(open(path, access | O_NONBLOCK | O_CLOEXEC));
    if (out) {
        return ok();
    }
    const int error = errno;
    if (error == EMFILE || error == ENFILE) {
        return fail(error, "uroced has no file descriptors left to take the client's %s", what);
    }
    return fail(error, "cannot open the client's %s again: %s", what, strerror(error));
}

}  // namespace

Result ClientPipe::adopt_in_share(DescriptorLedger* ledger, pid_t client, size_t count,
                                  UniqueFd received, bool drainable, Owner owner, ClientPipe& out) {
    if (ledger) {
        if (Result r = ledger->take(client, count, owner.what); !r) {
            return r;
        }
    }
    Result r = adopt(std::move(received), drainable, owner, out);
    if (!r && ledger) {
        ledger->give_back(client, count);
    }
    return r;
}

Result ClientPipe::adopt(UniqueFd received, bool drainable, Owner owner, ClientPipe& out) {
    struct stat st;
    if (!received || fstat(received.get(), &st) != 0 || !S_ISFIFO(st.st_mode)) {
        return fail(EINVAL, "the %s the client handed over is not a pipe", owner.what);
    }
    ClientPipe pipe;
    pipe.owner_ = owner;
    if (drainable) {
        if (Result r = reopen(received.get(), O_RDONLY, owner.what, pipe.read_); !r) {
            return r;
        }
    }
    if (Result r = reopen(received.get(), O_WRONLY, owner.what, pipe.write_); !r) {
        return r;
    }
    out = std::move(pipe);
    return ok();
}

bool ClientPipe::write_record(const void* data, size_t size) {
    // Records are smaller than PIPE_BUF: each goes whole or not at all.
    if (write(write_.get(), data, size) == static_cast<ssize_t>(size)) {
        return true;
    }
    const int error = errno;
    ++lost_;
    if (losses_logged_.allow(RateLimit::Clock::now())) {
        log_warn(
            "client pid %d: a record for its %s was lost (%s; %llu lost so far)", owner_.pid,
            owner_.what,
            error == EAGAIN ? "the client has not read the pipe, which is full" : strerror(error),
            static_cast<unsigned long long>(lost_));
    }
    return false;
}

size_t ClientPipe::queued() const {
    int bytes = 0;
    const int fd = read_ ? read_.get() : write_.get();
    return fd >= 0 && ioctl(fd, FIONREAD, &bytes) == 0 && bytes > 0 ? size_t(bytes) : 0;
}

void ClientPipe::drain() {
    char bytes[256];
    while (read_ && read(read_.get(), bytes, sizeof(bytes)) > 0) {
    }
}

ssize_t read_shared_eventfd(int fd, uint64_t& value) {
    iovec io{&value, sizeof(value)};
    const ssize_t n = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
    if (n < 0 && errno == EOPNOTSUPP) {
        return read(fd, &value, sizeof(value));  // the daemon's own O_NONBLOCK, then
    }
    return n;
}

}  // namespace uroce
