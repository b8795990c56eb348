// The IBA transports (RC, UC, UD), split as in the kernel's Soft-RoCE: the
// requester turns send WQEs into request packets (requester.cpp), the
// completer turns acknowledgements and responses into completions
// (completer.cpp), the responder executes incoming requests and answers them
// (responder.cpp; UD's datagrams in datagram.cpp). Every packet reaches them
// through the checks of receive.cpp; timers, retries and go-back-N are in
// retransmit.cpp, a QP's failure and flush in flush.cpp. RAW_PACKET QPs send
// and receive whole Ethernet frames (raw_ethernet.cpp). All of it runs on the
// data-plane thread.
#pragma once

#include <stdint.h>

#include <span>

#include "device/device.h"
#include "memory/write_batch.h"
#include "objects/objects.h"
#include "objects/qp_state.h"
#include "wire/packet.h"

namespace uroce::transport {

// Where packets leave a device; the engine routes them (to a device of this
// daemon, or to UDP), and traces and faults see them there.
class PacketOutput {
  public:
    virtual ~PacketOutput() = default;
    // A packet of `qp` (whose number picks the UDP source port).
    virtual void send(Device& from, const Qp& qp, uint32_t dest_ipv4,
                      const wire::PacketHeaders& headers, std::span<const std::byte> payload) = 0;
    // A whole Ethernet frame a RAW_PACKET QP sends onto the emulated segment.
    virtual void send_frame(Device& from, const Qp& sender, std::span<const std::byte> frame) = 0;
};

// Where the receive path hands what is not the transport's: MADs for the
// connection manager, and each QP a packet gave work, for the engine to
// schedule.
class ReceiveSink {
  public:
    virtual ~ReceiveSink() = default;
    virtual void receive_mad(Device& to, uint32_t src_ipv4, std::span<const uint8_t> mad) = 0;
    virtual void qp_touched(const Qp& qp) = 0;
};

// The errors a responder finds in a request (IBA 9.7.5.2.4 to 9.7.5.2.6,
// classes B to D), and what each does: on RC and XRC the NAK it sends and
// the event the QP reports as it moves to ERR; on UC the message is dropped
// and the QP stays (class E). responder_error applies them, nothing else.
enum class RequestError : uint8_t { kInvalidRequest, kRemoteAccess, kRemoteOperational };

struct RequestErrorInfo {
    wire::NakCode nak;
    ibv_event_type event;
};

inline constexpr RequestErrorInfo kRequestErrors[] = {
    /* kInvalidRequest */ {wire::NakCode::kInvalidRequest, IBV_EVENT_QP_REQ_ERR},
    /* kRemoteAccess */ {wire::NakCode::kRemoteAccessError, IBV_EVENT_QP_ACCESS_ERR},
    // A receive buffer the responder cannot write: rxe reports it so too.
    /* kRemoteOperational */ {wire::NakCode::kRemoteOperationalError, IBV_EVENT_QP_ACCESS_ERR},
};

constexpr const RequestErrorInfo& info(RequestError error) {
    return kRequestErrors[static_cast<size_t>(error)];
}

// How a packet reached a device.
struct Arrival {
    uint32_t src_ipv4;   // network order
    uint32_t dest_ipv4;  // the device's address, or a multicast group
    uint16_t src_port;   // UDP, host order
    uint16_t dest_port;  // the daemon's RoCE port
    bool from_udp;       // over a socket, with an ICRC; a local delivery has none
    Clock::time_point now;
};

// The emulated Ethernet segment carries frames of a 14-byte header up to a
// 9000-byte (jumbo) MTU with one VLAN tag.
inline constexpr uint64_t kMinFrame = 14;
inline constexpr uint64_t kMaxFrame = 9000 + 14 + 4;

class Transport {
  public:
    explicit Transport(PacketOutput& output) : output_(output) {}

    // Moves what the QP may send onto the wire, at most `budget` request
    // packets (taken off it); flushes a QP in ERR. Returns whether it did
    // anything.
    bool run_requester(Device& device, Qp& qp, Clock::time_point now, uint32_t& budget);
    // Answers what the responder has taken on: the rest of a READ
    // response, then the requests waiting behind it. Returns whether it did
    // anything.
    bool run_responder(Device& device, Qp& qp);
    // Retransmission and RNR timers that are due.
    void run_timers(Device& device, Qp& qp, Clock::time_point now);
    // A packet that arrived for device `to` (receive.cpp): checked in order
    // and handed to the completer, the responder or the datagram receiver of
    // its QP, or to the sink.
    void receive(Device& to, std::span<const uint8_t> bytes, const Arrival& arrival,
                 ReceiveSink& sink);
    // A RAW_PACKET QP's send queue: each WQE one frame onto the segment;
    // flushes a QP in ERR. Returns whether it did anything.
    bool run_raw_sender(Device& device, Qp& qp);
    // Whether the QP has work under way that the engine must come back to
    // (new WQEs ring its doorbell instead: queues::DoorbellBits). The
    // requester: messages to send or to be acknowledged, or a timer.
    static bool requester_busy(const Qp& qp);
    // The responder: requests queued, or a READ's responses to send.
    static bool responder_busy(const Qp& qp);
    // The earliest timer of the QP, kNever when none runs.
    static Clock::time_point next_deadline(const Qp& qp);
    // Makes the writes into applications' memory that the responder queued
    // (the engine, at the end of each turn).
    void finish_placements();

