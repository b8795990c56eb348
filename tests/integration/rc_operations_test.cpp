// Every RC operation between two devices, with the bytes checked: what the
// target range received, and that nothing around it changed.
#include <arpa/inet.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "protocol/work_requests.h"
#include "rc_pair.h"

namespace uroce::test {
namespace {

// Untouched bytes around every target range.
constexpr size_t kGuard = 64;

bool is_send(ibv_wr_opcode opcode) {
    return wr::opcode_info(opcode)->kind == wr::Kind::kSend;
}

// The bytes the SGEs of `buffer` cover, in order.
std::vector<uint8_t> gather(Buffer& buffer, std::span<const ibv_sge> sges) {
    std::vector<uint8_t> bytes;
    for (const ibv_sge& sge : sges) {
        const uint8_t* start = buffer.data() + (sge.addr - buffer.addr());
        bytes.insert(bytes.end(), start, start + sge.length);
    }
    return bytes;
}

// `image` (a copy of `buffer`) with `bytes` scattered over the SGEs.
void scatter(std::vector<uint8_t>& image, Buffer& buffer, std::span<const ibv_sge> sges,
             std::span<const uint8_t> bytes) {
    size_t done = 0;
    for (const ibv_sge& sge : sges) {
        const size_t n = std::min<size_t>(sge.length, bytes.size() - done);
        std::copy_n(bytes.begin() + done, n, image.begin() + (sge.addr - buffer.addr()));
        done += n;
    }
}

class RcOperationsTest : public RcTest {
  protected:
    // Implicit ODP: one MR over the whole address space on each side.
    void register_whole_address_spaces() {
        const int access = kRemoteAccess | IBV_ACCESS_ON_DEMAND;
        whole_a_.reset(ibv_reg_mr(a_.pd(), nullptr, SIZE_MAX, access));
        whole_b_.reset(ibv_reg_mr(b_.pd(), nullptr, SIZE_MAX, access));
        ASSERT_TRUE(whole_a_ && whole_b_) << strerror(errno);
    }
    // Checks the requester's completion of WR `wr_id`.
    void expect_sent(const ibv_wc& wc, uint64_t wr_id, ibv_wr_opcode opcode) const {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, wr_id);
        EXPECT_EQ(wc.opcode, wr::opcode_info(opcode)->wc_opcode);
        EXPECT_EQ(wc.qp_num, a_.qpn());
    }
    // Checks the responder's receive completion.
    void expect_received(const ibv_wc& wc, uint64_t wr_id, ibv_wc_opcode opcode, size_t bytes,
                         unsigned flags) const {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, wr_id);
        EXPECT_EQ(wc.opcode, opcode);
        EXPECT_EQ(wc.byte_len, bytes);
        EXPECT_EQ(wc.qp_num, b_.qpn());
        EXPECT_EQ(wc.src_qp, a_.qpn());
        EXPECT_EQ(wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV), flags);
    }

    // One message of `size` bytes from a to b (for a READ, b's bytes into
    // a), from the middle of one buffer to the middle of another; the
    // completions on both sides and every byte of both buffers checked.
    void transfer(ibv_wr_opcode opcode, size_t size, uint32_t seed) {
        SCOPED_TRACE(testing::Message() << "opcode " << opcode << ", " << size << " bytes");
        const bool read = opcode == IBV_WR_RDMA_READ;
        Buffer& source = (read ? b_ : a_).buffer(size + 2 * kGuard, kRemoteAccess, seed);
        Buffer& target = (read ? a_ : b_).buffer(size + 2 * kGuard, kRemoteAccess, seed + 1);
        std::vector<uint8_t> expected = target.copy();
        std::copy_n(source.data() + kGuard, size, expected.begin() + kGuard);
        const uint32_t length = static_cast<uint32_t>(size);
        ibv_sge local = read ? target.sge(kGuard, length) : source.sge(kGuard, length);
        if (is_send(opcode)) {
            // Room past the message, which must stay as it was.
            b_.post_recv(seed, target.sge(kGuard, length + kGuard));
        } else if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            b_.post_recv(seed);
        }
        ibv_send_wr wr = make_wr(seed, opcode, std::span(&local, 1));
        Buffer& remote = read ? source : target;
        wr.wr.rdma = {remote.addr(kGuard), remote.rkey()};
        wr.imm_data = htonl(seed);
        a_.post_send(wr);

        const ibv_wc sent = a_.poll_one();
        expect_sent(sent, seed, opcode);
        if (read) {
            EXPECT_EQ(sent.byte_len, size);
        }
        if (is_send(opcode) || opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            const ibv_wc received = b_.poll_one();
            const unsigned flags =
                opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE_WITH_IMM
                    ? IBV_WC_WITH_IMM
                    : 0;
            expect_received(received, seed,
                            is_send(opcode) ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM, size, flags);
            if (flags == IBV_WC_WITH_IMM) {
                EXPECT_EQ(received.imm_data, htonl(seed));
            }
        }
        EXPECT_TRUE(same_bytes(target.bytes(), expected)) << "target";
        EXPECT_TRUE(same_bytes(source.bytes(), pattern(seed, source.size()))) << "source";
    }

    MrPtr whole_a_;  // register_whole_address_spaces()
    MrPtr whole_b_;
};

