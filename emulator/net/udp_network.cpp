#include "net/udp_network.h"

#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace uroce {
namespace {

constexpr unsigned kRingEntries = 1024;
// Every send's completion, and each socket's readiness, fit the completion
// ring (twice the entries).
static_assert(UdpNetwork::kMaxSendBuffers <= kRingEntries);
constexpr unsigned kBatchSize = 32;    // datagrams per recvmmsg
constexpr size_t kBufferBytes = 9216;  // a 4096-byte MTU packet with all headers, and more
constexpr int kSocketBufferBytes = 8 << 20;

// A completion's user data: a send's Buffer (aligned, so bit 0 clear), or a
// socket's readiness, (index << 1) | 1.
constexpr uint64_t kReadable = 1;

}  // namespace

struct UdpNetwork::Buffer {
    sockaddr_in peer{};
    iovec iov{};
    msghdr msg{};
    uint8_t data[kBufferBytes];
    void prepare(size_t size);
};

struct UdpNetwork::Batch {
    mmsghdr headers[kBatchSize];
    iovec iovs[kBatchSize];
    sockaddr_in peers[kBatchSize];
    uint8_t data[kBatchSize][kBufferBytes];
};

UdpNetwork::UdpNetwork(uint16_t port) : port_(port), batch_(std::make_unique<Batch>()) {
    if (int error = io_uring_queue_init(kRingEntries, &ring_, 0); error < 0) {
        throw std::runtime_error(std::string("io_uring: ") + strerror(-error));
    }
    ring_ready_ = true;
}

UdpNetwork::~UdpNetwork() {
    if (ring_ready_) {
        io_uring_queue_exit(&ring_);
    }
}

namespace {

// A non-blocking UDP socket on address:port with don't-fragment set (so
// that the kernel sends IP ID 0, as uroce's ICRC assumes).
Result bind_udp(in_addr address, uint16_t port, bool share_port, UniqueFd& out) {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr = address;
    addr.sin_port = htons(port);
    const int pmtu = IP_PMTUDISC_DO;
    const int on = 1;
    if (!fd || setsockopt(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) != 0 ||
        (share_port && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0) ||
        bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        return fail(errno, "cannot bind UDP %s:%u: %s", inet_ntoa(address), port, strerror(errno));
    }
    out = std::move(fd);
    return ok();
}

}  // namespace

Result UdpNetwork::open(in_addr address) {
    UniqueFd fd;
    if (Result r = bind_udp(address, port_, false, fd); !r) {
        return r;
    }
    for (int option : {SO_RCVBUFFORCE, SO_SNDBUFFORCE}) {
        if (setsockopt(fd.get(), SOL_SOCKET, option, &kSocketBufferBytes,
                       sizeof(kSocketBufferBytes)) != 0) {
            const int fallback = option == SO_RCVBUFFORCE ? SO_RCVBUF : SO_SNDBUF;
            setsockopt(fd.get(), SOL_SOCKET, fallback, &kSocketBufferBytes,
                       sizeof(kSocketBufferBytes));
        }
    }
    sockets_.push_back(std::move(fd));
    addresses_.push_back(address);
    source_sockets_.emplace_back();
    watch(sockets_.size() - 1);
    submit();
    return ok();
}

void UdpNetwork::close(size_t index) {
    // The armed poll holds the socket: cancel it (its completion and this
    // request's carry the same tag, and poll() skips both for a closed index).
    io_uring_sqe* sqe = next_sqe();
    const uint64_t tag = (uint64_t{index} << 1) | kReadable;
    io_uring_prep_poll_remove(sqe, tag);
    io_uring_sqe_set_data64(sqe, tag);
    submit();
    sockets_[index].reset();
    source_sockets_[index].clear();
}

uint16_t UdpNetwork::source_port(size_t index, uint16_t wanted) {
    if (wanted == port_) {
        return port_;
    }
    auto [it, added] = source_sockets_[index].try_emplace(wanted);
    if (added) {
        UniqueFd fd;
        if (bind_udp(addresses_[index], wanted, true, fd)) {
            const int bytes = kSocketBufferBytes;
            if (setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
                setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
            }
            it->second = std::move(fd);
        }
    }
    return it->second ? wanted : port_;
}

