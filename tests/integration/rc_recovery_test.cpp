// Recovery and timers: RNR waits and their budget, the retransmission
// budget, a peer process that dies, lossy links, and PSNs that wrap.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "rc_pair.h"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;

// Short retransmission timers, so that the budget runs out quickly:
// 4.096 us * 2^10 is about 4 ms.
constexpr uint8_t kShortTimeout = 10;

// Waits until `name` of `device` exceeds `floor`; false at the deadline.
bool counter_exceeds(const std::string& device, const std::string& name, uint64_t floor) {
    const auto deadline = Clock::now() + kDeadline;
    while (counter(device, name) <= floor) {
        if (Clock::now() > deadline) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

class RcRecoveryTest : public RcTest {};

// A SEND, or a WRITE with immediate, before the receive it needs: RNR
// NAKs until the receive comes, then it completes (rnr_retry 7 retries
// for ever).
class RcRnrTest : public RcRecoveryTest, public ::testing::WithParamInterface<ibv_wr_opcode> {};

TEST_P(RcRnrTest, CompletesOnceTheReceiveIsPosted) {
    const ibv_wr_opcode opcode = GetParam();
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    const uint64_t rnr_received = counter("uroce0", "rcvd_rnr_err");
    const uint64_t rnr_sent = counter("uroce1", "send_rnr_err");
    constexpr uint32_t kSize = 3000;
    Buffer& source = a_.buffer(kSize, kRemoteAccess, 1);
    Buffer& target = b_.buffer(kSize, kRemoteAccess, 2);
    ibv_sge sge = source.sge(0, kSize);
    ibv_send_wr wr = make_wr(1, opcode, std::span(&sge, 1));
    wr.wr.rdma = {target.addr(), target.rkey()};
    wr.imm_data = htonl(77);
    a_.post_send(wr);
    ASSERT_TRUE(counter_exceeds("uroce0", "rcvd_rnr_err", rnr_received)) << "no RNR NAK came back";
    EXPECT_GT(counter("uroce1", "send_rnr_err"), rnr_sent);
    b_.post_recv(2, target.sge(0, kSize));
    const ibv_wc sent = a_.poll_one();
    EXPECT_EQ(sent.wr_id, 1u);
    EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent.status);
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.wr_id, 2u);
    EXPECT_EQ(received.status, IBV_WC_SUCCESS) << ibv_wc_status_str(received.status);
    EXPECT_EQ(received.byte_len, kSize);
    // Only a WRITE with immediate carries one; imm_data means nothing otherwise.
    if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        EXPECT_TRUE(received.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(received.imm_data, htonl(77));
    } else {
        EXPECT_FALSE(received.wc_flags & IBV_WC_WITH_IMM);
    }
    EXPECT_TRUE(same_bytes(target.bytes(), source.bytes()));
}

