// The client end of the control protocol, used by the provider (one
// connection per opened device context) and by the uroce tool. Calls are
// synchronous and serialised per connection.
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace uroce {

class ControlClient {
  public:
    // Connects to the daemon at `socket_path` and binds the connection to
    // `device`. `async_fd` (may be -1 for the tool) goes to the daemon; the
    // descriptors of the hello reply (the doorbell) go to `received` when
    // given. Returns nullptr with errno set, and `why` filled, on failure.
    static ControlClient* connect(const char* socket_path, const char* device, int async_fd,
                                  std::string& why, std::vector<int>* received = nullptr);
    // A new connection attached to the context another client opened
    // (rpc::AttachRequest), as an imported context's; the descriptors of the
    // reply (the doorbell) go to `received`.
    static ControlClient* attach(const char* socket_path, const char* device, uint64_t token,
                                 std::string& why, std::vector<int>* received);
    ~ControlClient();

    uint64_t attach_token() const { return attach_token_; }
    // Whether the daemon asks its clients to check (uroced --check).
    bool daemon_checks() const { return daemon_checks_; }

    // Sends `op` with `request` and `fds`; on success fills `reply` with
    // exactly reply_size bytes and, when `received` is given, hands over the
    // descriptors that came with it (else they are closed). Returns 0 or an
    // errno (EIO when the daemon is gone).
    int call(rpc::Op op, const void* request, size_t request_size, void* reply, size_t reply_size,
             std::span<const int> fds = {}, std::vector<int>* received = nullptr);

    // The reply type is the request's (rpc::Traits), never deduced.
    template <class Request>
    int call(const Request& request, typename rpc::Traits<Request>::Reply* reply,
             std::span<const int> fds = {}, std::vector<int>* received = nullptr) {
        return call(rpc::Traits<Request>::kOp, &request, sizeof(request), reply, sizeof(*reply),
                    fds, received);
    }
    // For requests whose body type serves several ops (handles).
    template <class Request>
    int call_op(rpc::Op op, const Request& request) {
        rpc::Empty none;
        return call(op, &request, sizeof(request), &none, sizeof(none));
    }

    // Why the last refused call was refused, as the daemon put it.
    std::string last_error() const;
    // A report (kStatus, kQpSnapshot), fetched page by page; `request`
    // selects what it covers (its offset is the client's to set).
    int call_report(rpc::Op op, rpc::ReportRequest request, std::string& text);
    int call_status(std::string& text) { return call_report(rpc::Op::kStatus, {}, text); }
    // The connection, to wait on: readable with no call pending means the
    // daemon closed it.
    int fd() const { return fd_; }

  private:
    ControlClient(int fd, const char* socket_path, const char* device);
    int exchange(rpc::Op op, const void* request, size_t request_size, std::span<const int> fds,
                 std::string& reply_body, std::vector<int>* received);
    // In a process forked from the one that connected: a connection of its
    // own, attached to the same context (rpc::AttachRequest), so that
    // parent and child never read each other's replies.
    int attach_after_fork();
    // Sends rpc::AttachRequest on this connection.
    int send_attach(std::vector<int>* received);

    int fd_;
    std::string socket_path_;
    std::string device_;
    uint64_t attach_token_ = 0;  // 0: a tool connection, which no child uses
    bool daemon_checks_ = false;
    pid_t pid_;  // the process fd_ belongs to
    uint32_t seq_ = 0;
    mutable std::mutex mutex_;
    std::string last_error_;
};

}  // namespace uroce
