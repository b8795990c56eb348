#include "net/udp_network.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "util/log.h"
#include "wire/headers.h"
#include "wire/icrc.h"

namespace uroce {
namespace {

constexpr unsigned kBatchSize = 32;  // messages per recvmmsg
// A received message may be a train of datagrams that the kernel kept
// together (UDP_GRO): up to the largest IP packet.
constexpr size_t kReceiveBytes = 65536;
constexpr int kSocketBufferBytes = 8 << 20;

// A completion's user data: a send's Buffer (aligned, so bits 0 to 2
// clear), or a socket's readiness: kReadable, the socket's kind in bits 1
// and 2, its index from bit 3, and for a multicast group's socket the
// generation of its slot from bit 32 (a slot is reused: a late completion
// for the group that had it must not be taken for the new one's).
constexpr uint64_t kReadable = 1;
enum class SocketKind : uint64_t { kDevice, kGroup, kFrames };

uint64_t readiness_tag(SocketKind kind, size_t index, uint32_t generation = 0) {
    return uint64_t{generation} << 32 | uint64_t{index} << 3 | static_cast<uint64_t>(kind) << 1 |
           kReadable;
}

size_t tag_index(uint64_t tag) {
    return (tag & 0xffffffffu) >> 3;
}

SocketKind tag_kind(uint64_t tag) {
    return static_cast<SocketKind>((tag >> 1) & 3);
}

constexpr size_t kMaxFrame = 9018;  // a jumbo frame with a VLAN tag: the largest a QP sends

// The size of each datagram of a received train; 0 for one datagram.
size_t train_segment(msghdr& header) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&header); c; c = CMSG_NXTHDR(&header, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int size = 0;
            memcpy(&size, CMSG_DATA(c), sizeof(size));
            return size > 0 ? static_cast<size_t>(size) : 0;
        }
    }
    return 0;
}

}  // namespace

// One send: a packet, or a train of packets of one size (the last may be
// shorter) that the kernel cuts apart, each from its own buffer.
struct UdpNetwork::Buffer {
    wire::IpAddress dest;
    sockaddr_storage peer{};
    socklen_t peer_length = 0;
    msghdr msg{};
    int fd = -1;
    size_t index = 0;      // of the device's socket
    uint16_t segment = 0;  // bytes of each packet
    unsigned segments = 0;
    size_t used = 0;
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))];
    std::vector<uint8_t> packets[kMaxSegments];
    iovec iovs[kMaxSegments];
    void prepare();
};

struct UdpNetwork::Batch {
    mmsghdr headers[kBatchSize];
    iovec iovs[kBatchSize];
    sockaddr_storage peers[kBatchSize];
    alignas(cmsghdr) uint8_t controls[kBatchSize][CMSG_SPACE(sizeof(int))];
    uint8_t data[kBatchSize][kReceiveBytes];
};

UdpNetwork::UdpNetwork(uint16_t port, SocketIo::Kind io)
    : port_(port), io_(make_socket_io(io)), batch_(std::make_unique<Batch>()) {}

UdpNetwork::~UdpNetwork() = default;

namespace {

// The kernel's Soft-RoCE sends UDP checksum 0 over IPv6 as over IPv4
// (prepare_udp_hdr), which IPv6 allows only to a socket that accepts it
// (RFC 6936); its own tunnel socket does. uroce sends real checksums.
bool accept_zero_checksums(int fd) {
    const int on = 1;
    return setsockopt(fd, SOL_UDP, UDP_NO_CHECK6_RX, &on, sizeof(on)) == 0;
}

// Path MTU discovery on, no fragments (IPv4: the don't-fragment bit, so
// that the kernel sends IP ID 0, as uroce's ICRC assumes); multicast leaves
// through the device's interface and does not loop back.
bool set_path_options(int fd, const wire::IpAddress& address, uint32_t ifindex) {
    const int off = 0;
    if (address.is_v4()) {
        const in_addr from{address.ipv4()};
        const int pmtu = IP_PMTUDISC_DO;
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &from, sizeof(from));
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &off, sizeof(off));
        return setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) == 0;
    }
    const int pmtu = IPV6_PMTUDISC_DO;
    const int on = 1;
    const int interface = static_cast<int>(ifindex);
    setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &interface, sizeof(interface));
    setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &off, sizeof(off));
    return setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) == 0 &&
           setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu)) == 0 &&
           accept_zero_checksums(fd);
}

