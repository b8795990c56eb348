// The extended send API between two devices (ibv_wr_post(3)): QPs created
// with send_ops_flags post through ibv_wr_start, one ibv_wr_* call per work
// request with its setters, and ibv_wr_complete or ibv_wr_abort.
#include <arpa/inet.h>

#include <cstring>

#include "rc_pair.h"
#include "uroce_abi.h"

namespace uroce::test {
namespace {

constexpr uint64_t kRcOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;

RcOptions wr_api_options(ibv_qp_type type = IBV_QPT_RC, uint64_t ops = kRcOps) {
    RcOptions options;
    options.qp_type = type;
    options.send_ops_flags = ops;
    return options;
}

class WrApiTest : public RcTest {
  protected:
    static ibv_qp_ex* ex(const RcSide& side) {
        ibv_qp_ex* qpx = ibv_qp_to_qp_ex(side.qp());
        EXPECT_NE(qpx, nullptr);
        return qpx;
    }
    // Starts a work request's id and flags, as the caller of ibv_wr_* sets them.
    static void next(ibv_qp_ex* qpx, uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED) {
        qpx->wr_id = wr_id;
        qpx->wr_flags = flags;
    }
};

// Every RC operation in one batch: the data each moved, the completions in
// order with their opcodes, and the atomics' results.
TEST_F(WrApiTest, EveryRcOperationInOneBatch) {
    ASSERT_NO_FATAL_FAILURE(connect_pair(wr_api_options()));
    Buffer& out = a_.buffer(4096, kRemoteAccess, 1);
    Buffer& back = a_.buffer(4096, kRemoteAccess, 0);
    Buffer& in = b_.buffer(8192, kRemoteAccess, 2);
    std::vector<uint8_t> expected = in.copy();
    in.word(1000) = 40;  // the atomics' target (byte 8000)
    b_.post_recv(101, in.sge(0, 1024));
    b_.post_recv(102, in.sge(1024, 1024));
    b_.post_recv(103);  // the WRITE with immediate's

    ibv_qp_ex* qpx = ex(a_);
    const char text[] = "inline through ibv_wr_set_inline_data";
    const ibv_sge write_list[] = {out.sge(0, 100), out.sge(200, 100)};
    ibv_wr_start(qpx);
    next(qpx, 1);
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, out.lkey(), out.addr(), 1000);
    next(qpx, 2, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    ibv_wr_send_imm(qpx, htonl(0xabcd));
    ibv_wr_set_inline_data(qpx, const_cast<char*>(text), sizeof(text));
    next(qpx, 3);
    ibv_wr_rdma_write(qpx, in.rkey(), in.addr(4096));
    ibv_wr_set_sge_list(qpx, 2, write_list);
    next(qpx, 4);
    ibv_wr_rdma_write_imm(qpx, in.rkey(), in.addr(6000), htonl(7));
    ibv_wr_set_sge(qpx, out.lkey(), out.addr(1000), 500);
    next(qpx, 5);
    ibv_wr_rdma_read(qpx, in.rkey(), in.addr(4096));
    ibv_wr_set_sge(qpx, back.lkey(), back.addr(), 200);
    next(qpx, 6);
    ibv_wr_atomic_fetch_add(qpx, in.rkey(), in.addr(8000), 2);
    ibv_wr_set_sge(qpx, back.lkey(), back.addr(1000), 8);
    next(qpx, 7);
    ibv_wr_atomic_cmp_swp(qpx, in.rkey(), in.addr(8000), 42, 99);
    ibv_wr_set_sge(qpx, back.lkey(), back.addr(1008), 8);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);

