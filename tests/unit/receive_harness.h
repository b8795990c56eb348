// A daemon's receive path in one process, for feeding it forged packets:
// an Engine with two devices (uroce0 on 127.0.0.1, uroce1 on 127.0.0.2) on a
// free UDP port, and on uroce1 a client Context (this process) with two PDs,
// a CQ, memory regions over one buffer that guard bytes surround, RC QPs in
// every state and a UC QP whose peer is the "forger", 127.0.0.9, and a UD QP. The forger's UDP
// socket receives what the device answers. Used by receive_path_test and by
// the receive_fuzz libFuzzer target; knows nothing of GoogleTest.
#pragma once

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engines.h"
#include "protocol/queues.h"
#include "queue.h"
#include "util/unique_fd.h"
#include "verbs/context.h"
#include "wire/packet.h"

namespace uroce::test {

// 127.0.0.x in network order.
uint32_t loopback(uint8_t host);

// An RC packet's headers with `op`, addressed to `qpn` at `psn`, asking for an ACK.
wire::PacketHeaders rc_request(wire::Operation op, uint32_t qpn, uint32_t psn);

// A packet the device sent to the forger, parsed.
// Move-only: packet points into bytes.
struct Answer {
    Answer() = default;
    Answer(Answer&&) = default;
    Answer& operator=(Answer&&) = default;
    Answer(const Answer&) = delete;
    Answer& operator=(const Answer&) = delete;

    std::vector<uint8_t> bytes;
    uint16_t src_port = 0;  // UDP
    wire::ParseError error = wire::ParseError::kOk;
    wire::ParsedPacket packet;
    wire::Operation operation() const { return wire::opcode_operation(packet.hdr.bth.opcode); }
    uint32_t psn() const { return packet.hdr.bth.psn; }
    const wire::Aeth& aeth() const { return packet.hdr.aeth; }
};

class ReceiveHarness {
  public:
    // Layout of the buffer: guard | region (registered) | guard | unregistered.
    static constexpr size_t kGuardBytes = 4096;
    static constexpr size_t kRegionBytes = 16384;  // a READ of it: 64 responses
    static constexpr size_t kUnregisteredBytes = 4096;
    static constexpr uint8_t kGuardFill = 0xa5;
    static constexpr uint8_t kUnregisteredFill = 0x5a;
    static constexpr uint8_t kRegionFill = 0x11;

    static constexpr uint8_t kDeviceHost = 2;  // uroce1, 127.0.0.2
    static constexpr uint8_t kForgerHost = 9;  // the QPs' peer
    static constexpr uint32_t kForgerQpn = 0x4242;
    static constexpr uint32_t kRqPsn = 0x1000;  // first PSN each QP's responder expects
    static constexpr uint32_t kSqPsn = 0x2000;  // first PSN the RTS QP's requester sends
    static constexpr ibv_mtu kMtu = IBV_MTU_256;
    static constexpr uint32_t kMtuBytes = 256;
    static constexpr uint8_t kMaxDestRdAtomic = 4;
    static constexpr int kAllRemote =
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

    // One QP of the context, with its queues mapped as the provider maps
    // them.
    struct QueuePair {
        ibv_qp_type type = IBV_QPT_RC;
        uint32_t handle = 0;
        uint32_t qpn = 0;
        uint32_t doorbell_slot = 0;
        SharedRing send_queue;
        SharedRing recv_queue;
    };

    // Throws std::runtime_error when the setup fails.
    ReceiveHarness();
    ~ReceiveHarness();
    ReceiveHarness(const ReceiveHarness&) = delete;
    ReceiveHarness& operator=(const ReceiveHarness&) = delete;

    Engine& engine() { return engines_->engine(0); }
    Engines& engines() { return *engines_; }
    Device& device() { return *devices_.at(1); }
    Context& context() { return *context_; }
    // The client goes away: its context and every object of it are
    // destroyed, as when its connection closes. Nothing of the client may
    // be used after.
    void close_context() { context_.reset(); }
    const DeviceStats& stats() const { return devices_.at(1)->stats(); }
    // From here on the engine's clock stands still at `at`, so that what
    // depends on elapsed time does not depend on how fast the machine runs.
    void freeze_clock(transport::Clock::time_point at) { frozen_clock_ = at; }
    transport::Clock::time_point now() const {
        return frozen_clock_.value_or(transport::Clock::now());
    }
    uint16_t port() const { return port_; }