struct MessageCase {
    const char* name;
    ibv_wr_opcode opcode;
    ibv_mtu mtu;
};

class RcMessageSizeTest : public RcOperationsTest,
                          public ::testing::WithParamInterface<MessageCase> {};

// 0, 1, MTU-1, MTU, MTU+1 and 1 MiB: none, one and several packets.
TEST_P(RcMessageSizeTest, EveryByteArrivesOnce) {
    RcOptions options;
    options.path_mtu = GetParam().mtu;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const size_t mtu = 128u << GetParam().mtu;
    uint32_t seed = 1;
    for (size_t size : {size_t{0}, size_t{1}, mtu - 1, mtu, mtu + 1, size_t{1} << 20}) {
        ASSERT_NO_FATAL_FAILURE(transfer(GetParam().opcode, size, seed));
        seed += 2;
    }
    a_.expect_empty();
    b_.expect_empty();
}

std::vector<MessageCase> message_cases() {
    const std::pair<const char*, ibv_wr_opcode> opcodes[] = {
        {"Send", IBV_WR_SEND},
        {"SendWithImm", IBV_WR_SEND_WITH_IMM},
        {"Write", IBV_WR_RDMA_WRITE},
        {"WriteWithImm", IBV_WR_RDMA_WRITE_WITH_IMM},
        {"Read", IBV_WR_RDMA_READ}};
    std::vector<MessageCase> cases;
    for (const auto& [name, opcode] : opcodes) {
        cases.push_back({name, opcode, IBV_MTU_1024});
        cases.push_back({name, opcode, IBV_MTU_4096});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Operations, RcMessageSizeTest, ::testing::ValuesIn(message_cases()),
                         [](const auto& test) {
                             return std::string(test.param.name) +
                                    (test.param.mtu == IBV_MTU_1024 ? "Mtu1024" : "Mtu4096");
                         });

// Scatter/gather lists with zero-length entries, on both sides of a SEND,
// a WRITE and a READ; the SGEs lie apart, and the gaps stay untouched.
class RcSgeTest : public RcOperationsTest, public ::testing::WithParamInterface<ibv_wr_opcode> {};

TEST_P(RcSgeTest, ListsGatherAndScatterInOrder) {
    const ibv_wr_opcode opcode = GetParam();
    RcOptions options;
    options.cap.max_send_sge = options.cap.max_recv_sge = 6;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const bool read = opcode == IBV_WR_RDMA_READ;
    Buffer& a_mem = a_.buffer(16384, kRemoteAccess, 11);
    Buffer& b_mem = b_.buffer(16384, kRemoteAccess, 12);
    // The list of the side that gathers, then of the side that scatters
    // (READ: the local list scatters the response).
    std::vector<ibv_sge> gathering{a_mem.sge(5, 7),      a_mem.sge(20, 0),   a_mem.sge(100, 1500),
                                   a_mem.sge(3000, 300), a_mem.sge(4000, 1), a_mem.sge(4100, 0)};
    std::vector<ibv_sge> scattering{b_mem.sge(1, 100), b_mem.sge(200, 0), b_mem.sge(300, 2000),
                                    b_mem.sge(9000, 50)};
    const size_t size = 7 + 1500 + 300 + 1;
    std::vector<uint8_t> a_image = a_mem.copy();
    std::vector<uint8_t> b_image = b_mem.copy();
    ibv_send_wr wr;
    if (opcode == IBV_WR_SEND) {
        scatter(b_image, b_mem, scattering, gather(a_mem, gathering));
        b_.post_recv(1, scattering);
        wr = make_wr(2, opcode, gathering);
    } else if (opcode == IBV_WR_RDMA_WRITE) {
        // Into one contiguous remote range.
        const std::vector<uint8_t> bytes = gather(a_mem, gathering);
        std::copy(bytes.begin(), bytes.end(), b_image.begin() + 333);
        wr = make_wr(2, opcode, gathering);
        wr.wr.rdma = {b_mem.addr(333), b_mem.rkey()};
    } else {
        // From one contiguous remote range into a's list.
        const std::vector<uint8_t> bytes(b_mem.data() + 333, b_mem.data() + 333 + size);
        scatter(a_image, a_mem, gathering, bytes);
        wr = make_wr(2, opcode, gathering);
        wr.wr.rdma = {b_mem.addr(333), b_mem.rkey()};
    }
    a_.post_send(wr);
    const ibv_wc sent = a_.poll_one();
    expect_sent(sent, 2, opcode);
    if (read) {
        EXPECT_EQ(sent.byte_len, size);
    }
    if (opcode == IBV_WR_SEND) {
        expect_received(b_.poll_one(), 1, IBV_WC_RECV, size, 0);
    }
    EXPECT_TRUE(same_bytes(a_mem.bytes(), a_image)) << "a";
    EXPECT_TRUE(same_bytes(b_mem.bytes(), b_image)) << "b";
}

INSTANTIATE_TEST_SUITE_P(Operations, RcSgeTest,
                         ::testing::Values(IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ),
                         [](const auto& test) {
                             return test.param == IBV_WR_SEND         ? "Send"
                                    : test.param == IBV_WR_RDMA_WRITE ? "Write"
                                                                      : "Read";
                         });

// Inline data is copied at post time: the buffer may change right after.
TEST_F(RcOperationsTest, InlineDataIsTakenAtPostTime) {
    RcOptions options;
    options.cap.max_inline_data = 512;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const uint32_t max_inline = a_.cap().max_inline_data;
    ASSERT_GE(max_inline, 64u);
    Buffer& target = b_.buffer(max_inline + 2 * kGuard, kRemoteAccess, 30);
    uint64_t wr_id = 0;
    for (ibv_wr_opcode opcode : {IBV_WR_SEND, IBV_WR_RDMA_WRITE}) {
        for (uint32_t size : {0u, 1u, max_inline / 2, max_inline - 1, max_inline}) {
            SCOPED_TRACE(testing::Message() << "opcode " << opcode << ", " << size << " bytes");
            ++wr_id;
            target.fill(30);
            std::vector<uint8_t> expected = target.copy();
            std::vector<uint8_t> source = pattern(static_cast<uint32_t>(wr_id), size);
            std::copy(source.begin(), source.end(), expected.begin() + kGuard);
            // Not registered: an inline SGE needs no lkey.
            std::vector<uint8_t> inline_bytes = source;
            ibv_sge sge{reinterpret_cast<uintptr_t>(inline_bytes.data()), size, 0};
            if (opcode == IBV_WR_SEND) {
                b_.post_recv(wr_id, target.sge(kGuard, max_inline + kGuard));
            }
            ibv_send_wr wr =
                make_wr(wr_id, opcode, std::span(&sge, 1), IBV_SEND_SIGNALED | IBV_SEND_INLINE);
            wr.wr.rdma = {target.addr(kGuard), target.rkey()};
            a_.post_send(wr);
            std::fill(inline_bytes.begin(), inline_bytes.end(), 0xee);
            expect_sent(a_.poll_one(), wr_id, opcode);
            if (opcode == IBV_WR_SEND) {
                expect_received(b_.poll_one(), wr_id, IBV_WC_RECV, size, 0);
            }
            EXPECT_TRUE(same_bytes(target.bytes(), expected));
        }
    }
}

// A SEND per WR, each carrying its index; only the signaled ones complete,
// in posting order.
TEST_F(RcOperationsTest, UnsignaledWrsCompleteSilently) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    constexpr size_t kCount = 16;
    Buffer& source = a_.buffer(kCount * 8, kRemoteAccess, 0);
    Buffer& target = b_.buffer(kCount * 8, kRemoteAccess, 0);
    std::vector<ibv_sge> sges;
    std::vector<ibv_send_wr> wrs;
    std::vector<uint64_t> signaled;
    for (size_t i = 0; i < kCount; ++i) {
        source.word(i) = 1000 + i;
        sges.push_back(source.sge(i * 8, 8));
        b_.post_recv(i, target.sge(i * 8, 8));
    }
    for (size_t i = 0; i < kCount; ++i) {
        // The last one signaled: its completion says the others are done.
        const bool signal = i % 3 == 0 || i + 1 == kCount;
        wrs.push_back(
            make_wr(i, IBV_WR_SEND, std::span(&sges[i], 1), signal ? IBV_SEND_SIGNALED : 0));
        if (signal) {
            signaled.push_back(i);
        }
    }
    link(wrs);
    a_.post_send(wrs.front());
    const std::vector<ibv_wc> sent = a_.poll(signaled.size());
    ASSERT_EQ(sent.size(), signaled.size());
    for (size_t i = 0; i < sent.size(); ++i) {
        expect_sent(sent[i], signaled[i], IBV_WR_SEND);
    }
    a_.expect_empty();
    const std::vector<ibv_wc> received = b_.poll(kCount);
    ASSERT_EQ(received.size(), kCount);
    for (size_t i = 0; i < kCount; ++i) {
        expect_received(received[i], i, IBV_WC_RECV, 8, 0);
        EXPECT_EQ(target.word(i), 1000 + i);
    }
}