    const std::vector<ibv_wc> sent = a_.poll(7);
    ASSERT_EQ(sent.size(), 7u);
    const ibv_wc_opcode opcodes[] = {IBV_WC_SEND,       IBV_WC_SEND,      IBV_WC_RDMA_WRITE,
                                     IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
                                     IBV_WC_COMP_SWAP};
    for (size_t i = 0; i < 7; ++i) {
        EXPECT_EQ(sent[i].wr_id, i + 1);
        EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent[i].status);
        EXPECT_EQ(sent[i].opcode, opcodes[i]) << "wr " << i + 1;
    }
    const std::vector<ibv_wc> received = b_.poll(3);
    ASSERT_EQ(received.size(), 3u);
    EXPECT_EQ(received[0].byte_len, 1000u);
    EXPECT_EQ(received[1].byte_len, sizeof(text));
    EXPECT_EQ(received[1].imm_data, htonl(0xabcd));
    EXPECT_EQ(received[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(received[2].imm_data, htonl(7));

    std::copy_n(out.data(), 1000, expected.begin());
    std::copy_n(reinterpret_cast<const uint8_t*>(text), sizeof(text), expected.begin() + 1024);
    std::copy_n(out.data(), 100, expected.begin() + 4096);
    std::copy_n(out.data() + 200, 100, expected.begin() + 4196);
    std::copy_n(out.data() + 1000, 500, expected.begin() + 6000);
    std::vector<uint8_t> target = in.copy();
    std::fill_n(target.begin() + 8000, 8, 0);  // the atomics' word, checked below
    std::fill_n(expected.begin() + 8000, 8, 0);
    EXPECT_TRUE(same_bytes(target, expected));
    EXPECT_TRUE(same_bytes(back.bytes().first(200), std::span(expected).subspan(4096, 200)));
    EXPECT_EQ(back.word(125), 40u);  // fetch-add saw 40, left 42
    EXPECT_EQ(back.word(126), 42u);  // compare-swap saw 42, swapped in 99
    EXPECT_EQ(in.word(1000), 99u);
}

// A type 2 window bound by ibv_wr_bind_mw, reached by a WRITE, retired by
// ibv_wr_send_inv; a second one bound and retired by ibv_wr_local_inv.
TEST_F(WrApiTest, WindowsBoundAndInvalidated) {
    ASSERT_NO_FATAL_FAILURE(connect_pair(wr_api_options()));
    Buffer& memory = b_.buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, 3);
    Buffer& out = a_.buffer(256, IBV_ACCESS_LOCAL_WRITE, 4);
    MwPtr mw(ibv_alloc_mw(b_.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(mw) << strerror(errno);
    ibv_qp_ex* bx = ex(b_);
    const ibv_mw_bind_info info{memory.mr(), memory.addr(), 4096, IBV_ACCESS_REMOTE_WRITE};
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ibv_wr_start(bx);
    next(bx, 10);
    ibv_wr_bind_mw(bx, mw.get(), rkey, &info);
    ASSERT_EQ(ibv_wr_complete(bx), 0);
    const ibv_wc bound = b_.poll_one();
    EXPECT_EQ(bound.status, IBV_WC_SUCCESS) << ibv_wc_status_str(bound.status);
    EXPECT_EQ(bound.opcode, IBV_WC_BIND_MW);

    ibv_qp_ex* ax = ex(a_);
    b_.post_recv(11);
    ibv_wr_start(ax);
    next(ax, 12);
    ibv_wr_rdma_write(ax, rkey, memory.addr(512));
    ibv_wr_set_sge(ax, out.lkey(), out.addr(), 256);
    next(ax, 13);
    ibv_wr_send_inv(ax, rkey);
    ibv_wr_set_sge(ax, out.lkey(), out.addr(), 0);
    ASSERT_EQ(ibv_wr_complete(ax), 0);
    for (const ibv_wc& wc : a_.poll(2)) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    }
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(received.invalidated_rkey, rkey);
    EXPECT_TRUE(same_bytes(memory.bytes().subspan(512, 256), out.bytes()));

    // Bound again, then invalidated locally.
    const uint32_t rkey2 = ibv_inc_rkey(rkey);
    ibv_wr_start(bx);
    next(bx, 14);
    ibv_wr_bind_mw(bx, mw.get(), rkey2, &info);
    next(bx, 15);
    ibv_wr_local_inv(bx, rkey2);
    ASSERT_EQ(ibv_wr_complete(bx), 0);
    const std::vector<ibv_wc> done = b_.poll(2);
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0].opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(done[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(done[0].status);
    EXPECT_EQ(done[1].opcode, IBV_WC_LOCAL_INV);
    EXPECT_EQ(done[1].status, IBV_WC_SUCCESS) << ibv_wc_status_str(done[1].status);
    ibv_wr_start(ax);
    next(ax, 16);
    ibv_wr_rdma_write(ax, rkey2, memory.addr());
    ibv_wr_set_sge(ax, out.lkey(), out.addr(), 8);
    ASSERT_EQ(ibv_wr_complete(ax), 0);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_REM_ACCESS_ERR);
}

// ibv_wr_abort drops the batch; the next batch posts as if it never was.
TEST_F(WrApiTest, AbortPostsNothing) {
    ASSERT_NO_FATAL_FAILURE(connect_pair(wr_api_options()));
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 5);
    b_.post_recv(20);
    ibv_qp_ex* qpx = ex(a_);
    ibv_wr_start(qpx);
    next(qpx, 21);
    ibv_wr_send_imm(qpx, htonl(1));
    ibv_wr_set_sge(qpx, out.lkey(), out.addr(), 0);
    ibv_wr_abort(qpx);
    ibv_wr_start(qpx);
    next(qpx, 22);
    ibv_wr_send_imm(qpx, htonl(2));
    ibv_wr_set_sge(qpx, out.lkey(), out.addr(), 0);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(a_.poll_one().wr_id, 22u);
    EXPECT_EQ(b_.poll_one().imm_data, htonl(2));
    a_.expect_empty();
    b_.expect_empty();
}

// A work request ibv_post_send would refuse fails ibv_wr_complete with its
// errno, and nothing of the batch is posted.
TEST_F(WrApiTest, ABadWorkRequestFailsTheWholeBatch) {
    ASSERT_NO_FATAL_FAILURE(connect_pair(wr_api_options()));
    Buffer& out = a_.buffer(4096, IBV_ACCESS_LOCAL_WRITE, 6);
    b_.post_recv(30);
    ibv_qp_ex* qpx = ex(a_);
    std::vector<ibv_sge> too_many(a_.cap().max_send_sge + 1, out.sge(0, 8));
    ibv_wr_start(qpx);
    next(qpx, 31);
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, out.lkey(), out.addr(), 8);
    next(qpx, 32);
    ibv_wr_send(qpx);
    ibv_wr_set_sge_list(qpx, too_many.size(), too_many.data());
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    // Inline data beyond max_inline_data, alone.
    std::vector<char> big(a_.cap().max_inline_data + 1, 'x');
    ibv_wr_start(qpx);
    next(qpx, 33, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    ibv_wr_send(qpx);
    ibv_wr_set_inline_data(qpx, big.data(), big.size());
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    a_.expect_empty();
    b_.expect_empty();
}

// UD through ibv_wr_set_ud_addr: the datagram reaches b's QP with its GRH.
TEST_F(WrApiTest, UdSendThroughSetUdAddr) {
    RcOptions options = wr_api_options(IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
    ASSERT_NO_FATAL_FAILURE(connect_pair(options));
    Buffer& in = b_.buffer(40 + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    b_.post_recv(40, in.sge(0, 40 + 64));
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.port_num = 1;
    ah_attr.grh.dgid = b_.gid();
    AhPtr ah(ibv_create_ah(a_.pd(), &ah_attr));
    ASSERT_TRUE(ah) << strerror(errno);
    char text[] = "a datagram";
    ibv_qp_ex* qpx = ex(a_);
    ibv_wr_start(qpx);
    next(qpx, 41, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    ibv_wr_send(qpx);
    ibv_wr_set_ud_addr(qpx, ah.get(), b_.qpn(), options.qkey);
    ibv_wr_set_inline_data(qpx, text, sizeof(text));
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(a_.poll_one().status, IBV_WC_SUCCESS);
    const ibv_wc received = b_.poll_one();
    EXPECT_EQ(received.status, IBV_WC_SUCCESS) << ibv_wc_status_str(received.status);
    EXPECT_EQ(received.src_qp, a_.qpn());
    EXPECT_EQ(received.byte_len, 40 + sizeof(text));
    EXPECT_STREQ(reinterpret_cast<const char*>(in.data() + 40), text);
}

// IBA 1.5's atomic write through ibv_post_send, on every release (before
// rdma-core v44 verbs.h has no name for its opcode, 15): the 8 bytes of the
// gather list land at an 8-byte aligned address that the rkey opens for
// remote write, and complete as IBV_WC_ATOMIC_WRITE (9).
TEST_F(WrApiTest, AtomicWriteThroughPostSendPlacesEightBytes) {
    ASSERT_NO_FATAL_FAILURE(connect_pair());
    Buffer& in = b_.buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 3);
    Buffer& out = a_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 4);
    out.word(0) = 0x0102030405060708;
    ibv_sge sge = out.sge(0, 8);
    ibv_send_wr wr =
        make_wr(2, static_cast<ibv_wr_opcode>(UROCE_WR_ATOMIC_WRITE), std::span(&sge, 1));
    wr.wr.rdma = {in.addr(32), in.rkey()};
    a_.post_send(wr);
    const ibv_wc wc = a_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(static_cast<int>(wc.opcode), UROCE_WC_ATOMIC_WRITE);
    EXPECT_EQ(in.word(4), 0x0102030405060708u);
}

#if UROCE_HAVE_ATOMIC_WRITE
// ibv_wr_atomic_write (rdma-core v44 and later): 8 bytes taken at the call
// (the buffer is overwritten before the batch completes) land where the
// rkey opens for remote write and complete as IBV_WC_ATOMIC_WRITE. A
// misaligned address fails the work request.
TEST_F(WrApiTest, AtomicWritePlacesEightBytes) {
    ASSERT_NO_FATAL_FAILURE(connect_pair(wr_api_options(IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE)));
    Buffer& in = b_.buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 3);
    std::vector<uint8_t> expected = in.copy();
    ibv_qp_ex* qpx = ex(a_);
    uint64_t value = 0x1122334455667788;
    ibv_wr_start(qpx);
    next(qpx, 1);
    ibv_wr_atomic_write(qpx, in.rkey(), in.addr(16), &value);
    value = 0;
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ibv_wc wc = a_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
    const uint64_t written = 0x1122334455667788;
    std::memcpy(expected.data() + 16, &written, 8);
    EXPECT_TRUE(same_bytes(in.bytes(), expected));

    ibv_wr_start(qpx);
    next(qpx, 3);
    ibv_wr_atomic_write(qpx, in.rkey(), in.addr(20), &value);
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL) << "a misaligned atomic write is refused";
}
#endif