UdpNetwork::Buffer* UdpNetwork::take_buffer() {
    if (free_.empty() && buffers_.size() < kMaxSendBuffers) {
        buffers_.push_back(std::make_unique<Buffer>());
        free_.push_back(buffers_.back().get());
    }
    while (free_.empty()) {
        // Every buffer is on its way: wait for a send to complete (on
        // loopback, at once). Readiness seen meanwhile waits for poll().
        submit();
        io_uring_cqe* cqe;
        if (io_uring_wait_cqe(&ring_, &cqe) == 0) {
            take_completion(cqe);
        }
    }
    Buffer* buffer = free_.back();
    free_.pop_back();
    return buffer;
}

io_uring_sqe* UdpNetwork::next_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
        submit();
        sqe = io_uring_get_sqe(&ring_);
    }
    ++unsubmitted_;
    return sqe;
}

// Points the buffer's message header at its peer address and `size` bytes.
void UdpNetwork::Buffer::prepare(size_t size) {
    iov = {data, size};
    msg = {};
    msg.msg_name = &peer;
    msg.msg_namelen = sizeof(peer);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
}

void UdpNetwork::watch(size_t index) {
    io_uring_sqe* sqe = next_sqe();
    io_uring_prep_poll_add(sqe, sockets_[index].get(), POLLIN);
    io_uring_sqe_set_data64(sqe, (uint64_t{index} << 1) | kReadable);
}

std::span<uint8_t> UdpNetwork::send_buffer() {
    if (!building_) {
        building_ = take_buffer();
    }
    return {building_->data, sizeof(building_->data)};
}

void UdpNetwork::send(size_t index, uint32_t dest_ipv4, size_t size, uint16_t src_port) {
    Buffer* buffer = building_;
    building_ = nullptr;
    buffer->peer = {};
    buffer->peer.sin_family = AF_INET;
    buffer->peer.sin_addr.s_addr = dest_ipv4;
    buffer->peer.sin_port = htons(port_);
    buffer->prepare(size);
    io_uring_sqe* sqe = next_sqe();
    const int fd =
        src_port == port_ ? sockets_[index].get() : source_sockets_[index].at(src_port).get();
    io_uring_prep_sendmsg(sqe, fd, &buffer->msg, 0);
    io_uring_sqe_set_data(sqe, buffer);
}

void UdpNetwork::submit() {
    if (unsubmitted_) {
        io_uring_submit(&ring_);
        unsubmitted_ = 0;
    }
}

unsigned UdpNetwork::drain(size_t index, unsigned limit, const Receiver& receive) {
    Batch& b = *batch_;
    unsigned taken = 0;
    while (taken < limit) {
        const unsigned want = std::min(kBatchSize, limit - taken);
        for (unsigned i = 0; i < want; ++i) {
            b.iovs[i] = {b.data[i], kBufferBytes};
            b.headers[i] = {};
            b.headers[i].msg_hdr.msg_name = &b.peers[i];
            b.headers[i].msg_hdr.msg_namelen = sizeof(b.peers[i]);
            b.headers[i].msg_hdr.msg_iov = &b.iovs[i];
            b.headers[i].msg_hdr.msg_iovlen = 1;
        }
        const int n = recvmmsg(sockets_[index].get(), b.headers, want, MSG_DONTWAIT, nullptr);
        if (n <= 0) {
            break;
        }
        for (int i = 0; i < n; ++i) {
            if (!(b.headers[i].msg_hdr.msg_flags & MSG_TRUNC)) {
                receive(index, {b.data[i], b.headers[i].msg_len}, b.peers[i].sin_addr.s_addr,
                        ntohs(b.peers[i].sin_port));
            }
        }
        taken += static_cast<unsigned>(n);
        if (static_cast<unsigned>(n) < want) {
            break;
        }
    }
    return taken;
}

void UdpNetwork::take_completion(io_uring_cqe* cqe) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    io_uring_cqe_seen(&ring_, cqe);
    if (data & kReadable) {
        readable_.push_back(data >> 1);
    } else {
        free_.push_back(reinterpret_cast<Buffer*>(data));  // a failed send is a lost packet
    }
}

bool UdpNetwork::poll(const Receiver& receive) {
    bool any = false;
    backlogged_ = false;
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        take_completion(cqe);
    }
    // Draining may send answers, and a send may wait and note readiness.
    draining_.swap(readable_);
    for (const size_t index : draining_) {
        if (!sockets_[index]) {
            continue;  // closed: its cancelled poll, or readiness that came first
        }
        const unsigned taken = drain(index, kMaxReceivesPerPoll, receive);
        any |= taken > 0;
        backlogged_ |= taken == kMaxReceivesPerPoll;
        watch(index);
    }
    draining_.clear();
    return any;
}

}  // namespace uroce