// With rnr_retry 1 and no receive ever: IBV_WC_RNR_RETRY_EXC_ERR.
TEST_P(RcRnrTest, ExhaustedRnrRetriesFail) {
    const ibv_wr_opcode opcode = GetParam();
    RcOptions options;
    options.rnr_retry = 1;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const uint64_t exceeded = counter("uroce0", "retry_rnr_exceeded_err");
    Buffer& source = a_.buffer(64, kRemoteAccess, 1);
    Buffer& target = b_.buffer(64, kRemoteAccess, 2);
    ibv_sge sge = source.sge(0, 64);
    ibv_send_wr wr = make_wr(1, opcode, std::span(&sge, 1));
    wr.wr.rdma = {target.addr(), target.rkey()};
    post_with_followers(wr);
    expect_failed_then_flushed(1, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_GT(counter("uroce0", "retry_rnr_exceeded_err"), exceeded);
}

INSTANTIATE_TEST_SUITE_P(Recovery, RcRnrTest,
                         ::testing::Values(IBV_WR_SEND, IBV_WR_RDMA_WRITE_WITH_IMM),
                         [](const auto& test) {
                             return test.param == IBV_WR_SEND ? "Send" : "WriteWithImm";
                         });

// How the peer stops answering.
enum class Silence { kAllDropped, kPeerReset, kPeerDestroyed };

class RcRetryTest : public RcRecoveryTest, public ::testing::WithParamInterface<Silence> {};

// No answer: after retry_cnt retransmissions, IBV_WC_RETRY_EXC_ERR.
TEST_P(RcRetryTest, ExhaustedRetriesFail) {
    RcOptions options;
    options.timeout = kShortTimeout;
    options.retry_cnt = 2;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const uint64_t exceeded = counter("uroce0", "retry_exceeded_err");
    std::unique_ptr<FaultGuard> faults;
    switch (GetParam()) {
        case Silence::kAllDropped:
            faults = std::make_unique<FaultGuard>(std::vector<std::string>{"uroce0"}, 1.0);
            break;
        case Silence::kPeerReset:
            ASSERT_NO_FATAL_FAILURE(b_.modify_state(IBV_QPS_RESET));
            break;
        case Silence::kPeerDestroyed:
            b_.destroy_qp();
            break;
    }
    Buffer& source = a_.buffer(5000, kRemoteAccess, 1);
    Buffer& target = b_.buffer(5000, kRemoteAccess, 2);
    const std::vector<uint8_t> before = target.copy();
    ibv_sge sge = source.sge(0, 5000);
    ibv_send_wr wr = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    wr.wr.rdma = {target.addr(), target.rkey()};
    post_with_followers(wr);
    expect_failed_then_flushed(1, IBV_WC_RETRY_EXC_ERR);
    EXPECT_GT(counter("uroce0", "retry_exceeded_err"), exceeded);
    if (GetParam() != Silence::kAllDropped) {
        EXPECT_TRUE(same_bytes(target.bytes(), before));
    }
}

INSTANTIATE_TEST_SUITE_P(Recovery, RcRetryTest,
                         ::testing::Values(Silence::kAllDropped, Silence::kPeerReset,
                                           Silence::kPeerDestroyed),
                         [](const auto& test) {
                             return test.param == Silence::kAllDropped  ? "AllDropped"
                                    : test.param == Silence::kPeerReset ? "PeerReset"
                                                                        : "PeerDestroyed";
                         });

// The peer of RcKilledPeerTest, in a process of its own: connects a QP on
// uroce1 to the QP and GID in its arguments, prints its QPN and a remote
// buffer, and waits to be killed.
constexpr size_t kPeerBuffer = 1 << 20;

int killed_peer_main(const std::vector<std::string>& args) {
    if (args.size() != 2) {
        return 2;
    }
    RcOptions options;
    RcSide side;
    side.open("uroce1", options);
    ibv_gid gid{};
    for (size_t i = 0; i < sizeof(gid.raw); ++i) {
        gid.raw[i] = static_cast<uint8_t>(std::stoul(args[1].substr(2 * i, 2), nullptr, 16));
    }
    side.connect(gid, static_cast<uint32_t>(std::stoul(args[0])), options, IBV_QPS_RTS);
    Buffer& memory = side.buffer(kPeerBuffer);
    if (::testing::Test::HasFailure() || !side.qp() || !memory.mr()) {
        return 1;
    }
    printf("%u %llu %u\n", side.qpn(), static_cast<unsigned long long>(memory.addr()),
           memory.rkey());
    fflush(stdout);
    for (;;) {
        pause();
    }
}

[[maybe_unused]] const bool kKilledPeer = register_child("killed_peer", killed_peer_main);

// The counters of `device` that are not zero, for a failure message.
std::string counters_text(const std::string& device) {
    std::ostringstream text;
    text << device << ":";
    for (const auto& [name, value] : test_daemon().stats(device)) {
        if (value) {
            text << " " << name << " " << value;
        }
    }
    text << "\n";
    return text.str();
}

// The peer process dies (SIGKILL) while WRITEs stream to it: the survivor
// gets IBV_WC_RETRY_EXC_ERR and flushes, never a hang; the daemon stays
// healthy and serves new QPs.
TEST_F(RcRecoveryTest, PeerKilledMidStreamLeavesRetryExceeded) {
    RcOptions options;
    options.timeout = kShortTimeout;
    options.retry_cnt = 3;
    ASSERT_NO_FATAL_FAILURE(a_.open("uroce0", options));
    std::ostringstream gid;
    for (uint8_t byte : a_.gid().raw) {
        char hex[3];
        snprintf(hex, sizeof(hex), "%02x", byte);
        gid << hex;
    }
    const Child child = spawn_child("killed_peer", {std::to_string(a_.qpn()), gid.str()});
    ASSERT_GT(child.pid, 0);
    const std::string line = read_line(child.output, kDeadline);
    close(child.output);
    uint32_t peer_qpn = 0;
    unsigned long long peer_addr = 0;
    uint32_t peer_rkey = 0;
    if (sscanf(line.c_str(), "%u %llu %u", &peer_qpn, &peer_addr, &peer_rkey) != 3) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
        FAIL() << "the peer process did not report its QP: '" << line << "'";
    }
    ibv_gid peer_gid;
    {
        ContextPtr peer_device = open_device("uroce1");
        ASSERT_TRUE(peer_device);
        ASSERT_EQ(ibv_query_gid(peer_device.get(), 1, 0, &peer_gid), 0);
    }
    ASSERT_NO_FATAL_FAILURE(a_.connect(peer_gid, peer_qpn, options, IBV_QPS_RTS));

    constexpr uint32_t kSize = 8192;
    constexpr size_t kBefore = 200;  // completed before the kill
    constexpr size_t kAfter = 32;    // posted after it
    constexpr size_t kWindow = 16;
    Buffer& source = a_.buffer(kSize, kRemoteAccess, 3);
    ibv_sge sge = source.sge(0, kSize);
    size_t posted = 0;
    auto post = [&] {
        ibv_send_wr wr = make_wr(posted, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
        wr.wr.rdma = {peer_addr + posted * kSize % kPeerBuffer, peer_rkey};
        a_.post_send(wr);
        ++posted;
    };
    std::vector<ibv_wc> wcs;
    while (wcs.size() < kBefore) {
        while (posted < wcs.size() + kWindow) {
            ASSERT_NO_FATAL_FAILURE(post());
        }
        const ibv_wc wc = a_.poll_one();
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        wcs.push_back(wc);
    }
    ASSERT_EQ(kill(child.pid, SIGKILL), 0);
    EXPECT_EQ(waitpid(child.pid, nullptr, 0), child.pid);
    // Until the daemon sees the connection close, the dead peer's QP answers
    // like any other; after that, nothing does.
    const std::string client = "client pid " + std::to_string(child.pid) + " ";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (test_daemon().status().find(client) != std::string::npos) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the daemon kept the dead client";
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (size_t i = 0; i < kAfter; ++i) {
        ASSERT_NO_FATAL_FAILURE(post());
    }
    for (const ibv_wc& wc : a_.poll(posted - wcs.size())) {
        wcs.push_back(wc);
    }
    ASSERT_EQ(wcs.size(), posted);
    // In order: successes, one retry error, then flushes.
    size_t i = 0;
    for (; i < wcs.size() && wcs[i].status == IBV_WC_SUCCESS; ++i) {
        EXPECT_EQ(wcs[i].wr_id, i);
    }
    ASSERT_LT(i, wcs.size());
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wcs[i].status);
    for (++i; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].wr_id, i);
        EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wcs[i].status);
    }
    EXPECT_EQ(a_.state(), IBV_QPS_ERR);

    EXPECT_NE(test_daemon().status(), "");
    RcSide c;
    RcSide d;
    ASSERT_NO_FATAL_FAILURE(connect_sides(c, d, {}));
    Buffer& from = c.buffer(100, kRemoteAccess, 4);
    Buffer& to = d.buffer(100, kRemoteAccess, 5);
    d.post_recv(1, to.sge(0, 100));
    ibv_sge send_sge = from.sge(0, 100);
    ibv_send_wr send = make_wr(2, IBV_WR_SEND, std::span(&send_sge, 1));
    c.post_send(send);
    EXPECT_EQ(c.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(d.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes(to.bytes(), from.bytes()));
}

