// The requester (rxe_req.c): send WQEs become request packets, in order,
// within the limits the QP sets (outstanding READs and atomics, fences, the
// PSN window, RNR waits). It only sends: the completer retires what is
// answered, and sends it back (go back N) when something was lost.
#pragma once

#include <stdint.h>

#include <span>
#include <vector>

#include "memory/stage_pool.h"
#include "transport/context.h"

namespace uroce::transport {

class Requester {
  public:
    explicit Requester(PacketOutput& output) : output_(output) {}

    // Sends what a QP in RTS with a send queue may send, at most `budget`
    // request packets (taken off it). Whether it did anything.
    bool run(const QpOf& at, Clock::time_point now, uint32_t& budget);
    // Copies the WQEs posted since into the QP's window; a WQE the provider
    // could not have written (bad sizes, unknown opcode) fails with a local
    // QP error when it reaches the front.
    bool take_work(const QpOf& at);
    // The message bytes [offset, offset + bytes), read from the application
    // a chunk of several packets at a time; empty when they cannot be read.
    std::span<const std::byte> stage(SendWork& work, uint64_t offset, uint64_t bytes);
    // Every packet of the WQE has left: a retransmission reads it again.
    void release_stage(SendWork& work);
    // Whether the QP has WQEs taken and not yet completed.
    static bool busy(const Qp& qp) { return !qp.requester.window.empty(); }

  private:
    bool start_work(const QpOf& at, SendWork& work);
    bool send_requests(const QpOf& at, SendWork& work, uint32_t& budget);
    // Packet `index` of the work; `ask_ack`: it asks for an acknowledgement
    // whatever its place in the message.
    void send_packet(const QpOf& at, SendWork& work, uint32_t index, bool ask_ack);

    PacketOutput& output_;
    std::vector<std::byte> entry_;  // a WQE on its way out of the send queue
    StagePool stages_;
};

}  // namespace uroce::transport
