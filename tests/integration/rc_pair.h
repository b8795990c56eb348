// Two connected RC QPs for data-path tests: side `a` on uroce0 (127.0.0.1),
// side `b` on uroce1 (127.0.0.2), each with its own context, PD, CQ and
// MRs. Every wait has a deadline, so a hang is a test failure.
//
// Each rc_* test source is built twice: against a daemon whose own devices
// exchange packets directly (the shortcut), and against one started with
// --no-shortcut, where every packet crosses real UDP sockets.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon_fixture.h"

namespace uroce::test {

// Generous: only ever hit when something hangs.
inline constexpr auto kDeadline = std::chrono::seconds(30);

inline constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct RcOptions {
    ibv_qp_type qp_type = IBV_QPT_RC;  // or UC, or UD (whose "peer" only names a destination)
    uint32_t qkey = 0x11111111;        // UD
    uint32_t srq_wr = 0;               // receives through an SRQ of this size
    ibv_qp_cap cap{64, 64, 4, 4, 64};
    ibv_mtu path_mtu = IBV_MTU_1024;
    std::optional<ibv_mtu> b_path_mtu;  // side b's, when not path_mtu
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 1;
    uint8_t max_rd_atomic = 1;  // and the peer's max_dest_rd_atomic
    uint32_t psn = 0;           // first PSN in both directions
    bool sq_sig_all = false;
    uint64_t send_ops_flags = 0;  // IBV_QP_EX_WITH_*: the QP takes ibv_wr_* calls
    int cqe = 512;
    std::optional<int> b_cqe;  // side b's CQ, when not cqe
    bool channel = false;      // CQs with completion channels
    int qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    ibv_qp_state a_state = IBV_QPS_RTS;
    ibv_qp_state b_state = IBV_QPS_RTS;
};

// The byte at `index` of pattern `seed`: distinct seeds give distinct data.
uint8_t pattern_byte(uint32_t seed, size_t index);
std::vector<uint8_t> pattern(uint32_t seed, size_t size);

// Success, or where and how often `actual` differs from `expected`.
::testing::AssertionResult same_bytes(std::span<const uint8_t> actual,
                                      std::span<const uint8_t> expected);

// Registered memory filled with a pattern.
class Buffer {
  public:
    Buffer(ibv_pd* pd, size_t size, int access, uint32_t seed);

    uint8_t* data() { return reinterpret_cast<uint8_t*>(storage_.data()); }
    std::span<uint8_t> bytes() { return {data(), size_}; }
    std::vector<uint8_t> copy() { return {data(), data() + size_}; }
    size_t size() const { return size_; }
    uint64_t addr(size_t offset = 0) { return reinterpret_cast<uintptr_t>(data()) + offset; }
    uint64_t& word(size_t index) { return storage_[index]; }
    ibv_mr* mr() const { return mr_.get(); }
    uint32_t lkey() const { return mr_->lkey; }
    uint32_t rkey() const { return mr_->rkey; }
    ibv_sge sge(size_t offset, uint32_t length) { return {addr(offset), length, lkey()}; }
    void fill(uint32_t seed);

  private:
    std::vector<uint64_t> storage_;  // 8-byte aligned, for atomics
    size_t size_;
    MrPtr mr_;
};

class RcSide {
  public:
    // Opens `device` and creates the PD, CQ and QP (in RESET).
    void open(const std::string& device, const RcOptions& options);
    // Walks the QP up to `state` (INIT, RTR or RTS), towards the peer.
    void connect(const ibv_gid& peer_gid, uint32_t peer_qpn, const RcOptions& options,
                 ibv_qp_state state);
    void modify_state(ibv_qp_state state) const;
    ibv_qp_state state() const;

    // Registered memory that lives as long as this side.
    Buffer& buffer(size_t size, int access = kRemoteAccess, uint32_t seed = 0);

