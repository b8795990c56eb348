// The responder (rxe_resp.c): checks each request's PSN, executes it against
// the receive queue and registered memory, and answers with ACKs, NAKs, READ
// responses and atomic acknowledgements (responder.cpp); UD's datagrams fill
// receive WQEs and are not answered (datagram.cpp).
#pragma once

#include <stdint.h>

#include <span>
#include <vector>

#include "memory/stage_pool.h"
#include "transport/context.h"
#include "transport/placements.h"
#include "transport/request_errors.h"
#include "util/rate_limit.h"

namespace uroce::transport {

class Responder {
  public:
    explicit Responder(PacketOutput& output) : output_(output), placements_(*this) {}

    // A request packet for a QP that takes requests, with nothing waiting
    // before it.
    void on_request(const Incoming& in);
    // A UD datagram for a QP that takes requests.
    void on_datagram(const Incoming& in);
    // Answers what the responder has taken on: the rest of a READ
    // response, then the requests waiting behind it. Whether it did anything.
    bool run(const QpOf& at);
    // Whether run() has something to do.
    static bool busy(const Qp& qp) { return qp.responder.reply || !qp.responder.waiting.empty(); }
    // A queued write for request `psn` could not be made.
    void write_failed(const QpOf& at, uint32_t psn, RequestError error);
    // The writes into applications' memory, queued: SEND and WRITE payloads
    // here, READ responses by the completer; a failed one of the responder's
    // comes back to write_failed.
    Placements& placements() { return placements_; }

  private:
    void execute_send(const Incoming& in);
    void execute_atomic_write(const Incoming& in);
    void execute_write(const Incoming& in);
    void execute_read(const Incoming& in, const ResponderResource& request);
    void execute_atomic(const Incoming& in);
    void answer_duplicate(const Incoming& in);
    // Queues a packet's payload for where the message has got to; false
    // when the QP failed instead.
    bool place(const Incoming& in, std::span<const std::byte> payload, RequestError error);
    bool placed(const Qp& qp);
    void send_read_responses(const QpOf& at);
    void acknowledge(const QpOf& at, uint32_t psn, wire::Aeth aeth);
    void atomic_acknowledge(const QpOf& at, uint32_t psn, uint64_t original);
    void responder_error(const QpOf& at, uint32_t psn, RequestError error);
    void rnr_nak(const QpOf& at, uint32_t psn);
    bool memory_failed(const QpOf& at, int error, uint32_t psn, RequestError failure);
    // Whether the QP's access flags and path MTU take the request; refuses
    // it otherwise.
    bool admits(const Incoming& in, uint32_t psn);
    // A request whose payload the path MTU refuses (rxe's check_length).
    void refuse_length(const Incoming& in, uint32_t psn);
    // The remote access check of a request (rxe's check_rkey): the rkey
    // names an MR or window of the QP's PD covering the range with
    // `access`; `extent` is then where it lands. Otherwise the QP keeps why
    // (check mode's bad-remote-key), the request is refused with a remote
    // access error, and false.
    bool remote_access(const Incoming& in, uint32_t psn, const char* operation, uint32_t rkey,
                       uint64_t va, uint64_t length, int access, Extent& extent);
    // A READ or atomic executed: the responder resource it holds (the
    // oldest let go beyond max_dest_rd_atomic), and the PSN and MSN after it.
    static void hold_resource(Qp& qp, const ResponderResource& resource);

    PacketOutput& output_;
    Placements placements_;
    std::vector<std::byte> datagram_;  // a UD receive's GRH and payload
    StageBuffer reply_stage_;          // a READ response's bytes
    RateLimit lengths_logged_{10, 1};  // refuse_length's lines
};

}  // namespace uroce::transport
