#include "rc_pair.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;

// The variant this binary runs as (tests/integration/CMakeLists.txt), read
// before the global environment starts the daemon: UROCE_TEST_PATH unset
// for the shortcut, "udp" for --no-shortcut, "readiness" for --no-shortcut
// on the readiness loop.
[[maybe_unused]] const bool kPathChosen = [] {
    const std::string path = getenv("UROCE_TEST_PATH") ? getenv("UROCE_TEST_PATH") : "";
    test_daemon().set_shortcut(path != "udp" && path != "readiness");
    if (path == "readiness") {
        setenv("UROCE_NO_IO_URING", "1", 1);
    }
    return true;
}();

int remaining_ms(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(left.count(), 0));
}

// Waits until `fd` is readable; false at the deadline.
bool wait_readable(int fd) {
    const auto deadline = Clock::now() + kDeadline;
    pollfd ready{fd, POLLIN, 0};
    for (;;) {
        const int n = ::poll(&ready, 1, remaining_ms(deadline));
        if (n > 0) {
            return true;
        }
        if (n == 0 || errno != EINTR) {
            return false;
        }
    }
}

}  // namespace

const char* path_name() {
    return test_daemon().shortcut() ? "shortcut" : "udp";
}

uint8_t pattern_byte(uint32_t seed, size_t index) {
    uint32_t x = seed * 0x9e3779b1u + static_cast<uint32_t>(index) * 0x85ebca6bu +
                 static_cast<uint32_t>(index >> 32);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return static_cast<uint8_t>(x);
}

std::vector<uint8_t> pattern(uint32_t seed, size_t size) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) {
        bytes[i] = pattern_byte(seed, i);
    }
    return bytes;
}

::testing::AssertionResult same_bytes(std::span<const uint8_t> actual,
                                      std::span<const uint8_t> expected) {
    if (actual.size() != expected.size()) {
        return ::testing::AssertionFailure()
               << actual.size() << " bytes where " << expected.size() << " were expected";
    }
    const auto [mismatch, _] = std::mismatch(actual.begin(), actual.end(), expected.begin());
    if (mismatch == actual.end()) {
        return ::testing::AssertionSuccess();
    }
    size_t wrong = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
        wrong += actual[i] != expected[i];
    }
    const size_t first = mismatch - actual.begin();
    char values[32];
    snprintf(values, sizeof(values), "0x%02x instead of 0x%02x", actual[first], expected[first]);
    return ::testing::AssertionFailure()
           << wrong << " of " << actual.size() << " bytes differ, the first at offset " << first
           << " (" << values << ")";
}

Buffer::Buffer(ibv_pd* pd, size_t size, int access, uint32_t seed)
    : storage_((size + 7) / 8 + 1), size_(size) {
    fill(seed);
    mr_.reset(ibv_reg_mr(pd, data(), std::max<size_t>(size, 1), access));
    EXPECT_TRUE(mr_) << "ibv_reg_mr: " << strerror(errno);
}

void Buffer::fill(uint32_t seed) {
    for (size_t i = 0; i < size_; ++i) {
        data()[i] = pattern_byte(seed, i);
    }
}

void RcSide::open(const std::string& device, const RcOptions& options) {
    device_ = device;
    context_ = open_device(device);
    ASSERT_TRUE(context_);
    ASSERT_EQ(ibv_query_gid(context(), 1, 0, &gid_), 0);
    pd_.reset(ibv_alloc_pd(context()));
    ASSERT_TRUE(pd_) << "ibv_alloc_pd: " << strerror(errno);
    if (options.channel) {
        channel_.reset(ibv_create_comp_channel(context()));
        ASSERT_TRUE(channel_) << "ibv_create_comp_channel: " << strerror(errno);
    }
    cq_.reset(ibv_create_cq(context(), options.cqe, cq_context(), channel(), 0));
    ASSERT_TRUE(cq_) << "ibv_create_cq: " << strerror(errno);
    ibv_qp_init_attr_ex init{};
    init.comp_mask = IBV_QP_INIT_ATTR_PD;
    init.pd = pd();
    if (options.send_ops_flags) {
        init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        init.send_ops_flags = options.send_ops_flags;
    }
    if (options.srq_wr) {
        ibv_srq_init_attr srq_init{};
        srq_init.attr = {options.srq_wr, 1, 0};
        srq_.reset(ibv_create_srq(pd(), &srq_init));
        ASSERT_TRUE(srq_) << "ibv_create_srq: " << strerror(errno);
        init.srq = srq();
    }
    init.send_cq = init.recv_cq = cq();
    init.cap = options.cap;
    init.qp_type = options.qp_type;
    init.sq_sig_all = options.sq_sig_all;
    qp_.reset(ibv_create_qp_ex(context(), &init));
    ASSERT_TRUE(qp_) << "ibv_create_qp_ex: " << strerror(errno);
    cap_ = init.cap;
}