// A stream of SENDs, WRITEs (every fifth with immediate) and READs of
// varied sizes from a to b, at most kWindow outstanding; each payload is
// checked as it lands, SENDs and immediates in sequence.
class Stream {
  public:
    static constexpr uint32_t kSlot = 4096;
    static constexpr size_t kWindow = 64;
    static constexpr size_t kReceives = 128;

    Stream(RcSide& a, RcSide& b, size_t operations)
        : a_(a),
          b_(b),
          operations_(operations),
          sources_(a.buffer(kWindow * kSlot, kRemoteAccess, 0)),
          receives_(b.buffer(kReceives * kSlot, kRemoteAccess, 0)),
          written_(b.buffer(operations * kSlot, kRemoteAccess, 1)),
          read_from_(b.buffer(operations * kSlot, kRemoteAccess, 2)),
          read_into_(a.buffer(operations * kSlot, kRemoteAccess, 3)) {}

    // Runs the whole stream; a test failure when something goes wrong, or
    // when nothing moves for the deadline.
    void run() {
        std::vector<uint8_t> written_expected = written_.copy();
        std::vector<uint8_t> read_expected = read_into_.copy();
        for (size_t k = 0; k < operations_; ++k) {
            const size_t offset = k * kSlot;
            if (kind(k) == IBV_WR_RDMA_WRITE || kind(k) == IBV_WR_RDMA_WRITE_WITH_IMM) {
                const std::vector<uint8_t> bytes = pattern(seed(k), size(k));
                std::copy(bytes.begin(), bytes.end(), written_expected.begin() + offset);
            } else if (kind(k) == IBV_WR_RDMA_READ) {
                std::copy_n(read_from_.data() + offset, size(k), read_expected.begin() + offset);
            }
        }
        for (uint64_t slot = 0; slot < kReceives; ++slot) {
            ASSERT_NO_FATAL_FAILURE(b_.post_recv(slot, receives_.sge(slot * kSlot, kSlot)));
        }
        auto progress_deadline = Clock::now() + kDeadline;
        while (completed_ < operations_ || sends_received_ < sends_ || imms_received_ < imms_) {
            while (posted_ < operations_ && posted_ < completed_ + kWindow) {
                ASSERT_NO_FATAL_FAILURE(post(posted_++));
            }
            const bool moved = poll_requester() | poll_responder();
            if (HasFailure()) {
                return;
            }
            if (moved) {
                progress_deadline = Clock::now() + kDeadline;
            } else if (Clock::now() > progress_deadline) {
                FAIL() << "no progress for 30 s: " << completed_ << " of " << operations_
                       << " completed, " << sends_received_ << " sends received; counters:\n"
                       << counters_text(a_.device()) << counters_text(b_.device());
            }
        }
        EXPECT_TRUE(same_bytes(written_.bytes(), written_expected)) << "written";
        EXPECT_TRUE(same_bytes(read_into_.bytes(), read_expected)) << "read";
    }

