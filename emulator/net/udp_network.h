// RoCEv2 over UDP: one socket per device on its address. Sends go through
// the network's SocketIo (socket_io.h: an io_uring, or the readiness loop
// where io_uring is refused) and give their buffers back when they
// complete. It also says when a socket is readable; the socket is then
// drained with recvmmsg. (Receives posted on an io_uring, several per
// socket, were all woken by every datagram.)
//
// Packets of one size sent in a row from one socket to one peer leave in
// one send with UDP segmentation offload (UDP_SEGMENT), and the sockets
// take such trains whole (UDP_GRO): the kernel's work per datagram is done
// once per train, while on the wire every packet is still a datagram of
// its own. A send gathers the packets' own buffers (one iovec each), which
// go back to their owner when the send completes: no copy in the daemon.
// Every packet sent is a RoCEv2 packet whose ICRC was computed for IP ID
// 0; the kernel numbers a train's IDs 0, 1, 2, ..., so each later
// packet's ICRC is moved to its ID here.
#pragma once

#include <netinet/in.h>
#include <stdint.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "net/socket_io.h"
#include "util/result.h"
#include "util/unique_fd.h"
#include "wire/ip_address.h"

namespace uroce {

class UdpNetwork {
  public:
    // (index of the receiving device's socket, or kGroup for a multicast
    // group's, packet, source address, source port, destination address)
    using Receiver = std::function<void(size_t, std::span<const uint8_t>, const wire::IpAddress&,
                                        uint16_t, const wire::IpAddress&)>;
    static constexpr size_t kGroup = SIZE_MAX;
    // (index of the sending socket, destination, errno, packets): packets
    // the kernel would not send (larger than the route's MTU, no route, a
    // full socket), lost as on a wire.
    using SendFailed = std::function<void(size_t, const wire::IpAddress&, int, unsigned)>;

    // Throws std::runtime_error when `io`'s kind cannot be set up.
    UdpNetwork(uint16_t port, SocketIo::Kind io);
    ~UdpNetwork();
    UdpNetwork(const UdpNetwork&) = delete;
    UdpNetwork& operator=(const UdpNetwork&) = delete;

    void on_send_failed(SendFailed failed) { send_failed_ = std::move(failed); }
    // Where a packet's buffer goes once the kernel has taken its bytes (or
    // refused them): the engine's pool of packet buffers.
    using Recycle = std::function<void(std::vector<uint8_t>&&)>;
    void on_sent(Recycle recycle) { recycle_ = std::move(recycle); }
    // What runs before the receive buffers are filled again: a received
    // packet's bytes stay until then (or until the next poll()), so its
    // owner can still read them (the engine's lent writes).
    void on_refill(std::function<void()> refill) { refill_ = std::move(refill); }

    // Binds <address>:<port>, IPv4 or IPv6, on interface `ifindex` (the
    // scope of a link-local address; where multicast leaves); `index` is
    // the socket's (a closed one's may be taken again). `freebind`: the
    // address may not be usable yet (an IPv6 address still in duplicate
    // address detection); its packets arrive once it is.
    Result open(const wire::IpAddress& address, uint32_t ifindex, size_t& index,
                bool freebind = false);
    // Closes socket `index` and its send-only sockets (rdma link delete),
    // leaving its groups; the index is not used again.
    void close(size_t index);

    // Device `index` joins multicast group `group` of its address's family
    // on its interface (IGMP or MLD, and the interface's filter): the group's
    // datagrams arrive, through one socket per group bound to it, with
    // kGroup as their index. Sends to a group leave through the device's
    // interface and do not loop back (the engine delivers to its own
    // devices itself).
    Result join(size_t index, const wire::IpAddress& group);
    void leave(size_t index, const wire::IpAddress& group);

    // RAW_PACKET frames on device `index`'s interface `ifindex`, through a
    // packet socket (CAP_NET_RAW). What arrives there reaches poll()'s
    // FrameReceiver; frames the host sends itself do not.
    Result open_frames(size_t index, int ifindex);
    bool has_frames(size_t index) const;
    // Sends one frame there now: 0, or the errno of a frame not sent.
    int send_frame(size_t index, std::span<const uint8_t> frame);
    // (index of the device whose interface the frame arrived on, frame)
    using FrameReceiver = std::function<void(size_t, std::span<const uint8_t>)>;

    // The source port device `index` can send from for `wanted`: it, once a
    // socket is bound there (SO_REUSEPORT, so that daemons of one user
    // share ports), else the device's own port when it cannot be bound.
    uint16_t source_port(size_t index, uint16_t wanted);
    // Sends `packet` (at most kMaxPacket bytes) from device `index`'s
    // address and `src_port` (one source_port() gave), with the packets
    // before it when it continues their train; it leaves at submit(), and
    // its buffer goes to on_sent()'s callback when the send completes.
    void send(size_t index, const wire::IpAddress& dest, std::vector<uint8_t>&& packet,
              uint16_t src_port);
    static constexpr size_t kMaxPacket = 9216;  // a 4096-byte MTU packet with all headers, and more
    // Datagrams in one segmented send (the kernel's UDP_MAX_SEGMENTS), and
    // their bytes: one IP packet's payload.
    static constexpr unsigned kMaxSegments = 64;
    static constexpr size_t kMaxTrainBytes = 65507;