// With sq_sig_all every WR completes, IBV_SEND_SIGNALED or not.
TEST_F(RcOperationsTest, SqSigAllSignalsEveryWr) {
    RcOptions options;
    options.sq_sig_all = true;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Buffer& source = a_.buffer(4096, kRemoteAccess, 40);
    Buffer& target = b_.buffer(4096, kRemoteAccess, 41);
    std::vector<ibv_sge> sges;
    for (size_t i = 0; i < 8; ++i) {
        sges.push_back(source.sge(i * 512, 512));
    }
    std::vector<ibv_send_wr> wrs;
    for (size_t i = 0; i < 8; ++i) {
        wrs.push_back(make_wr(i, IBV_WR_RDMA_WRITE, std::span(&sges[i], 1), 0));
        wrs.back().wr.rdma = {target.addr(i * 512), target.rkey()};
    }
    link(wrs);
    a_.post_send(wrs.front());
    const std::vector<ibv_wc> sent = a_.poll(8);
    ASSERT_EQ(sent.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
        expect_sent(sent[i], i, IBV_WR_RDMA_WRITE);
    }
    EXPECT_TRUE(same_bytes(target.bytes(), source.bytes()));
}

// A WRITE fenced behind a READ sends what the READ brought, posted in one
// list so that nothing but the fence orders them.
TEST_F(RcOperationsTest, FencedWriteSeesTheReadBeforeIt) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    constexpr uint32_t kSize = 64 * 1024;
    Buffer& remote = b_.buffer(2 * kSize, kRemoteAccess, 50);
    Buffer& local = a_.buffer(kSize, kRemoteAccess, 51);
    std::vector<uint8_t> expected = remote.copy();
    std::copy_n(remote.data(), kSize, expected.begin() + kSize);
    ibv_sge sge = local.sge(0, kSize);
    ibv_send_wr wrs[] = {
        make_wr(1, IBV_WR_RDMA_READ, std::span(&sge, 1)),
        make_wr(2, IBV_WR_RDMA_WRITE, std::span(&sge, 1), IBV_SEND_SIGNALED | IBV_SEND_FENCE)};
    wrs[0].wr.rdma = {remote.addr(0), remote.rkey()};
    wrs[1].wr.rdma = {remote.addr(kSize), remote.rkey()};
    link(wrs);
    a_.post_send(wrs[0]);
    const std::vector<ibv_wc> sent = a_.poll(2);
    ASSERT_EQ(sent.size(), 2u);
    expect_sent(sent[0], 1, IBV_WR_RDMA_READ);
    expect_sent(sent[1], 2, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(same_bytes(remote.bytes(), expected));
}