// A non-blocking UDP socket on address:port.
Result bind_udp(const wire::IpAddress& address, uint32_t ifindex, uint16_t port, bool share_port,
                UniqueFd& out, bool freebind = false) {
    UniqueFd fd(socket(address.family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_storage addr;
    const socklen_t length = address.to_sockaddr(port, addr, ifindex);
    const int on = 1;
    if (!fd || !set_path_options(fd.get(), address, ifindex) ||
        (share_port && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0) ||
        (freebind && setsockopt(fd.get(), SOL_IP, IP_FREEBIND, &on, sizeof(on)) != 0) ||
        bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
        return fail(errno, "cannot bind UDP %s port %u: %s", address.text().c_str(), port,
                    strerror(errno));
    }
    out = std::move(fd);
    return ok();
}

}  // namespace

Result UdpNetwork::open(const wire::IpAddress& address, uint32_t ifindex, size_t& index,
                        bool freebind) {
    UniqueFd fd;
    if (Result r = bind_udp(address, ifindex, port_, false, fd, freebind); !r) {
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
    // Trains are taken whole; a kernel without UDP_GRO cuts them apart.
    const int on = 1;
    setsockopt(fd.get(), SOL_UDP, UDP_GRO, &on, sizeof(on));
    // A kernel without segmentation offload (before 4.18) gets packets one by one.
    const int off = 0;
    segmentation_ =
        segmentation_ && setsockopt(fd.get(), SOL_UDP, UDP_SEGMENT, &off, sizeof(off)) == 0;
    // A closed slot is taken again (its generation tells late completions
    // apart), so addresses that come and go do not grow the tables.
    index = 0;
    while (index < sockets_.size() && (sockets_[index] || has_frames(index))) {
        ++index;
    }
    if (index == sockets_.size()) {
        sockets_.emplace_back();
        segments_.push_back(true);
        addresses_.emplace_back();
        ifindexes_.push_back(0);
        source_sockets_.emplace_back();
        generations_.push_back(0);
    }
    sockets_[index] = std::move(fd);
    segments_[index] = segmentation_;
    addresses_[index] = address;
    ifindexes_[index] = ifindex;
    ++generations_[index];
    watch(readiness_tag(SocketKind::kDevice, index, generations_[index]));
    submit();
    return ok();
}

void UdpNetwork::close(size_t index) {
    for (const GroupSocket& g : groups_) {
        if (g.members.contains(index)) {
            leave(index, g.group);
        }
    }
    unwatch(readiness_tag(SocketKind::kDevice, index, generations_[index]));
    sockets_[index].reset();
    source_sockets_[index].clear();
    if (has_frames(index)) {
        unwatch(readiness_tag(SocketKind::kFrames, index));
        frame_sockets_[index].reset();
    }
}

Result UdpNetwork::open_frames(size_t index, int ifindex) {
    UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL)));
    sockaddr_ll address{};
    address.sll_family = AF_PACKET;
    address.sll_protocol = htons(ETH_P_ALL);
    address.sll_ifindex = ifindex;
    const int on = 1;
    if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        return fail(errno, "cannot open a packet socket on interface %d: %s", ifindex,
                    strerror(errno));
    }
    // Its own frames are not news to the device (before 4.20: skipped in drain_frames).
    setsockopt(fd.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof(on));
    if (frame_sockets_.size() <= index) {
        frame_sockets_.resize(index + 1);
    }
    frame_sockets_[index] = std::move(fd);
    watch(readiness_tag(SocketKind::kFrames, index));
    submit();
    return ok();
}

bool UdpNetwork::has_frames(size_t index) const {
    return index < frame_sockets_.size() && frame_sockets_[index];
}

int UdpNetwork::send_frame(size_t index, std::span<const uint8_t> frame) {
    if (!has_frames(index)) {
        return ENETDOWN;
    }
    const ssize_t sent = ::send(frame_sockets_[index].get(), frame.data(), frame.size(), 0);
    return sent < 0 ? errno : 0;
}

unsigned UdpNetwork::drain_frames(int fd, size_t index, unsigned limit,
                                  const FrameReceiver& receive) {
    unsigned taken = 0;
    if (refill_) {
        refill_();
    }
    uint8_t* frame = batch_->data[0];
    while (taken < limit) {
        sockaddr_ll from{};
        socklen_t length = sizeof(from);
        const ssize_t n = recvfrom(fd, frame, kMaxFrame, MSG_DONTWAIT | MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &length);
        if (n < 0) {
            break;
        }
        ++taken;
        // Longer than any frame a QP takes (the interface's GRO may glue
        // frames together): not for the QPs, as on a NIC whose MTU it passes.
        if (from.sll_pkttype == PACKET_OUTGOING || static_cast<size_t>(n) > kMaxFrame || !receive) {
            continue;
        }
        receive(index, {frame, static_cast<size_t>(n)});
    }
    return taken;
}