    // Sends on their way at most; their completions fit the completion
    // ring. Beyond it, or beyond kMaxSendBytes of packets on their way,
    // send() waits for one to complete.
    static constexpr size_t kMaxSendBuffers = 1024;
    static constexpr size_t kMaxSendBytes = 16 << 20;
    // Send buffers allocated so far (kept for reuse).
    size_t send_buffers() const { return buffers_.size(); }

    // Datagrams one poll() takes from a socket, at most (and the rest of
    // a train that crosses the bound).
    static constexpr unsigned kMaxReceivesPerPoll = 256;

    // Hands every packet that arrived to `receive`, every frame to
    // `receive_frame`; true when there were any.
    bool poll(const Receiver& receive, const FrameReceiver& receive_frame = {});
    // Whether the last poll() reached kMaxReceivesPerPoll on some socket:
    // more packets may be waiting in it.
    bool backlogged() const { return backlogged_; }
    // Whether a socket's readiness was taken off the ring (while waiting for
    // a send buffer) and waits for the next poll().
    bool readiness_pending() const { return !readable_.empty(); }
    void submit();
    // Readable while the network has news (a send completed, a socket
    // readable): what the engine sleeps on.
    int wait_fd() const { return io_->wait_fd(); }
    SocketIo::Kind io_kind() const { return io_->kind(); }
    uint16_t port() const { return port_; }

  private:
    struct Buffer;
    struct Batch;
    // A multicast group's receiving socket and the devices that joined it.
    struct GroupSocket {
        UniqueFd fd;
        wire::IpAddress group;
        uint32_t generation = 0;  // of the slot, one more for each group that has it
        std::set<size_t> members;
    };
    // Asks the SocketIo to report when the socket a readiness tag names is
    // readable (readiness_tag in udp_network.cpp), or to stop.
    void watch(uint64_t tag);
    void unwatch(uint64_t tag);
    // The socket a readiness tag names; -1 once closed (or its slot reused).
    int fd_of(uint64_t tag) const;
    // Whether `packet` may join the train being gathered.
    bool continues_train(int fd, const wire::IpAddress& dest, size_t size) const;
    void add_packet(Buffer& buffer, std::vector<uint8_t>&& packet);
    void recycle(std::vector<uint8_t>&& packet);
    // A free send buffer; waits for a send to complete when all are in use
    // or kMaxSendBytes are on their way.
    Buffer* take_buffer();
    // Takes the SocketIo's events (waiting for one with `wait`): a send's
    // completion frees its buffer; a socket's readiness is noted in
    // readable_.
    void take_events(bool wait);
    void take_completion(const SocketIo::Event& event);
    // Hands the datagrams waiting in `fd` to `receive` as device `index`'s
    // (or kGroup's) for `dest`, up to `limit` (and the rest of a train);
    // returns how many.
    unsigned drain(int fd, size_t index, const wire::IpAddress& dest, unsigned limit,
                   const Receiver& receive);
    GroupSocket* group_socket(const wire::IpAddress& group);
    unsigned drain_frames(int fd, size_t index, unsigned limit, const FrameReceiver& receive);

    uint16_t port_;
    std::unique_ptr<SocketIo> io_;
    std::vector<SocketIo::Event> events_;  // taken from io_, reused
    std::vector<UniqueFd> sockets_;
    std::vector<wire::IpAddress> addresses_;  // of each device's socket
    std::vector<uint32_t> ifindexes_;         // of each device's interface
    std::vector<uint32_t> generations_;       // of each socket's slot, one more per opening
    // Send-only sockets on other source ports, per device; an invalid one
    // marks a port that could not be bound. At most wire::kSourcePorts each.
    std::vector<std::map<uint16_t, UniqueFd>> source_sockets_;
    std::vector<std::unique_ptr<Buffer>> buffers_;
    std::vector<Buffer*> free_;
    std::vector<GroupSocket> groups_;      // a closed one's slot is reused
    std::vector<UniqueFd> frame_sockets_;  // by device index, once opened
    std::vector<uint64_t> readable_;       // readiness tags of sockets not yet drained
    std::vector<uint64_t> draining_;       // those poll() is draining
    Buffer* train_ = nullptr;              // the last send, until submitted: packets may join it
    bool segmentation_ = true;             // off on a kernel without UDP_SEGMENT
    // Per socket index: off once its route could not segment (EIO: its
    // interface does not offload checksums).
    std::vector<bool> segments_;
    SendFailed send_failed_;
    Recycle recycle_;
    std::function<void()> refill_;
    size_t sending_bytes_ = 0;      // of the sends on their way
    std::unique_ptr<Batch> batch_;  // recvmmsg buffers
    bool backlogged_ = false;
};

}  // namespace uroce