// As many SENDs as the send queue holds, posted in one list: they complete
// in order, and each lands in its own receive.
// The keys of an MR survive ibv_rereg_mr, and a peer keeps the one it read
// at registration: once a rereg grants remote write, a WRITE with that key
// lands (rdma-core's test_mr_rereg_access).
TEST_F(RcOperationsTest, ReregGrantingRemoteWriteOpensTheKeyThePeerHolds) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& source = a_.buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
    Buffer& target = b_.buffer(4096, IBV_ACCESS_LOCAL_WRITE, 2);
    const uint32_t rkey = target.rkey();
    ASSERT_EQ(ibv_rereg_mr(target.mr(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
              0)
        << strerror(errno);
    EXPECT_EQ(target.rkey(), rkey);
    ibv_sge sge = source.sge(0, 4096);
    ibv_send_wr wr = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    wr.wr.rdma = {target.addr(), rkey};
    a_.post_send(wr);
    expect_sent(a_.poll_one(), 1, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(same_bytes(target.bytes(), source.bytes()));
}

TEST_F(RcOperationsTest, FullSendQueueCompletesInOrder) {
    RcOptions options;
    options.cap.max_send_wr = options.cap.max_recv_wr = 128;
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    const size_t count = a_.cap().max_send_wr;
    ASSERT_LE(count, b_.cap().max_recv_wr);
    constexpr size_t kSlot = 2048;
    Buffer& source = a_.buffer(count * kSlot, kRemoteAccess, 60);
    Buffer& target = b_.buffer(count * kSlot, kRemoteAccess, 61);
    std::vector<uint8_t> expected = target.copy();
    std::vector<ibv_sge> sges;
    std::vector<ibv_send_wr> wrs;
    for (size_t i = 0; i < count; ++i) {
        const uint32_t size = static_cast<uint32_t>(i * 37 % kSlot);
        b_.post_recv(i, target.sge(i * kSlot, kSlot));
        sges.push_back(source.sge(i * kSlot, size));
        std::copy_n(source.data() + i * kSlot, size, expected.begin() + i * kSlot);
    }
    for (size_t i = 0; i < count; ++i) {
        wrs.push_back(make_wr(i, IBV_WR_SEND, std::span(&sges[i], 1)));
    }
    link(wrs);
    a_.post_send(wrs.front());
    const std::vector<ibv_wc> sent = a_.poll(count);
    ASSERT_EQ(sent.size(), count);
    for (size_t i = 0; i < count; ++i) {
        expect_sent(sent[i], i, IBV_WR_SEND);
    }
    const std::vector<ibv_wc> received = b_.poll(count);
    ASSERT_EQ(received.size(), count);
    for (size_t i = 0; i < count; ++i) {
        expect_received(received[i], i, IBV_WC_RECV, sges[i].length, 0);
    }
    EXPECT_TRUE(same_bytes(target.bytes(), expected));
}

// Messages of thousands of packets each way, with a WRITE queued behind the
// READ: the requester's window and the paced READ responses keep every
// packet from being lost (no retransmission, no sequence error, even
// through UDP sockets), and the answers arrive in PSN order.
TEST_F(RcOperationsTest, LongMessagesFlowWithoutLoss) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    constexpr uint32_t kSize = 4 << 20;
    Buffer& local = a_.buffer(3 * kSize, kRemoteAccess, 56);
    Buffer& remote = b_.buffer(3 * kSize, kRemoteAccess, 57);
    std::vector<uint8_t> expected_local = local.copy();
    std::vector<uint8_t> expected_remote = remote.copy();
    std::copy_n(local.data(), kSize, expected_remote.begin());                  // WRITE
    std::copy_n(remote.data() + kSize, kSize, expected_local.begin() + kSize);  // READ
    std::copy_n(local.data() + 2 * kSize, kSize, expected_remote.begin() + 2 * kSize);
    const auto total = [](const char* name) {
        return counter("uroce0", name) + counter("uroce1", name);
    };
    const uint64_t timeouts = total("retransmit_timeouts");
    const uint64_t sequence_errors = total("rcvd_seq_err");
    ibv_sge sges[] = {local.sge(0, kSize), local.sge(kSize, kSize), local.sge(2 * kSize, kSize)};
    ibv_send_wr wrs[] = {make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sges[0], 1)),
                         make_wr(2, IBV_WR_RDMA_READ, std::span(&sges[1], 1)),
                         make_wr(3, IBV_WR_RDMA_WRITE, std::span(&sges[2], 1))};
    wrs[0].wr.rdma = {remote.addr(0), remote.rkey()};
    wrs[1].wr.rdma = {remote.addr(kSize), remote.rkey()};
    wrs[2].wr.rdma = {remote.addr(2 * kSize), remote.rkey()};
    link(wrs);
    a_.post_send(wrs[0]);
    const std::vector<ibv_wc> sent = a_.poll(3);
    ASSERT_EQ(sent.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        expect_sent(sent[i], i + 1, wrs[i].opcode);
    }
    EXPECT_TRUE(same_bytes(local.bytes(), expected_local));
    EXPECT_TRUE(same_bytes(remote.bytes(), expected_remote));
    EXPECT_EQ(total("retransmit_timeouts"), timeouts);
    EXPECT_EQ(total("rcvd_seq_err"), sequence_errors);
}