  private:
    // retransmit.cpp
    void retry(Device& device, Qp& qp, uint32_t psn);
    void restart_from(Qp& qp, uint32_t psn);
    // flush.cpp
    void fail_qp(Device& device, Qp& qp, ibv_wc_status status);
    bool flush(Device& device, Qp& qp);
    // receive.cpp
    void deliver(Device& device, Qp& qp, const wire::ParsedPacket& packet, const Arrival& arrival);
    // requester.cpp
    bool take_work(Device& device, Qp& qp);
    bool start_work(Device& device, Qp& qp, SendWork& work);
    bool send_requests(Device& device, Qp& qp, SendWork& work, uint32_t& budget);
    // Packet `index` of the work; `ask_ack`: it asks for an acknowledgement
    // whatever its place in the message.
    void send_packet(Device& device, Qp& qp, SendWork& work, uint32_t index, bool ask_ack);
    std::span<const std::byte> stage(SendWork& work, uint64_t offset, uint64_t bytes);
    void release_stage(SendWork& work);
    // completer.cpp
    void on_response(Device& device, Qp& qp, const wire::ParsedPacket& packet,
                     Clock::time_point now);
    void on_data_response(Device& device, Qp& qp, const wire::ParsedPacket& packet,
                          Clock::time_point now);
    bool take_read_response(Device& device, Qp& qp, SendWork& work,
                            const wire::ParsedPacket& packet, uint32_t mtu);
    void on_acknowledgement(Device& device, Qp& qp, const wire::ParsedPacket& packet,
                            Clock::time_point now);
    void complete_acknowledged(Device& device, Qp& qp, uint32_t acked_psn);
    void complete_front(Device& device, Qp& qp, ibv_wc_status status);
    // responder.cpp
    void on_request(Device& device, Qp& qp, const wire::ParsedPacket& packet, uint32_t src_ipv4);
    // One request packet on its way through the responder (what rxe's
    // rxe_pkt_info is): the device and QP it arrived for, the packet, and
    // the requester's address its answers go to.
    struct Request {
        Device& device;
        Qp& qp;
        const wire::ParsedPacket& packet;
        uint32_t peer_ipv4;
    };
    void execute_send(const Request& req);
    void execute_atomic_write(const Request& req);
    void execute_write(const Request& req);
    void execute_read(const Request& req, const ResponderResource& request);
    void send_read_responses(Device& device, Qp& qp);
    void execute_atomic(const Request& req);
    void answer_duplicate(const Request& req);
    void acknowledge(Device& device, Qp& qp, uint32_t psn, wire::Aeth aeth, uint32_t dest_ipv4);
    void atomic_acknowledge(Device& device, Qp& qp, uint32_t psn, uint64_t original,
                            uint32_t dest_ipv4);
    void responder_error(Device& device, Qp& qp, uint32_t psn, RequestError error,
                         uint32_t dest_ipv4);
    void rnr_nak(Device& device, Qp& qp, uint32_t psn, uint32_t dest_ipv4);
    bool memory_failed(Device& device, Qp& qp, int error, uint32_t psn, RequestError failure,
                       uint32_t dest_ipv4);
    // A write into application memory, queued (memory/write_batch.h), and
    // how its request fails should the write fail: the responder's with a
    // NAK for `psn`, a READ response's (`read_response`, the READ's first
    // PSN) with a local protection error when the READ completes.
    struct Placement {
        Device* device;
        Qp* qp;
        uint32_t psn;
        RequestError error;
        uint32_t src_ipv4;
        bool read_response;
    };
    bool place(Device& device, Qp& qp, std::span<const std::byte> payload, uint32_t psn,
               RequestError error, uint32_t src_ipv4);
    bool queue_write(const Placement& placement, pid_t pid, std::span<const std::byte> bytes,
                     std::span<const Segment> to);
    // Makes the queued writes; false when one of `qp`'s responder failed
    // (and failed the QP).
    bool placed(const Qp* qp);
    void placement_failed(const Placement& placement);
    // datagram.cpp
    void on_datagram(Device& device, Qp& qp, const wire::ParsedPacket& packet, uint32_t src_ipv4,
                     uint32_t dest_ipv4);

    PacketOutput& output_;
    std::vector<std::byte> scratch_;  // a WQE, or a datagram, on its way
    StagePool stages_;
    StageBuffer reply_stage_;  // a READ response's bytes
    WriteBatch writes_;
    std::vector<Placement> placements_;  // by the writes' tags
    std::vector<Placement> flushing_;
};

// A frame that steering gave a RAW_PACKET QP, or a WQ of an RSS QP: it
// fills the next receive WQE; false when it was dropped (no WQE posted, or
// the queue is not receiving).
bool receive_frame(Device& device, Qp& qp, std::span<const std::byte> frame);
bool receive_frame(Device& device, Wq& wq, std::span<const std::byte> frame);

// Brings the transport state in line with a state change that modify_qp
// just made (from `from`, with the attributes in `mask`).
void prepare_transport(Qp& qp, ibv_qp_state from, int mask);

// The IPv4 address (network order) of the QP's destination GID.
uint32_t destination_ipv4(const Qp& qp);

// The largest payload of a QP's packet: its path MTU, or for UD (which has
// no path) the port's.
inline uint32_t mtu_bytes(const Device& device, const Qp& qp) {
    return 128u << (qp.type == IBV_QPT_UD ? device.port_attr().active_mtu : qp.attr.path_mtu);
}

// Whether a UD QP joined the group of RoCE v2 multicast address `group_ipv4`
// (its GID ::ffff:a.b.c.d, any LID).
bool joined(const Qp& qp, uint32_t group_ipv4);

}  // namespace uroce::transport