namespace {

// Joins (or leaves) `group` on interface `ifindex`: IGMP or MLD.
bool set_membership(int fd, const wire::IpAddress& group, uint32_t ifindex, bool join) {
    if (group.is_v4()) {
        ip_mreqn request{};
        request.imr_multiaddr.s_addr = group.ipv4();
        request.imr_ifindex = static_cast<int>(ifindex);
        return setsockopt(fd, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &request,
                          sizeof(request)) == 0;
    }
    ipv6_mreq request{};
    request.ipv6mr_multiaddr = group.ipv6();
    request.ipv6mr_interface = ifindex;
    return setsockopt(fd, IPPROTO_IPV6, join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &request,
                      sizeof(request)) == 0;
}

}  // namespace

UdpNetwork::GroupSocket* UdpNetwork::group_socket(const wire::IpAddress& group) {
    for (GroupSocket& g : groups_) {
        if (g.fd && g.group == group) {
            return &g;
        }
    }
    return nullptr;
}

Result UdpNetwork::join(size_t index, const wire::IpAddress& group) {
    if (group.is_v4() != addresses_[index].is_v4()) {
        return fail(EAFNOSUPPORT, "cannot join %s from %s", group.text().c_str(),
                    addresses_[index].text().c_str());
    }
    GroupSocket* g = group_socket(group);
    if (!g) {
        // Bound to the group: it takes that group's datagrams and no others.
        UniqueFd fd(socket(group.family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        sockaddr_storage addr;
        const socklen_t length = group.to_sockaddr(port_, addr, ifindexes_[index]);
        const int on = 1;
        const int off = 0;
        const bool v4 = group.is_v4();
        if (!fd || setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
            setsockopt(fd.get(), v4 ? IPPROTO_IP : IPPROTO_IPV6,
                       v4 ? IP_MULTICAST_ALL : IPV6_MULTICAST_ALL, &off, sizeof(off)) != 0 ||
            (!v4 && (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0 ||
                     !accept_zero_checksums(fd.get()))) ||
            bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
            return fail(errno, "cannot bind UDP %s port %u: %s", group.text().c_str(), port_,
                        strerror(errno));
        }
        setsockopt(fd.get(), SOL_UDP, UDP_GRO, &on, sizeof(on));
        auto free_slot = std::find_if(groups_.begin(), groups_.end(),
                                      [](const GroupSocket& s) { return !s.fd; });
        if (free_slot == groups_.end()) {
            free_slot = groups_.insert(groups_.end(), GroupSocket{});
        }
        free_slot->fd = std::move(fd);
        free_slot->group = group;
        g = &*free_slot;
        ++free_slot->generation;
        watch(
            readiness_tag(SocketKind::kGroup, free_slot - groups_.begin(), free_slot->generation));
        submit();
    }
    if (!g->members.contains(index) &&
        !set_membership(g->fd.get(), group, ifindexes_[index], true)) {
        const int error = errno;
        if (g->members.empty()) {
            unwatch(readiness_tag(SocketKind::kGroup, g - groups_.data(), g->generation));
            g->fd.reset();
        }
        return fail(error, "cannot join %s: %s", group.text().c_str(), strerror(error));
    }
    g->members.insert(index);
    return ok();
}

void UdpNetwork::leave(size_t index, const wire::IpAddress& group) {
    GroupSocket* g = group_socket(group);
    if (!g || !g->members.erase(index)) {
        return;
    }
    set_membership(g->fd.get(), group, ifindexes_[index], false);
    if (g->members.empty()) {
        unwatch(readiness_tag(SocketKind::kGroup, g - groups_.data(), g->generation));
        g->fd.reset();
    }
}

uint16_t UdpNetwork::source_port(size_t index, uint16_t wanted) {
    if (wanted == port_) {
        return port_;
    }
    auto [it, added] = source_sockets_[index].try_emplace(wanted);
    if (added) {
        UniqueFd fd;
        if (bind_udp(addresses_[index], ifindexes_[index], wanted, true, fd)) {
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
    while (free_.empty() || sending_bytes_ > kMaxSendBytes) {
        // Every buffer is on its way: wait for a send to complete (on
        // loopback, at once). Readiness seen meanwhile waits for poll().
        submit();
        take_events(true);
    }
    Buffer* buffer = free_.back();
    free_.pop_back();
    return buffer;
}

// Points the buffer's message header at its peer address and its bytes,
// and gives the packets' size when there are several.
void UdpNetwork::Buffer::prepare() {
    msg = {};
    msg.msg_name = &peer;
    msg.msg_namelen = peer_length;
    msg.msg_iov = iovs;
    msg.msg_iovlen = segments;
    if (segments > 1) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        cmsghdr* header = CMSG_FIRSTHDR(&msg);
        header->cmsg_level = SOL_UDP;
        header->cmsg_type = UDP_SEGMENT;
        header->cmsg_len = CMSG_LEN(sizeof(segment));
        memcpy(CMSG_DATA(header), &segment, sizeof(segment));
    }
}

int UdpNetwork::fd_of(uint64_t tag) const {
    const size_t index = tag_index(tag);
    switch (tag_kind(tag)) {
        case SocketKind::kDevice:
            return generations_[index] == tag >> 32 ? sockets_[index].get() : -1;
        case SocketKind::kGroup:
            return groups_[index].generation == tag >> 32 ? groups_[index].fd.get() : -1;
        case SocketKind::kFrames:
            return frame_sockets_[index].get();
    }
    return -1;
}

void UdpNetwork::watch(uint64_t tag) {
    io_->watch(fd_of(tag), tag);
}

// Late readiness of a closed socket is skipped by poll() (fd_of).
void UdpNetwork::unwatch(uint64_t tag) {
    io_->unwatch(fd_of(tag), tag);
}

bool UdpNetwork::continues_train(int fd, const wire::IpAddress& dest, size_t size) const {
    const Buffer* t = train_;
    return t && t->fd == fd && t->dest == dest && size <= t->segment &&
           t->segments < kMaxSegments && t->used + size <= kMaxTrainBytes;
}

// The packet's buffer becomes the send's next iovec.
void UdpNetwork::add_packet(Buffer& buffer, std::vector<uint8_t>&& packet) {
    buffer.iovs[buffer.segments] = {packet.data(), packet.size()};
    buffer.used += packet.size();
    sending_bytes_ += packet.size();
    buffer.packets[buffer.segments++] = std::move(packet);
    buffer.prepare();
}

void UdpNetwork::recycle(std::vector<uint8_t>&& packet) {
    if (recycle_) {
        recycle_(std::move(packet));
    }
}

void UdpNetwork::send(size_t index, const wire::IpAddress& dest, std::vector<uint8_t>&& packet,
                      uint16_t src_port) {
    if (packet.size() > kMaxPacket || dest.is_v4() != addresses_[index].is_v4()) {
        // Longer than any MTU a device offers, or of the other IP family.
        if (send_failed_) {
            send_failed_(index, dest, packet.size() > kMaxPacket ? EMSGSIZE : EAFNOSUPPORT, 1);
        }
        recycle(std::move(packet));
        return;
    }
    const int fd =
        src_port == port_ ? sockets_[index].get() : source_sockets_[index].at(src_port).get();
    const size_t size = packet.size();
    if (continues_train(fd, dest, size)) {
        Buffer& train = *train_;
        // The kernel numbers an IPv4 train's IP IDs from 0, and a peer that
        // checks the ICRC against the ID (rxe) needs this packet's.
        if (dest.is_v4() && size >= wire::kIcrcBytes) {
            const std::span<uint8_t, 4> icrc(packet.data() + size - wire::kIcrcBytes, 4);
            wire::store_icrc(wire::icrc_with_ipv4_id(wire::load_icrc(icrc), 0,
                                                     static_cast<uint16_t>(train.segments),
                                                     size - wire::kIcrcBytes),
                             icrc);
        }
        add_packet(train, std::move(packet));
        if (size < train.segment) {
            train_ = nullptr;  // only the last packet of a train may be shorter
        }
        return;
    }
    Buffer* buffer = take_buffer();
    buffer->fd = fd;
    buffer->index = index;
    buffer->dest = dest;
    buffer->peer_length = dest.to_sockaddr(port_, buffer->peer, ifindexes_[index]);
    buffer->segment = static_cast<uint16_t>(size);
    buffer->segments = 0;
    buffer->used = 0;
    add_packet(*buffer, std::move(packet));
    io_->send(fd, buffer->msg, reinterpret_cast<uint64_t>(buffer));
    train_ = segments_[index] && size > 0 ? buffer : nullptr;
}

void UdpNetwork::submit() {
    train_ = nullptr;  // the kernel reads the message header now
    io_->submit();
}

unsigned UdpNetwork::drain(int fd, size_t index, const wire::IpAddress& dest, unsigned limit,
                           const Receiver& receive) {
    Batch& b = *batch_;
    unsigned taken = 0;
    while (taken < limit) {
        if (refill_) {
            refill_();  // what was received before may still be read
        }
        // A message holds one datagram or more: ask for no more messages
        // than datagrams are left.
        const unsigned want = std::min(kBatchSize, limit - taken);
        for (unsigned i = 0; i < want; ++i) {
            b.iovs[i] = {b.data[i], kReceiveBytes};
            b.headers[i] = {};
            msghdr& h = b.headers[i].msg_hdr;
            h.msg_name = &b.peers[i];
            h.msg_namelen = sizeof(b.peers[i]);
            h.msg_iov = &b.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = b.controls[i];
            h.msg_controllen = sizeof(b.controls[i]);
        }
        const int n = recvmmsg(fd, b.headers, want, MSG_DONTWAIT, nullptr);
        if (n <= 0) {
            break;
        }
        for (int i = 0; i < n; ++i) {
            msghdr& h = b.headers[i].msg_hdr;
            const auto src = wire::IpAddress::of(reinterpret_cast<sockaddr*>(&b.peers[i]));
            if ((h.msg_flags & MSG_TRUNC) || !src) {
                continue;
            }
            // Both families keep the port in the same place.
            const uint16_t src_port =
                ntohs(reinterpret_cast<const sockaddr_in&>(b.peers[i]).sin_port);
            const size_t length = b.headers[i].msg_len;
            const size_t segment = train_segment(h);
            size_t offset = 0;
            do {
                const size_t bytes = segment ? std::min(segment, length - offset) : length;
                receive(index, {b.data[i] + offset, bytes}, *src, src_port, dest);
                offset += bytes;
                ++taken;
            } while (offset < length);
        }
        if (static_cast<unsigned>(n) < want) {
            break;
        }
    }
    return taken;
}

void UdpNetwork::take_events(bool wait) {
    events_.clear();
    io_->take_events(events_, wait);
    for (const SocketIo::Event& event : events_) {
        take_completion(event);
    }
}

void UdpNetwork::take_completion(const SocketIo::Event& event) {
    const uint64_t data = event.data;
    const int result = event.result;
    if (data & kReadable) {
        readable_.push_back(data);
        return;
    }
    Buffer* buffer = reinterpret_cast<Buffer*>(data);
    if (result < 0) {
        // A route whose interface cannot segment (udp_send_skb's EIO): that
        // socket's packets go one by one from now on. Any other failure
        // (EMSGSIZE above the MTU, EINVAL for a segment above it, no
        // route) is the packets', whether segmented or not.
        if (result == -EIO && buffer->segments > 1 && segments_.at(buffer->index)) {
            segments_[buffer->index] = false;
            log_warn(
                "UDP segmentation offload failed (%s) on the route to %s: that device "
                "sends packets one by one",
                strerror(-result), buffer->dest.text().c_str());
        }
        if (send_failed_) {
            send_failed_(buffer->index, buffer->dest, -result, buffer->segments);
        }
    }
    sending_bytes_ -= buffer->used;
    for (unsigned i = 0; i < buffer->segments; ++i) {
        recycle(std::move(buffer->packets[i]));
    }
    buffer->segments = 0;
    free_.push_back(buffer);  // a failed send is a lost packet
}

bool UdpNetwork::poll(const Receiver& receive, const FrameReceiver& receive_frame) {
    bool any = false;
    backlogged_ = false;
    take_events(false);
    // Draining may send answers, and a send may wait and note readiness.
    draining_.swap(readable_);
    for (const uint64_t tag : draining_) {
        const int fd = fd_of(tag);
        if (fd < 0) {
            continue;  // closed: its cancelled poll, or readiness that came first
        }
        const size_t index = tag_index(tag);
        unsigned taken = 0;
        switch (tag_kind(tag)) {
            case SocketKind::kDevice:
                taken = drain(fd, index, addresses_[index], kMaxReceivesPerPoll, receive);
                break;
            case SocketKind::kGroup:
                taken = drain(fd, kGroup, groups_[index].group, kMaxReceivesPerPoll, receive);
                break;
            case SocketKind::kFrames:
                taken = drain_frames(fd, index, kMaxReceivesPerPoll, receive_frame);
                break;
        }
        any |= taken > 0;
        backlogged_ |= taken >= kMaxReceivesPerPoll;
        watch(tag);
    }
    draining_.clear();
    return any;
}

}  // namespace uroce