  private:
    static bool HasFailure() { return ::testing::Test::HasFailure(); }
    static uint32_t size(size_t k) { return static_cast<uint32_t>(8 + k * 7919 % 4000); }
    static uint32_t seed(size_t k) { return static_cast<uint32_t>(1000 + k); }
    // Four SENDs, a WRITE and a READ in every six operations.
    static ibv_wr_opcode kind(size_t k) {
        switch (k % 6) {
            case 4:
                return k % 5 == 0 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
            case 5:
                return IBV_WR_RDMA_READ;
            default:
                return IBV_WR_SEND;
        }
    }

    void post(size_t k) {
        const ibv_wr_opcode opcode = kind(k);
        const size_t slot = k % kWindow;
        ibv_sge sge;
        if (opcode == IBV_WR_RDMA_READ) {
            sge = read_into_.sge(k * kSlot, size(k));
        } else {
            std::vector<uint8_t> bytes = pattern(seed(k), size(k));
            if (opcode == IBV_WR_SEND) {
                // The sequence number of the SEND first.
                memcpy(bytes.data(), &sends_, sizeof(sends_));
                ++sends_;
            }
            std::copy(bytes.begin(), bytes.end(), sources_.data() + slot * kSlot);
            sge = sources_.sge(slot * kSlot, size(k));
        }
        ibv_send_wr wr = make_wr(k, opcode, std::span(&sge, 1));
        Buffer& remote = opcode == IBV_WR_RDMA_READ ? read_from_ : written_;
        wr.wr.rdma = {remote.addr(k * kSlot), remote.rkey()};
        if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            wr.imm_data = htonl(static_cast<uint32_t>(imms_++));
        }
        a_.post_send(wr);
    }

    bool poll_requester() {
        ibv_wc wcs[16];
        const int n = ibv_poll_cq(a_.cq(), 16, wcs);
        for (int i = 0; i < n; ++i) {
            if (wcs[i].status != IBV_WC_SUCCESS && !HasFailure()) {
                ADD_FAILURE() << "operation " << wcs[i].wr_id << " (" << kind(wcs[i].wr_id)
                              << "): " << ibv_wc_status_str(wcs[i].status) << "; counters:\n"
                              << counters_text(a_.device()) << counters_text(b_.device());
            }
            EXPECT_EQ(wcs[i].wr_id, completed_) << "out of order";
            ++completed_;
        }
        return n > 0;
    }

    bool poll_responder() {
        ibv_wc wcs[16];
        const int n = ibv_poll_cq(b_.cq(), 16, wcs);
        for (int i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
            if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                EXPECT_EQ(ntohl(wc.imm_data), imms_received_) << "immediate out of sequence";
                ++imms_received_;
            } else {
                check_send(wc);
            }
            // The slot is free again.
            b_.post_recv(wc.wr_id, receives_.sge(wc.wr_id * kSlot, kSlot));
        }
        return n > 0;
    }

    // The SEND in the receive slot of `wc` is the next in sequence, whole.
    void check_send(const ibv_wc& wc) {
        const uint8_t* bytes = receives_.data() + wc.wr_id * kSlot;
        uint64_t sequence;
        memcpy(&sequence, bytes, sizeof(sequence));
        ASSERT_EQ(sequence, sends_received_) << "SEND out of sequence";
        // The operation that carried SEND number `sequence`.
        while (kind(send_operation_) != IBV_WR_SEND) {
            ++send_operation_;
        }
        const size_t k = send_operation_++;
        EXPECT_EQ(wc.byte_len, size(k));
        std::vector<uint8_t> expected = pattern(seed(k), size(k));
        memcpy(expected.data(), &sequence, sizeof(sequence));
        EXPECT_TRUE(same_bytes(std::span(bytes, wc.byte_len), expected)) << "SEND " << sequence;
        ++sends_received_;
    }

    RcSide& a_;
    RcSide& b_;
    size_t operations_;
    Buffer& sources_;    // a: a slot per outstanding SEND or WRITE
    Buffer& receives_;   // b: a slot per receive
    Buffer& written_;    // b: a slot per operation
    Buffer& read_from_;  // b
    Buffer& read_into_;  // a
    size_t posted_ = 0;
    size_t completed_ = 0;
    uint64_t sends_ = 0;  // SENDs posted
    uint64_t sends_received_ = 0;
    size_t send_operation_ = 0;
    uint32_t imms_ = 0;
    uint32_t imms_received_ = 0;
};

