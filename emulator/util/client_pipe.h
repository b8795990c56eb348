// A pipe between the daemon and one client: the client reads it (async
// events, completion events, an rdma_cm channel's readiness), the daemon
// writes it. The rule for every descriptor a client hands over: the daemon
// never blocks on it and never trusts it. A client's descriptor shares its
// open file with the client, whose fcntl can clear O_NONBLOCK at any time,
// so the daemon opens the pipe again through /proc/self/fd as open files of
// its own, non-blocking, and closes what it received. A pipe with no room
// loses the record (counted, and logged at a bounded rate): the client's
// problem, never the daemon's.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/descriptor_ledger.h"
#include "util/rate_limit.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

class ClientPipe {
  public:
    // What a pipe carries, for the log line when it loses a record.
    struct Owner {
        const char* what = "pipe";  // "async event pipe", ...
        int pid = 0;
    };

    ClientPipe() = default;
    ClientPipe(ClientPipe&&) = default;
    ClientPipe& operator=(ClientPipe&&) = default;

    // Takes either end of a client's pipe. With `drainable`, the daemon can
    // also take back what it wrote (drain), which readiness signals need.
    // EINVAL when `received` is not a pipe.
    static Result adopt(UniqueFd received, bool drainable, Owner owner, ClientPipe& out);
    // The same, counted as `count` descriptors of `client`'s share in
    // `ledger` (none without one), which a refused pipe gives back.
    static Result adopt_in_share(DescriptorLedger* ledger, pid_t client, size_t count,
                                 UniqueFd received, bool drainable, Owner owner, ClientPipe& out);

    // Writes one whole record: false, counted and logged, when it does not fit.
    bool write_record(const void* data, size_t size);
    // Bytes the client has not read yet (0 when unknown).
    size_t queued() const;
    // Reads back whatever the client has not read (only if drainable).
    void drain();
    uint64_t lost() const { return lost_; }
    explicit operator bool() const { return bool(write_); }

  private:
    UniqueFd write_;
    UniqueFd read_;  // only when drainable
    Owner owner_;
    uint64_t lost_ = 0;
    RateLimit losses_logged_{10, 1};
};

// read(2) of an eventfd the daemon shares with its clients (the doorbell):
// never blocks, whatever a client did to the file's O_NONBLOCK.
ssize_t read_shared_eventfd(int fd, uint64_t& value);

}  // namespace uroce