    void post_send(ibv_send_wr& wr) const;
    void post_recv(uint64_t wr_id, std::span<ibv_sge> sges) const;
    void post_recv(uint64_t wr_id, ibv_sge sge) const { post_recv(wr_id, std::span(&sge, 1)); }
    void post_recv(uint64_t wr_id) const { post_recv(wr_id, std::span<ibv_sge>()); }
    void post_srq_recv(uint64_t wr_id, ibv_sge sge) const;
    // `count` completions, or a test failure with what came by the deadline.
    std::vector<ibv_wc> poll(size_t count) const;
    ibv_wc poll_one() const;
    // Nothing more in the CQ right now.
    void expect_empty() const;
    // The next async event of the context (acked), or a failure at the deadline.
    ibv_async_event async_event() const;
    // Waits for a completion event on the channel (acked, CQ checked).
    void wait_cq_event() const;
    // Whether the channel has an event ready, without waiting.
    bool cq_event_ready() const;

    // Destroys the QP, as a peer that goes away does.
    void destroy_qp() { qp_.reset(); }

    ibv_context* context() const { return context_.get(); }
    ibv_pd* pd() const { return pd_.get(); }
    ibv_cq* cq() const { return cq_.get(); }
    ibv_qp* qp() const { return qp_.get(); }
    ibv_srq* srq() const { return srq_.get(); }
    ibv_comp_channel* channel() const { return channel_.get(); }
    uint32_t qpn() const { return qp_->qp_num; }
    const ibv_gid& gid() const { return gid_; }
    const ibv_qp_cap& cap() const { return cap_; }
    // The value the CQ was created with as cq_context.
    void* cq_context() const { return const_cast<RcSide*>(this); }
    std::string device() const { return device_; }

  private:
    std::string device_;
    ContextPtr context_;
    PdPtr pd_;
    std::vector<std::unique_ptr<Buffer>> buffers_;  // go before the PD
    ChannelPtr channel_;
    CqPtr cq_;
    SrqPtr srq_;
    QpPtr qp_;
    ibv_gid gid_{};
    ibv_qp_cap cap_{};
};

// Opens `a` on uroce0 and `b` on uroce1 and connects them to each other.
void connect_sides(RcSide& a, RcSide& b, const RcOptions& options);

// Side a and side b connected to each other.
class RcTest : public ::testing::Test {
  protected:
    void connect_pair(const RcOptions& options = {}) {
        ASSERT_NO_FATAL_FAILURE(connect_sides(a_, b_, options));
    }
    // Posts `failing` on a, followed by an unsignaled SEND (wr_id 101) and a
    // signaled one (102), in one list.
    void post_with_followers(ibv_send_wr failing);
    // The completions of post_with_followers: `status` for the first, then
    // the followers flushed; a's QP in ERR.
    void expect_failed_then_flushed(uint64_t wr_id, ibv_wc_status status) const;

    RcSide a_;
    RcSide b_;

  private:
    ibv_send_wr followers_[2]{};
};

// A send WR over `sges`.
ibv_send_wr make_wr(uint64_t wr_id, ibv_wr_opcode opcode, std::span<ibv_sge> sges,
                    unsigned flags = IBV_SEND_SIGNALED);
// Links `wrs` in order.
void link(std::span<ibv_send_wr> wrs);

// Counters of a device, to compare before and after.
uint64_t counter(const std::string& device, const std::string& name);
// The counter once it has moved from `before` (or at the deadline).
uint64_t counter_after(const std::string& device, const std::string& name, uint64_t before);

// Faults on the packets `devices` send, until the guard goes.
class FaultGuard {
  public:
    FaultGuard(std::vector<std::string> devices, double drop, double duplicate = 0,
               double reorder = 0);
    ~FaultGuard();
    FaultGuard(const FaultGuard&) = delete;
    FaultGuard& operator=(const FaultGuard&) = delete;

  private:
    std::vector<std::string> devices_;
};

// The test daemon stopped (SIGSTOP) until the guard goes: what is posted
// meanwhile, and the calls asked for, it finds all together when it runs.
class DaemonPause {
  public:
    DaemonPause();
    ~DaemonPause();
    DaemonPause(const DaemonPause&) = delete;
    DaemonPause& operator=(const DaemonPause&) = delete;
};

// "shortcut" or "udp": how this binary's daemon moves packets.
const char* path_name();

}  // namespace uroce::test