// Both devices lose 5%, duplicate 2% and reorder 2% of what they send:
// 2000 SENDs, 500 WRITEs and 500 READs still deliver every byte once, in
// order.
TEST_F(RcRecoveryTest, LossyLinkDeliversEverythingOnceInOrder) {
    RcOptions options;
    options.cap = {Stream::kWindow, Stream::kReceives, 1, 1, 0};
    options.cqe = 1024;
    options.max_rd_atomic = 4;
    options.timeout = 11;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const std::vector<std::string> devices{"uroce0", "uroce1"};
    auto sum = [&](const char* name) { return counter("uroce0", name) + counter("uroce1", name); };
    const uint64_t dropped = sum("fault_dropped");
    const uint64_t repeated = sum("duplicate_request") + sum("out_of_seq_request");
    {
        FaultGuard faults(devices, 0.05, 0.02, 0.02);
        Stream stream(a_, b_, 3000);
        ASSERT_NO_FATAL_FAILURE(stream.run());
    }
    EXPECT_GT(sum("fault_dropped"), dropped);
    EXPECT_GT(sum("duplicate_request") + sum("out_of_seq_request"), repeated);
}

// Packets held on a paused wire (uroce step): at least `count`, by the
// deadline, then nothing more for a moment.
uint32_t wait_held(const std::string& device, uint32_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    uint32_t held = 0;
    while ((held = test_daemon().step(device, "pause").held) < count &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return test_daemon().step(device, "pause").held;
}

// A packet's operation and PSN, from its step summary.
std::string operation_and_psn(const std::string& summary) {
    std::istringstream words(summary);
    std::string operation, psn_word, psn;
    words >> operation >> psn_word >> psn;
    return operation + " " + psn;
}

// Go back N across a local operation: a's 3-packet WRITE loses its first
// packet, and b's sequence NAK sends a back to it, past the BIND_MW posted
// behind it. The retransmission is the same request packets, none for the
// bind (which ran once), and every WQE completes.
TEST_F(RcRecoveryTest, GoBackNPassesALocalOperationWithoutSendingIt) {
    RcOptions options;
    options.timeout = 20;  // 4 s: no retransmission timer fires while packets are held
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Buffer& source = a_.buffer(4000, kRemoteAccess | IBV_ACCESS_MW_BIND, 1);
    Buffer& target = b_.buffer(4000, kRemoteAccess, 2);
    MwPtr window(ibv_alloc_mw(a_.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(window) << strerror(errno);
    test_daemon().step("uroce0", "pause");
    ibv_sge head = source.sge(0, 3000);
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&head, 1));
    write.wr.rdma = {target.addr(0), target.rkey()};
    a_.post_send(write);
    ibv_send_wr bind = make_wr(2, IBV_WR_BIND_MW, {});
    bind.bind_mw.mw = window.get();
    bind.bind_mw.rkey = ibv_inc_rkey(window->rkey);
    bind.bind_mw.bind_info = {source.mr(), source.addr(0), 4000, IBV_ACCESS_REMOTE_READ};
    a_.post_send(bind);
    ibv_sge tail = source.sge(3000, 1000);
    ibv_send_wr last = make_wr(3, IBV_WR_RDMA_WRITE, std::span(&tail, 1));
    last.wr.rdma = {target.addr(3000), target.rkey()};
    a_.post_send(last);

    ASSERT_EQ(wait_held("uroce0", 4), 4u);  // WRITE first, middle, last; the second WRITE
    std::vector<std::string> sent{operation_and_psn(test_daemon().step("uroce0", "drop").summary)};
    for (int i = 0; i < 3; ++i) {
        sent.push_back(operation_and_psn(test_daemon().step("uroce0", "next").summary));
    }
    ASSERT_EQ(wait_held("uroce0", 4), 4u) << "the retransmission after b's NAK";
    std::vector<std::string> resent;
    for (int i = 0; i < 4; ++i) {
        resent.push_back(operation_and_psn(test_daemon().step("uroce0", "next").summary));
    }
    EXPECT_EQ(resent, sent);
    test_daemon().step("uroce0", "run");

    const std::vector<ibv_wc> wcs = a_.poll(3);
    for (size_t i = 0; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].wr_id, i + 1);
        EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[i].status);
    }
    EXPECT_EQ(wcs[1].opcode, IBV_WC_BIND_MW);
    EXPECT_TRUE(same_bytes(target.bytes(), pattern(1, 4000)));
}