// send_ops_flags naming what the QP type cannot do, or what the device does
// not offer (TSO), are not supported.
TEST(WrApiCreateTest, UnsupportedSendOpsAreRefused) {
    ContextPtr context = open_device("uroce0");
    ASSERT_TRUE(context);
    PdPtr pd(ibv_alloc_pd(context.get()));
    CqPtr cq(ibv_create_cq(context.get(), 8, nullptr, nullptr, 0));
    ASSERT_TRUE(pd && cq);
    const std::pair<ibv_qp_type, uint64_t> refused[] = {
        {IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ},
        {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE},
        {IBV_QPT_RC, IBV_QP_EX_WITH_TSO},
#if UROCE_HAVE_ATOMIC_WRITE
        {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE},
#else
        // Before v44 ibv_qp_ex has no wr_atomic_write for a program to call:
        // the bit v44 gives it is refused rather than a QP made whose
        // ibv_qp_ex a later program would read past.
        {IBV_QPT_RC, 1ull << 12},
#endif
    };
    for (const auto& [type, ops] : refused) {
        ibv_qp_init_attr_ex init{};
        init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        init.pd = pd.get();
        init.send_cq = init.recv_cq = cq.get();
        init.cap = {4, 4, 1, 1, 0};
        init.qp_type = type;
        init.send_ops_flags = ops | IBV_QP_EX_WITH_SEND;
        QpPtr qp(ibv_create_qp_ex(context.get(), &init));
        EXPECT_FALSE(qp) << "type " << type << " ops 0x" << std::hex << ops;
        EXPECT_EQ(errno, EOPNOTSUPP);
    }
}

}  // namespace
}  // namespace uroce::test
