#include "protocol/client.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <vector>

#include "protocol/case_id.h"
#include "protocol/memory_access.h"
#include "protocol/socket.h"

namespace uroce {

namespace {

// A new connection to the daemon's socket; -1 with `why` and errno set.
int open_connection(const std::string& socket_path, std::string& why) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path)) {
        why = "socket path too long";
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(addr.sun_path, socket_path.c_str());
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        why = std::string("socket: ") + strerror(errno);
        return -1;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        const int error = errno;
        why = "cannot reach uroced at " + socket_path + ": " + strerror(error) +
              " (is it running? see 'uroce status')";
        ::close(fd);
        errno = ENODEV;
        return -1;
    }
    return fd;
}

}  // namespace

ControlClient::ControlClient(int fd, const char* socket_path, const char* device)
    : fd_(fd), socket_path_(socket_path), device_(device), pid_(getpid()) {}

ControlClient* ControlClient::connect(const char* socket_path, const char* device, int async_fd,
                                      std::string& why, std::vector<int>* received) {
    const int fd = open_connection(socket_path, why);
    if (fd < 0) {
        return nullptr;
    }
    auto* client = new ControlClient(fd, socket_path, device);
    rpc::HelloRequest hello{};
    snprintf(hello.device, sizeof(hello.device), "%s", device);
    if (*device) {
        rpc::case_id_from_environment(hello.case_id);  // a program's context, not a tool's
        hello.memory = rpc::prepare_memory_access(fd);
    }
    rpc::HelloReply reply;
    int error = async_fd >= 0 ? client->call(hello, &reply, std::span(&async_fd, 1), received)
                              : client->call(hello, &reply, {}, received);
    if (error) {
        why = client->last_error();
        delete client;
        errno = error;
        return nullptr;
    }
    client->attach_token_ = reply.attach_token;
    client->daemon_checks_ = reply.check != 0;
    return client;
}

ControlClient* ControlClient::attach(const char* socket_path, const char* device, uint64_t token,
                                     std::string& why, std::vector<int>* received) {
    const int fd = open_connection(socket_path, why);
    if (fd < 0) {
        return nullptr;
    }
    auto* client = new ControlClient(fd, socket_path, device);
    client->attach_token_ = token;  // no other thread knows the client yet
    if (int error = client->send_attach(received)) {
        why = client->last_error_;
        delete client;
        errno = error;
        return nullptr;
    }
    return client;
}

int ControlClient::send_attach(std::vector<int>* received) {
    rpc::AttachRequest attach{};
    snprintf(attach.device, sizeof(attach.device), "%s", device_.c_str());
    attach.attach_token = attach_token_;
    attach.memory = rpc::prepare_memory_access(fd_);
    std::string body;
    if (int error = exchange(rpc::Op::kAttach, &attach, sizeof(attach), {}, body, received)) {
        return error;
    }
    return body.size() == sizeof(rpc::Empty) ? 0 : EIO;
}

int ControlClient::attach_after_fork() {
    std::string why;
    const int fd = open_connection(socket_path_, why);
    if (fd < 0) {
        last_error_ = why;
        return EIO;
    }
    // The inherited descriptor stays the parent's: this process lets go of
    // its copy only.
    ::close(fd_);
    fd_ = fd;
    pid_ = getpid();
    return send_attach(nullptr);
}

ControlClient::~ControlClient() {
    ::close(fd_);
}

std::string ControlClient::last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
}

int ControlClient::exchange(rpc::Op op, const void* request, size_t request_size,
                            std::span<const int> fds, std::string& reply_body,
                            std::vector<int>* received) {
    if (pid_ != getpid() && attach_token_ != 0 && op != rpc::Op::kAttach) {
        if (int error = attach_after_fork(); error) {
            return error;
        }
    }
    rpc::RequestHeader header{rpc::kMagic, rpc::kVersion, op,
                              static_cast<uint32_t>(sizeof(rpc::RequestHeader) + request_size),
                              ++seq_};
    std::vector<std::byte> message(header.length);
    memcpy(message.data(), &header, sizeof(header));
    memcpy(message.data() + sizeof(header), request, request_size);
    if (rpc::send_message(fd_, message, fds) != 0) {
        last_error_ = "the connection to uroced is lost";
        return EIO;
    }
    std::vector<int> received_fds;
    const int error = rpc::receive_message(fd_, message, received_fds);
    rpc::ReplyHeader reply;
    const bool good = !error && message.size() >= sizeof(reply);
    if (good && received) {
        received->swap(received_fds);
    }
    for (int fd : received_fds) {
        ::close(fd);
    }
    if (!good) {
        last_error_ = "the connection to uroced is lost";
        return EIO;
    }
    memcpy(&reply, message.data(), sizeof(reply));
    if (reply.magic != rpc::kMagic || reply.seq != header.seq || reply.op != op) {
        last_error_ = "uroced sent a reply that does not match the request";
        return EIO;
    }
    if (reply.error) {
        reply.message[sizeof(reply.message) - 1] = '\0';
        last_error_ = reply.message;
        return reply.error;
    }
    reply_body.assign(reinterpret_cast<const char*>(message.data()) + sizeof(reply),
                      message.size() - sizeof(reply));
    return 0;
}

int ControlClient::call(rpc::Op op, const void* request, size_t request_size, void* reply,
                        size_t reply_size, std::span<const int> fds, std::vector<int>* received) {
    std::lock_guard lock(mutex_);
    std::string body;
    std::vector<int> got;
    int error = exchange(op, request, request_size, fds, body, &got);
    if (!error && body.size() != reply_size) {
        last_error_ = "uroced sent a reply of the wrong size";
        error = EIO;
    }
    if (!error) {
        memcpy(reply, body.data(), reply_size);
        if (received) {
            received->swap(got);
        }
    }
    for (int fd : got) {
        ::close(fd);
    }
    return error;
}

int ControlClient::call_report(rpc::Op op, rpc::ReportRequest request, std::string& text) {
    std::lock_guard lock(mutex_);
    text.clear();
    for (;;) {
        request.offset = text.size();
        std::string page;
        if (int error = exchange(op, &request, sizeof(request), {}, page, nullptr); error) {
            return error;
        }
        rpc::ReportReply head;
        if (page.size() < sizeof(head)) {
            last_error_ = "uroced sent a report page without its header";
            return EIO;
        }
        memcpy(&head, page.data(), sizeof(head));
        text.append(page, sizeof(head));
        if (text.size() >= head.total || page.size() == sizeof(head)) {
            return text.size() == head.total ? 0 : EIO;
        }
    }
}

}  // namespace uroce