// PSNs start 16 below the wrap to 0: multi-packet messages of every kind
// cross it.
TEST_F(RcRecoveryTest, PsnWrapsAround) {
    RcOptions options;
    options.cap = {Stream::kWindow, Stream::kReceives, 1, 1, 0};
    options.cqe = 1024;
    options.psn = 0xfffff0;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Stream stream(a_, b_, 100);
    ASSERT_NO_FATAL_FAILURE(stream.run());
}

// 64 QPs each fill their window of 128 packets at once (8 WRITEs of 64 KiB
// in 4 KiB packets, posted while the daemon was stopped): 32 MiB for the
// wire in one go, four times what the receiving socket holds. The device
// paces its QPs, so nothing is lost: no retransmission, no PSN sequence
// error, every byte in place.
TEST_F(RcRecoveryTest, ManyQpsFillingTheirWindowsLoseNothing) {
    constexpr size_t kPairs = 64;
    constexpr size_t kWrites = 8;
    constexpr uint32_t kSize = 64 << 10;
    RcOptions options;
    options.cap = {kWrites, 1, 1, 0, 0};
    options.path_mtu = IBV_MTU_4096;
    // A 4 s timer (not 67 ms): a busy machine's stall of the daemon is not a
    // loss. A packet lost mid-stream still shows as a sequence error, one
    // lost at the end as a timeout.
    options.timeout = 20;
    std::vector<std::unique_ptr<RcSide>> senders, receivers;
    for (size_t i = 0; i < kPairs; ++i) {
        senders.push_back(std::make_unique<RcSide>());
        receivers.push_back(std::make_unique<RcSide>());
        ASSERT_NO_FATAL_FAILURE(connect_sides(*senders.back(), *receivers.back(), options));
    }
    const char* kLosses[] = {"retransmit_timeouts", "rcvd_seq_err", "out_of_seq_request"};
    std::map<std::string, uint64_t> before;
    for (const char* name : kLosses) {
        before[name] = counter("uroce0", name) + counter("uroce1", name);
    }
    std::vector<Buffer*> sources, targets;
    for (size_t i = 0; i < kPairs; ++i) {
        sources.push_back(&senders[i]->buffer(kWrites * kSize, kRemoteAccess, 2 * i + 1));
        targets.push_back(&receivers[i]->buffer(kWrites * kSize, kRemoteAccess, 2 * i + 2));
    }
    {
        // Posting makes no call into the daemon: it finds all of it at once.
        DaemonPause pause;
        for (size_t i = 0; i < kPairs; ++i) {
            for (size_t w = 0; w < kWrites; ++w) {
                ibv_sge sge = sources[i]->sge(w * kSize, kSize);
                ibv_send_wr wr = make_wr(w, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
                wr.wr.rdma = {targets[i]->addr(w * kSize), targets[i]->rkey()};
                senders[i]->post_send(wr);
            }
        }
    }
    for (size_t i = 0; i < kPairs; ++i) {
        for (const ibv_wc& wc : senders[i]->poll(kWrites)) {
            ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "QP pair " << i << ": " << wc.wr_id;
        }
        EXPECT_TRUE(same_bytes(targets[i]->bytes(), pattern(2 * i + 1, kWrites * kSize)))
            << "QP pair " << i;
    }
    for (const char* name : kLosses) {
        EXPECT_EQ(counter("uroce0", name) + counter("uroce1", name), before[name]) << name;
    }
}

}  // namespace
}  // namespace uroce::test