    // QPs in RTR and RTS (QP access: every remote operation), and QPs left in
    // RESET and INIT; `no_access` is in RTR with qp_access_flags 0.
    QueuePair& rtr() { return rtr_; }
    QueuePair& rts() { return rts_; }
    QueuePair& reset() { return reset_; }
    QueuePair& init() { return init_; }
    QueuePair& no_access() { return no_access_; }
    // A UC QP in RTR (remote write allowed), and a UD QP in RTR with Q_Key kQkey.
    QueuePair& uc() { return uc_; }
    QueuePair& ud() { return ud_; }
    static constexpr uint32_t kQkey = 0x11111111;
    ibv_qp_state state(const QueuePair& qp);
    // RESET -> INIT -> RTR (-> RTS) again with the harness's attributes.
    void reconnect(QueuePair& qp, ibv_qp_state to, int qp_access = kAllRemote);

    // The registered region: its address is also its iova.
    uint8_t* region() const { return buffer_.get() + kGuardBytes; }
    uint64_t region_va() const { return reinterpret_cast<uintptr_t>(region()); }
    // Keys over the whole region: every access; remote read only; remote
    // write only; every access but in the second PD.
    uint32_t lkey() const { return lkey_; }
    uint32_t rkey() const { return rkey_; }
    uint32_t read_only_rkey() const { return read_only_rkey_; }
    uint32_t write_only_rkey() const { return write_only_rkey_; }
    uint32_t other_pd_rkey() const { return other_pd_rkey_; }
    // Empty when every guard byte and the unregistered buffer still hold
    // their fill; otherwise says where the first difference is.
    std::string memory_outside_region_damage() const;

    // A packet from `src` (default: the forger) to uroce1, both on the
    // harness's port, with the right ICRC for those addresses.
    std::vector<uint8_t> build(const wire::PacketHeaders& headers,
                               std::span<const uint8_t> payload = {},
                               std::optional<uint32_t> src_ip = {}) const;
    // Recomputes the ICRC of a datagram for `src` -> uroce1, as sent with
    // `ipv4_id` in its IP header (uroce sends 0; rxe and NICs do not).
    void seal(std::span<uint8_t> datagram, std::optional<uint32_t> src_ip = {},
              uint16_t ipv4_id = 0) const;
    // Hands a datagram to uroce1's receive path, and no more: what it starts
    // goes on when the engine next runs.
    void arrive(std::span<const uint8_t> datagram);
    // Sends a datagram from the forger's socket to uroce1's, through the
    // kernel: the engine reads it when it next polls its sockets.
    void send_udp(std::span<const uint8_t> datagram);
    // Hands a datagram to uroce1's receive path, then lets the engine run.
    void inject(std::span<const uint8_t> datagram, std::optional<uint32_t> src_ip = {});
    void send(const wire::PacketHeaders& headers, std::span<const uint8_t> payload = {}) {
        inject(build(headers, payload));
    }
    // Runs the engine until it has nothing left to do.
    void settle();
    // What the device sent the forger since the last call, waiting up to
    // `wait_ms` for stragglers (0: only what has arrived).
    std::vector<Answer> answers(int wait_ms = 20);

    // Posts a receive of [offset, offset + length) of the region.
    void post_recv(QueuePair& qp, uint64_t wr_id, size_t offset, uint32_t length);
    // Posts a send WQE whose gather (or, for READs and atomics, scatter)
    // list is [offset, offset + length) of the region; the engine sends its
    // request packets to the forger on the next settle(). `prefetched` goes
    // after the gather list, where the provider copies a small message.
    void post_send(QueuePair& qp, queues::SendWqe wqe, size_t offset, uint32_t length,
                   std::span<const uint8_t> prefetched = {});
    // Takes the completions on the CQ, at most `most`.
    std::vector<ibv_wc> poll_cq(size_t most = SIZE_MAX);
    // Async event types written to the context's event pipe since the last call.
    std::vector<uint32_t> async_events();

  private:
    QueuePair create_qp(ibv_qp_type type = IBV_QPT_RC);
    void modify(QueuePair& qp, ibv_qp_state to, int qp_access);
    uint32_t reg_mr(uint32_t pd, int access, bool want_rkey);

    struct Unmap {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t, Unmap> buffer_;
    boost::asio::io_context io_;
    std::vector<std::unique_ptr<Device>> devices_;
    std::unique_ptr<Engines> engines_;
    UniqueFd forger_;
    uint16_t port_ = 0;
    std::optional<transport::Clock::time_point> frozen_clock_;
    UniqueFd events_read_;
    std::unique_ptr<Context> context_;
    uint32_t pd_ = 0;
    uint32_t other_pd_ = 0;
    uint32_t cq_ = 0;
    SharedRing cq_ring_;
    uint32_t lkey_ = 0;
    uint32_t rkey_ = 0;
    uint32_t read_only_rkey_ = 0;
    uint32_t write_only_rkey_ = 0;
    uint32_t other_pd_rkey_ = 0;
    uint64_t next_user_handle_ = 1;
    QueuePair rtr_, rts_, reset_, init_, no_access_, uc_, ud_;
};

}  // namespace uroce::test