// Many READs and atomics outstanding with max_rd_atomic at 1, 4 and 16:
// they wait for room, and complete in order with the right data.
class RcReadLimitTest : public RcOperationsTest, public ::testing::WithParamInterface<uint8_t> {};

TEST_P(RcReadLimitTest, ManyReadsAndAtomicsCompleteInOrder) {
    RcOptions options;
    options.max_rd_atomic = GetParam();
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    constexpr size_t kReads = 48;
    constexpr uint32_t kSize = 3000;
    Buffer& remote = b_.buffer(kReads * kSize, kRemoteAccess, 70);
    Buffer& local = a_.buffer(kReads * kSize, kRemoteAccess, 71);
    Buffer& counter_word = b_.buffer(8, kRemoteAccess, 0);
    Buffer& originals = a_.buffer(kReads / 4 * 8, kRemoteAccess, 0);
    counter_word.word(0) = 0;
    std::vector<ibv_sge> sges;
    std::vector<ibv_send_wr> wrs;
    // Room first, so that the WRs can point at their SGEs.
    sges.reserve(kReads + kReads / 4);
    for (size_t i = 0; i < kReads; ++i) {
        sges.push_back(local.sge(i * kSize, kSize));
        wrs.push_back(make_wr(wrs.size(), IBV_WR_RDMA_READ, std::span(&sges.back(), 1)));
        wrs.back().wr.rdma = {remote.addr(i * kSize), remote.rkey()};
        if (i % 4 == 3) {
            sges.push_back(originals.sge(i / 4 * 8, 8));
            wrs.push_back(
                make_wr(wrs.size(), IBV_WR_ATOMIC_FETCH_AND_ADD, std::span(&sges.back(), 1)));
            wrs.back().wr.atomic = {counter_word.addr(), 1, 0, counter_word.rkey()};
        }
    }
    ASSERT_LE(wrs.size(), a_.cap().max_send_wr);
    link(wrs);
    a_.post_send(wrs.front());
    const std::vector<ibv_wc> sent = a_.poll(wrs.size());
    ASSERT_EQ(sent.size(), wrs.size());
    for (size_t i = 0; i < wrs.size(); ++i) {
        expect_sent(sent[i], i, wrs[i].opcode);
    }
    EXPECT_TRUE(same_bytes(local.bytes(), remote.bytes()));
    EXPECT_EQ(counter_word.word(0), kReads / 4);
    for (size_t i = 0; i < kReads / 4; ++i) {
        EXPECT_EQ(originals.word(i), i) << "fetch-and-add " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Operations, RcReadLimitTest, ::testing::Values(1, 4, 16),
                         [](const auto& test) {
                             return "MaxRdAtomic" + std::to_string(test.param);
                         });

// Compare-and-swap (matching, then not) and fetch-and-add: the original
// value comes back, memory changes only when it should, and the words
// around both targets stay as they were.
TEST_F(RcOperationsTest, AtomicsReturnTheOriginalValue) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& remote = b_.buffer(3 * 8, kRemoteAccess, 80);
    Buffer& local = a_.buffer(3 * 8, kRemoteAccess, 81);
    const uint64_t remote_before = 0x0123456789abcdefull;
    remote.word(1) = remote_before;
    const std::vector<uint8_t> remote_guards = remote.copy();
    const std::vector<uint8_t> local_guards = local.copy();
    auto atomic = [&](uint64_t wr_id, ibv_wr_opcode opcode, uint64_t compare_add, uint64_t swap) {
        ibv_sge sge = local.sge(8, 8);
        ibv_send_wr wr = make_wr(wr_id, opcode, std::span(&sge, 1));
        wr.wr.atomic = {remote.addr(8), compare_add, swap, remote.rkey()};
        a_.post_send(wr);
        const ibv_wc wc = a_.poll_one();
        expect_sent(wc, wr_id, opcode);
        return local.word(1);
    };
    const uint64_t swapped = 0xfeedfacecafebeefull;
    EXPECT_EQ(atomic(1, IBV_WR_ATOMIC_CMP_AND_SWP, remote_before, swapped), remote_before);
    EXPECT_EQ(remote.word(1), swapped);
    EXPECT_EQ(atomic(2, IBV_WR_ATOMIC_CMP_AND_SWP, remote_before, 42), swapped);
    EXPECT_EQ(remote.word(1), swapped) << "a compare that does not match swaps nothing";
    EXPECT_EQ(atomic(3, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x10, 0), swapped);
    EXPECT_EQ(remote.word(1), swapped + 0x10);
    EXPECT_EQ(atomic(4, IBV_WR_ATOMIC_FETCH_AND_ADD, ~0ull, 0), swapped + 0x10);
    EXPECT_EQ(remote.word(1), swapped + 0xf) << "adding wraps around";
    for (size_t word : {0, 2}) {
        EXPECT_TRUE(same_bytes(remote.bytes().subspan(word * 8, 8),
                               std::span(remote_guards).subspan(word * 8, 8)));
        EXPECT_TRUE(same_bytes(local.bytes().subspan(word * 8, 8),
                               std::span(local_guards).subspan(word * 8, 8)));
    }
}