void RcSide::connect(const ibv_gid& peer_gid, uint32_t peer_qpn, const RcOptions& options,
                     ibv_qp_state state) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = options.qp_access;
    attr.qkey = options.qkey;
    const bool ud = options.qp_type == IBV_QPT_UD;
    ASSERT_EQ(ibv_modify_qp(qp(), &attr,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)),
              0)
        << "to INIT: " << strerror(errno);
    if (state == IBV_QPS_INIT) {
        return;
    }
    if (ud) {
        ASSERT_NO_FATAL_FAILURE(modify_state(IBV_QPS_RTR));
        if (state == IBV_QPS_RTS) {
            attr.qp_state = IBV_QPS_RTS;
            attr.sq_psn = options.psn;
            ASSERT_EQ(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0)
                << "to RTS: " << strerror(errno);
        }
        return;
    }
    const bool rc = options.qp_type == IBV_QPT_RC;
    attr.qp_state = IBV_QPS_RTR;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.dgid = peer_gid;
    attr.ah_attr.grh.hop_limit = 64;
    attr.path_mtu = options.path_mtu;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = options.psn;
    attr.max_dest_rd_atomic = options.max_rd_atomic;
    attr.min_rnr_timer = options.min_rnr_timer;
    ASSERT_EQ(
        ibv_modify_qp(qp(), &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0)),
        0)
        << "to RTR: " << strerror(errno);
    if (state == IBV_QPS_RTR) {
        return;
    }
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = options.psn;
    attr.timeout = options.timeout;
    attr.retry_cnt = options.retry_cnt;
    attr.rnr_retry = options.rnr_retry;
    attr.max_rd_atomic = options.max_rd_atomic;
    ASSERT_EQ(ibv_modify_qp(qp(), &attr,
                            IBV_QP_STATE | IBV_QP_SQ_PSN |
                                (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                          IBV_QP_MAX_QP_RD_ATOMIC
                                    : 0)),
              0)
        << "to RTS: " << strerror(errno);
}

void RcSide::modify_state(ibv_qp_state state) const {
    ibv_qp_attr attr{};
    attr.qp_state = state;
    ASSERT_EQ(ibv_modify_qp(qp(), &attr, IBV_QP_STATE), 0)
        << "to state " << state << ": " << strerror(errno);
}

ibv_qp_state RcSide::state() const {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(qp(), &attr, IBV_QP_STATE, &init), 0) << strerror(errno);
    return attr.qp_state;
}

Buffer& RcSide::buffer(size_t size, int access, uint32_t seed) {
    buffers_.push_back(std::make_unique<Buffer>(pd(), size, access, seed));
    return *buffers_.back();
}

void RcSide::post_send(ibv_send_wr& wr) const {
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp(), &wr, &bad), 0) << "ibv_post_send: " << strerror(errno);
}

void RcSide::post_recv(uint64_t wr_id, std::span<ibv_sge> sges) const {
    ibv_recv_wr wr{wr_id, nullptr, sges.data(), static_cast<int>(sges.size())};
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp(), &wr, &bad), 0) << "ibv_post_recv: " << strerror(errno);
}

void RcSide::post_srq_recv(uint64_t wr_id, ibv_sge sge) const {
    ibv_recv_wr wr{wr_id, nullptr, &sge, 1};
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq(), &wr, &bad), 0) << "ibv_post_srq_recv: " << strerror(errno);
}

