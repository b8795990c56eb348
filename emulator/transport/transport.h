// The IBA transports (RC, UC, UD), split as in the kernel's Soft-RoCE into
// three parts: the requester turns send WQEs into request packets
// (requester.h), the completer turns acknowledgements and responses into
// completions, retransmits and flushes (completer.h), the responder executes
// incoming requests and answers them (responder.h). Every packet reaches them
// through the checks of receive.cpp. RAW_PACKET QPs send and receive whole
// Ethernet frames (raw_ethernet.cpp). Transport holds the parts and is what
// the engine calls; all of it runs on the data-plane thread.
#pragma once

#include <stdint.h>

#include <span>

#include "transport/completer.h"
#include "transport/context.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace uroce::transport {

// Where the receive path hands what is not the transport's: MADs for the
// connection manager, and each QP a packet gave work, for the engine to
// schedule.
class ReceiveSink {
  public:
    virtual ~ReceiveSink() = default;
    virtual void receive_mad(Device& to, const wire::IpAddress& src_ip,
                             const wire::IpAddress& dest_ip, std::span<const uint8_t> mad) = 0;
    virtual void qp_touched(const Qp& qp) = 0;
};

// How a packet reached a device.
struct Arrival {
    wire::IpAddress src_ip;   // network order
    wire::IpAddress dest_ip;  // the device's address, or a multicast group
    uint16_t src_port;        // UDP, host order
    uint16_t dest_port;       // the daemon's RoCE port
    bool from_udp;            // over a socket, with an ICRC; a local delivery has none
    Clock::time_point now;
    // The bytes stay until finish_placements() (Incoming::payload_lent).
    bool lent = false;
};

// The emulated Ethernet segment carries frames of a 14-byte header up to a
// 9000-byte (jumbo) MTU with one VLAN tag.
inline constexpr uint64_t kMinFrame = 14;
inline constexpr uint64_t kMaxFrame = 9000 + 14 + 4;

class Transport {
  public:
    explicit Transport(PacketOutput& output)
        : output_(output),
          requester_(output),
          responder_(output),
          completer_(requester_, responder_.placements()) {}

    // Moves what the QP may send onto the wire, at most `budget` request
    // packets (taken off it), and retires what needs no answer; flushes a
    // QP in ERR. Returns whether it did anything.
    bool run_requester(Device& device, Qp& qp, Clock::time_point now, uint32_t& budget);
    // The responder's READ responses and waiting requests.
    bool run_responder(Device& device, Qp& qp) { return responder_.run({device, qp}); }
    // Retransmission and RNR timers that are due.
    void run_timers(Device& device, Qp& qp, Clock::time_point now) {
        completer_.run_timers({device, qp}, now);
    }
    // A packet that arrived for device `to` (receive.cpp): checked in order
    // and handed to the completer or the responder of its QP, or to the sink.
    void receive(Device& to, std::span<const uint8_t> bytes, const Arrival& arrival,
                 ReceiveSink& sink);
    // A RAW_PACKET QP's send queue: each WQE one frame onto the segment;
    // flushes a QP in ERR. Returns whether it did anything.
    bool run_raw_sender(Device& device, Qp& qp);
    // Whether the QP has work under way that the engine must come back to
    // (new WQEs ring its doorbell instead: queues::DoorbellBits). The
    // requester: messages to send or to be acknowledged, or a timer.
    static bool requester_busy(const Qp& qp) {
        return Requester::busy(qp) || Completer::next_deadline(qp) != kNever;
    }
    // The responder: requests queued, or a READ's responses to send.
    static bool responder_busy(const Qp& qp) { return Responder::busy(qp); }
    // The earliest timer of the QP, kNever when none runs.
    static Clock::time_point next_deadline(const Qp& qp) { return Completer::next_deadline(qp); }
    // Makes the writes into applications' memory that are queued (the
    // engine, at the end of each turn).
    void finish_placements() { responder_.placements().placed(nullptr); }

  private:
    void deliver(Device& device, Qp& qp, const wire::ParsedPacket& packet, const Arrival& arrival);
    void deliver_request(const Incoming& in);

    PacketOutput& output_;  // RAW_PACKET frames
    Requester requester_;
    Responder responder_;
    Completer completer_;
};

// A frame that steering gave a RAW_PACKET QP, or a WQ of an RSS QP: it
// fills the next receive WQE; false when it was dropped (no WQE posted, or
// the queue is not receiving).
bool receive_frame(Device& device, Qp& qp, std::span<const std::byte> frame);
bool receive_frame(Device& device, Wq& wq, std::span<const std::byte> frame);

// Brings the transport state in line with a state change that modify_qp
// just made (from `from`, with the attributes in `mask`).
void prepare_transport(Qp& qp, ibv_qp_state from, int mask);

// Whether a UD QP joined the group of RoCE v2 multicast address `group_ip`
// (its GID ::ffff:a.b.c.d, any LID).
bool joined(const Qp& qp, const wire::IpAddress& group_ip);

}  // namespace uroce::transport