// Implicit ODP: one MR over the whole address space on each side. Its
// rkey reaches any mapped address; an unmapped one is a remote access
// error, and its lkey gathers from anywhere mapped.
TEST_F(RcOperationsTest, ImplicitOdpKeysReachWhateverIsMapped) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    ASSERT_NO_FATAL_FAILURE(register_whole_address_spaces());
    std::vector<uint8_t> source = pattern(12, 5000);  // plain, never registered by itself
    std::vector<uint8_t> target(5000);
    ibv_sge sge{reinterpret_cast<uintptr_t>(source.data()), 5000, whole_a_->lkey};
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    write.wr.rdma = {reinterpret_cast<uintptr_t>(target.data()), whole_b_->rkey};
    a_.post_send(write);
    expect_sent(a_.poll_one(), 1, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(same_bytes(target, source));

    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* hole = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    ASSERT_EQ(munmap(hole, page), 0);
    write.wr_id = 2;
    write.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(hole);
    a_.post_send(write);
    const ibv_wc failed = a_.poll_one();
    EXPECT_EQ(failed.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(failed.status);
}

// Two pages of which only the first can be accessed: a message over both
// reaches memory the application took away in its second half. (The
// second page stays mapped, without access, so that nothing else lands
// there.)
struct HalfMapped {
    HalfMapped() {
        void* p =
            mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED && mprotect(static_cast<uint8_t*>(p) + page, page, PROT_NONE) == 0) {
            start = static_cast<uint8_t*>(p);
        }
    }
    ~HalfMapped() {
        if (start) {
            munmap(start, 2 * page);
        }
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    uint8_t* start = nullptr;
};

// The daemon gathers the packets' writes into one system call: a write
// that fails halfway through a message still fails that message, on both
// sides, and what was mapped received its bytes.
TEST_F(RcOperationsTest, ImplicitOdpSendIntoMemoryInaccessibleHalfwayFailsTheMessage) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    ASSERT_NO_FATAL_FAILURE(register_whole_address_spaces());
    HalfMapped target;
    ASSERT_NE(target.start, nullptr);
    const uint32_t length = static_cast<uint32_t>(2 * target.page);
    b_.post_recv(7, ibv_sge{reinterpret_cast<uintptr_t>(target.start), length, whole_b_->lkey});
    std::vector<uint8_t> source = pattern(3, length);
    ibv_sge sge{reinterpret_cast<uintptr_t>(source.data()), length, whole_a_->lkey};
    ibv_send_wr send = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    a_.post_send(send);

    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.wr_id, 7u);
    EXPECT_EQ(received.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(received.status);
    const ibv_wc sent = a_.poll_one();
    EXPECT_EQ(sent.wr_id, 1u);
    EXPECT_EQ(sent.status, IBV_WC_REM_OP_ERR) << ibv_wc_status_str(sent.status);
    EXPECT_TRUE(same_bytes(std::span(target.start, 1024), std::span(source).first(1024)))
        << "the mapped half's first packet";
}

TEST_F(RcOperationsTest, ImplicitOdpReadIntoMemoryInaccessibleHalfwayFailsLocally) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    ASSERT_NO_FATAL_FAILURE(register_whole_address_spaces());
    HalfMapped target;
    ASSERT_NE(target.start, nullptr);
    const uint32_t length = static_cast<uint32_t>(2 * target.page);
    std::vector<uint8_t> source = pattern(5, length);
    ibv_sge sge{reinterpret_cast<uintptr_t>(target.start), length, whole_a_->lkey};
    ibv_send_wr read = make_wr(1, IBV_WR_RDMA_READ, std::span(&sge, 1));
    read.wr.rdma = {reinterpret_cast<uintptr_t>(source.data()), whole_b_->rkey};
    a_.post_send(read);

    const ibv_wc wc = a_.poll_one();
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_TRUE(same_bytes(std::span(target.start, 1024), std::span(source).first(1024)));
}

}  // namespace
}  // namespace uroce::test