std::vector<ibv_wc> RcSide::poll(size_t count) const {
    std::vector<ibv_wc> wcs(count);
    size_t got = 0;
    const auto deadline = Clock::now() + kDeadline;
    while (got < count) {
        const int n = ibv_poll_cq(cq(), static_cast<int>(count - got), &wcs[got]);
        if (n < 0) {
            ADD_FAILURE() << "ibv_poll_cq: " << n;
            break;
        }
        got += n;
        if (n == 0) {
            if (Clock::now() > deadline) {
                ADD_FAILURE() << device_ << ": " << got << " of " << count
                              << " completions by the deadline";
                break;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    wcs.resize(got);
    return wcs;
}

ibv_wc RcSide::poll_one() const {
    std::vector<ibv_wc> wcs = poll(1);
    if (wcs.empty()) {
        ibv_wc none{};
        none.status = IBV_WC_GENERAL_ERR;
        none.wr_id = ~0ull;
        return none;
    }
    return wcs.front();
}

void RcSide::expect_empty() const {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq(), 1, &wc);
    EXPECT_EQ(n, 0) << device_ << ": unexpected completion wr_id " << wc.wr_id << " status "
                    << ibv_wc_status_str(wc.status);
}

ibv_async_event RcSide::async_event() const {
    ibv_async_event event{};
    if (!wait_readable(context()->async_fd)) {
        ADD_FAILURE() << device_ << ": no async event by the deadline";
        event.event_type = static_cast<ibv_event_type>(-1);
        return event;
    }
    EXPECT_EQ(ibv_get_async_event(context(), &event), 0) << strerror(errno);
    ibv_async_event copy = event;
    ibv_ack_async_event(&event);
    return copy;
}

void RcSide::wait_cq_event() const {
    ASSERT_TRUE(wait_readable(channel()->fd)) << device_ << ": no completion event by the deadline";
    ibv_cq* cq_out = nullptr;
    void* context_out = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel(), &cq_out, &context_out), 0) << strerror(errno);
    EXPECT_EQ(cq_out, cq());
    EXPECT_EQ(context_out, cq_context());
    ibv_ack_cq_events(cq_out, 1);
}

bool RcSide::cq_event_ready() const {
    pollfd ready{channel()->fd, POLLIN, 0};
    return ::poll(&ready, 1, 0) == 1;
}

void connect_sides(RcSide& a, RcSide& b, const RcOptions& options) {
    RcOptions b_options = options;
    b_options.path_mtu = options.b_path_mtu.value_or(options.path_mtu);
    b_options.cqe = options.b_cqe.value_or(options.cqe);
    ASSERT_NO_FATAL_FAILURE(a.open("uroce0", options));
    ASSERT_NO_FATAL_FAILURE(b.open("uroce1", b_options));
    ASSERT_NO_FATAL_FAILURE(a.connect(b.gid(), b.qpn(), options, options.a_state));
    ASSERT_NO_FATAL_FAILURE(b.connect(a.gid(), a.qpn(), b_options, options.b_state));
}

void RcTest::post_with_followers(ibv_send_wr failing) {
    followers_[0] = make_wr(101, IBV_WR_SEND, {}, 0);
    followers_[1] = make_wr(102, IBV_WR_SEND, {}, IBV_SEND_SIGNALED);
    failing.next = &followers_[0];
    followers_[0].next = &followers_[1];
    a_.post_send(failing);
}

void RcTest::expect_failed_then_flushed(uint64_t wr_id, ibv_wc_status status) const {
    const std::vector<ibv_wc> wcs = a_.poll(3);
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, wr_id);
    EXPECT_EQ(wcs[0].status, status) << ibv_wc_status_str(wcs[0].status);
    EXPECT_EQ(wcs[0].qp_num, a_.qpn());
    for (size_t i = 1; i < 3; ++i) {
        EXPECT_EQ(wcs[i].wr_id, 100 + i);
        EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wcs[i].status);
        EXPECT_EQ(wcs[i].qp_num, a_.qpn());
    }
    a_.expect_empty();
    EXPECT_EQ(a_.state(), IBV_QPS_ERR);
}

ibv_send_wr make_wr(uint64_t wr_id, ibv_wr_opcode opcode, std::span<ibv_sge> sges, unsigned flags) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    wr.send_flags = flags;
    return wr;
}

void link(std::span<ibv_send_wr> wrs) {
    for (size_t i = 0; i + 1 < wrs.size(); ++i) {
        wrs[i].next = &wrs[i + 1];
    }
}

uint64_t counter(const std::string& device, const std::string& name) {
    const auto counters = test_daemon().stats(device);
    const auto it = counters.find(name);
    EXPECT_NE(it, counters.end()) << "no counter " << name << " for " << device;
    return it == counters.end() ? 0 : it->second;
}

uint64_t counter_after(const std::string& device, const std::string& name, uint64_t before) {
    const auto deadline = Clock::now() + kDeadline;
    uint64_t now = counter(device, name);
    while (now == before && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        now = counter(device, name);
    }
    return now;
}

DaemonPause::DaemonPause() {
    EXPECT_EQ(kill(test_daemon().pid(), SIGSTOP), 0) << strerror(errno);
}

DaemonPause::~DaemonPause() {
    kill(test_daemon().pid(), SIGCONT);
}

FaultGuard::FaultGuard(std::vector<std::string> devices, double drop, double duplicate,
                       double reorder)
    : devices_(std::move(devices)) {
    for (const std::string& device : devices_) {
        test_daemon().set_faults(device, drop, duplicate, reorder);
    }
}

FaultGuard::~FaultGuard() {
    for (const std::string& device : devices_) {
        test_daemon().set_faults(device, 0);
    }
}

}  // namespace uroce::test
