// RAW_PACKET QPs on the emulated Ethernet segment between uroce0 (sender)
// and uroce1 (receiver): whole frames out of a send WQE, steered on arrival
// by ibv_create_flow(3) rules (MAC, IPv4, UDP, priorities, DONT_TRAP,
// defaults, sniffer, drop) to QPs, or through an RSS QP to the WQ that the
// Toeplitz hash of the frame's addresses and ports selects.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "rc_pair.h"

namespace uroce::test {
namespace {

using Mac = std::array<uint8_t, 6>;
constexpr Mac kMacB = {0x02, 0x00, 0x00, 0x00, 0x00, 0xb1};
constexpr Mac kMacA = {0x02, 0x00, 0x00, 0x00, 0x00, 0xa1};
constexpr Mac kOtherMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0xee};
constexpr size_t kBuffer = 2048;
using FlowPtr = Owned<ibv_flow, ibv_destroy_flow>;

// An Ethernet/IPv4/UDP frame from 10.0.0.1:`sport` to 10.0.0.2:`dport`.
std::vector<uint8_t> udp_frame(const Mac& dst, uint16_t sport, uint16_t dport,
                               size_t payload = 64) {
    std::vector<uint8_t> f(14 + 20 + 8 + payload);
    memcpy(f.data(), dst.data(), 6);
    memcpy(f.data() + 6, kMacA.data(), 6);
    f[12] = 0x08;  // IPv4
    uint8_t* ip = f.data() + 14;
    ip[0] = 0x45;
    const uint16_t ip_len = htons(static_cast<uint16_t>(20 + 8 + payload));
    memcpy(ip + 2, &ip_len, 2);
    ip[8] = 64;
    ip[9] = 17;  // UDP
    const uint8_t src[] = {10, 0, 0, 1}, dst_ip[] = {10, 0, 0, 2};
    memcpy(ip + 12, src, 4);
    memcpy(ip + 16, dst_ip, 4);
    uint8_t* udp = ip + 20;
    const uint16_t s = htons(sport), d = htons(dport);
    memcpy(udp, &s, 2);
    memcpy(udp + 2, &d, 2);
    for (size_t i = 0; i < payload; ++i) {
        udp[8 + i] = static_cast<uint8_t>(i * 7 + sport);
    }
    return f;
}

// Toeplitz hash (the Microsoft RSS definition), written here independently
// of the daemon's.
uint32_t toeplitz(const std::vector<uint8_t>& key, const std::vector<uint8_t>& input) {
    uint32_t result = 0;
    uint32_t window = (uint32_t{key[0]} << 24) | (key[1] << 16) | (key[2] << 8) | key[3];
    for (size_t i = 0; i < input.size(); ++i) {
        for (int bit = 7; bit >= 0; --bit) {
            if (input[i] & (1u << bit)) {
                result ^= window;
            }
            const size_t next = i + 4;
            window = (window << 1) | ((next < key.size() ? key[next] >> bit : 0) & 1);
        }
    }
    return result;
}

// A flow attribute with one ETH spec, and optionally IPv4 and UDP specs.
struct EthUdpFlow {
    ibv_flow_attr attr{};
    ibv_flow_spec_eth eth{};
    ibv_flow_spec_ipv4 ipv4{};
    ibv_flow_spec_tcp_udp udp{};
};
static_assert(sizeof(EthUdpFlow) == sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth) +
                                        sizeof(ibv_flow_spec_ipv4) + sizeof(ibv_flow_spec_tcp_udp));

EthUdpFlow mac_flow(const Mac& mac, uint16_t priority = 0, uint32_t flags = 0) {
    EthUdpFlow f;
    f.attr.type = IBV_FLOW_ATTR_NORMAL;
    f.attr.size = sizeof(f.attr) + sizeof(f.eth);
    f.attr.priority = priority;
    f.attr.num_of_specs = 1;
    f.attr.port = 1;
    f.attr.flags = flags;
    f.eth.type = IBV_FLOW_SPEC_ETH;
    f.eth.size = sizeof(f.eth);
    memcpy(f.eth.val.dst_mac, mac.data(), 6);
    memset(f.eth.mask.dst_mac, 0xff, 6);
    return f;
}

// A default or sniffer rule: the attribute alone.
EthUdpFlow specless_flow(ibv_flow_attr_type type) {
    EthUdpFlow f;
    f.attr.type = type;
    f.attr.size = sizeof(f.attr);
    f.attr.port = 1;
    return f;
}

EthUdpFlow udp_port_flow(const Mac& mac, uint16_t dport, uint16_t priority = 0) {
    EthUdpFlow f = mac_flow(mac, priority);
    f.attr.size = sizeof(f);
    f.attr.num_of_specs = 3;
    f.ipv4.type = IBV_FLOW_SPEC_IPV4;
    f.ipv4.size = sizeof(f.ipv4);
    f.udp.type = IBV_FLOW_SPEC_UDP;
    f.udp.size = sizeof(f.udp);
    f.udp.val.dst_port = htons(dport);
    f.udp.mask.dst_port = 0xffff;
    return f;
}

// Buffers, CQ and a RAW_PACKET QP in RTS on one device.
struct RawSide {
    ContextPtr context;
    PdPtr pd;
    CqPtr cq;
    QpPtr qp;
    std::vector<uint8_t> memory = std::vector<uint8_t>(16 * kBuffer);
    MrPtr mr;

    void open(const char* device, bool with_qp = true) {
        context = open_device(device);
        ASSERT_TRUE(context);
        pd.reset(ibv_alloc_pd(context.get()));
        cq.reset(ibv_create_cq(context.get(), 64, nullptr, nullptr, 0));
        mr.reset(ibv_reg_mr(pd.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));
        ASSERT_TRUE(pd && cq && mr);
        if (with_qp) {
            qp = raw_qp();
            ASSERT_TRUE(qp);
        }
    }

    QpPtr raw_qp() const {
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq.get();
        init.qp_type = IBV_QPT_RAW_PACKET;
        init.cap = {16, 16, 1, 1, 0};
        QpPtr q(ibv_create_qp(pd.get(), &init));
        EXPECT_TRUE(q) << strerror(errno);
        if (!q) {
            return q;
        }
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        EXPECT_EQ(ibv_modify_qp(q.get(), &attr, IBV_QP_STATE | IBV_QP_PORT), 0);
        attr.qp_state = IBV_QPS_RTR;
        EXPECT_EQ(ibv_modify_qp(q.get(), &attr, IBV_QP_STATE), 0);
        attr.qp_state = IBV_QPS_RTS;
        EXPECT_EQ(ibv_modify_qp(q.get(), &attr, IBV_QP_STATE), 0);
        return q;
    }

    uint8_t* slot(size_t index) { return memory.data() + index * kBuffer; }

    void post_recv(ibv_qp* q, uint64_t wr_id, size_t index, uint32_t length = kBuffer) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(slot(index)), length, mr->lkey};
        ibv_recv_wr wr{wr_id, nullptr, &sge, 1};
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(q, &wr, &bad), 0);
    }

    // Sends `frame` from slot 15; the send's completion.
    ibv_wc send(const std::vector<uint8_t>& frame) {
        memcpy(slot(15), frame.data(), frame.size());
        ibv_sge sge{reinterpret_cast<uintptr_t>(slot(15)), static_cast<uint32_t>(frame.size()),
                    mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 900;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(qp.get(), &wr, &bad), 0);
        return poll_one(cq.get());
    }

    static ibv_wc poll_one(ibv_cq* from) {
        ibv_wc wc{};
        const auto deadline = std::chrono::steady_clock::now() + kDeadline;
        while (ibv_poll_cq(from, 1, &wc) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "no completion";
                wc.status = IBV_WC_GENERAL_ERR;
                break;
            }
        }
        return wc;
    }

    FlowPtr flow(ibv_qp* q, EthUdpFlow& rule) const {
        FlowPtr f(ibv_create_flow(q, &rule.attr));
        EXPECT_TRUE(f) << strerror(errno);
        return f;
    }
};

class RawPacketTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(a_.open("uroce0"));
        ASSERT_NO_FATAL_FAILURE(b_.open("uroce1"));
    }

    // The frame reached b's QP `q` whole, completing on b's CQ.
    void expect_received(ibv_qp* q, uint64_t wr_id, size_t slot, const std::vector<uint8_t>& f) {
        const ibv_wc wc = RawSide::poll_one(b_.cq.get());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, wr_id);
        EXPECT_EQ(wc.opcode, IBV_WC_RECV);
        EXPECT_EQ(wc.qp_num, q->qp_num);
        EXPECT_EQ(wc.byte_len, f.size());
        EXPECT_TRUE(same_bytes(std::span(b_.slot(slot), f.size()), f));
    }

    void expect_nothing_received() {
        ibv_wc wc;
        EXPECT_EQ(ibv_poll_cq(b_.cq.get(), 1, &wc), 0);
    }

    // Sends a frame and waits until uroce1 has handled it (by `counter`).
    void send_counted(const std::vector<uint8_t>& frame, const char* counter_name) {
        const uint64_t before = counter("uroce1", counter_name);
        EXPECT_EQ(a_.send(frame).status, IBV_WC_SUCCESS);
        EXPECT_EQ(counter_after("uroce1", counter_name, before), before + 1);
    }

    RawSide a_;
    RawSide b_;
};

TEST_F(RawPacketTest, FrameReachesTheQpOfItsMacRule) {
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    ASSERT_TRUE(flow);
    b_.post_recv(b_.qp.get(), 1, 0);
    const auto frame = udp_frame(kMacB, 1000, 2000, 500);
    const ibv_wc sent = a_.send(frame);
    EXPECT_EQ(sent.status, IBV_WC_SUCCESS);
    EXPECT_EQ(sent.opcode, IBV_WC_SEND);
    expect_received(b_.qp.get(), 1, 0, frame);
}

TEST_F(RawPacketTest, FrameMatchingNoRuleIsDroppedAndCounted) {
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    b_.post_recv(b_.qp.get(), 1, 0);
    send_counted(udp_frame(kOtherMac, 1, 2), "raw_unmatched");
    expect_nothing_received();
    // Once the rule is gone, its frames match nothing either.
    flow.reset();
    send_counted(udp_frame(kMacB, 1, 2), "raw_unmatched");
    expect_nothing_received();
}

TEST_F(RawPacketTest, FrameWithoutAReceiveIsLost) {
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    send_counted(udp_frame(kMacB, 1, 2), "raw_no_receive");
    b_.post_recv(b_.qp.get(), 1, 0);
    const auto next = udp_frame(kMacB, 3, 4);
    EXPECT_EQ(a_.send(next).status, IBV_WC_SUCCESS);
    expect_received(b_.qp.get(), 1, 0, next);
}

// The lower priority value wins; a DONT_TRAP rule passes the frame on.
TEST_F(RawPacketTest, PriorityAndDontTrap) {
    QpPtr second = b_.raw_qp();
    ASSERT_TRUE(second);
    EthUdpFlow port_rule = udp_port_flow(kMacB, 4000, 0);
    EthUdpFlow mac_rule = mac_flow(kMacB, 1);
    FlowPtr by_port = b_.flow(b_.qp.get(), port_rule);
    FlowPtr by_mac = b_.flow(second.get(), mac_rule);
    b_.post_recv(b_.qp.get(), 1, 0);
    b_.post_recv(second.get(), 2, 1);
    const auto to_port = udp_frame(kMacB, 9, 4000);
    EXPECT_EQ(a_.send(to_port).status, IBV_WC_SUCCESS);
    expect_received(b_.qp.get(), 1, 0, to_port);
    expect_nothing_received();
    const auto elsewhere = udp_frame(kMacB, 9, 5000);
    EXPECT_EQ(a_.send(elsewhere).status, IBV_WC_SUCCESS);
    expect_received(second.get(), 2, 1, elsewhere);

    by_port.reset();
    EthUdpFlow watching = udp_port_flow(kMacB, 4000, 0);
    watching.attr.flags = IBV_FLOW_ATTR_FLAGS_DONT_TRAP;
    FlowPtr copy = b_.flow(b_.qp.get(), watching);
    b_.post_recv(b_.qp.get(), 3, 2);
    b_.post_recv(second.get(), 4, 3);
    EXPECT_EQ(a_.send(to_port).status, IBV_WC_SUCCESS);
    std::vector<uint64_t> ids;
    for (int i = 0; i < 2; ++i) {
        const ibv_wc wc = RawSide::poll_one(b_.cq.get());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        ids.push_back(wc.wr_id);
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<uint64_t>{3, 4}));
}

TEST_F(RawPacketTest, DefaultAndSnifferRules) {
    QpPtr sniffer = b_.raw_qp();
    ASSERT_TRUE(sniffer);
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    EthUdpFlow all = specless_flow(IBV_FLOW_ATTR_SNIFFER);
    FlowPtr sniffing = b_.flow(sniffer.get(), all);
    b_.post_recv(sniffer.get(), 5, 5);
    b_.post_recv(sniffer.get(), 6, 6);
    b_.post_recv(b_.qp.get(), 1, 0);
    const auto matched = udp_frame(kMacB, 1, 1);
    EXPECT_EQ(a_.send(matched).status, IBV_WC_SUCCESS);
    const auto other = udp_frame(kOtherMac, 2, 2);
    EXPECT_EQ(a_.send(other).status, IBV_WC_SUCCESS);
    std::map<uint64_t, uint32_t> lengths;
    for (int i = 0; i < 3; ++i) {
        const ibv_wc wc = RawSide::poll_one(b_.cq.get());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        lengths[wc.wr_id] = wc.byte_len;
    }
    EXPECT_EQ(lengths.size(), 3u);  // the rule's QP once, the sniffer twice
    EXPECT_TRUE(same_bytes(std::span(b_.slot(5), matched.size()), matched));
    EXPECT_TRUE(same_bytes(std::span(b_.slot(6), other.size()), other));

    // ALL_DEFAULT takes what no NORMAL rule traps.
    sniffing.reset();
    EthUdpFlow fallback = specless_flow(IBV_FLOW_ATTR_ALL_DEFAULT);
    FlowPtr defaults = b_.flow(sniffer.get(), fallback);
    b_.post_recv(sniffer.get(), 7, 7);
    b_.post_recv(b_.qp.get(), 2, 1);
    EXPECT_EQ(a_.send(other).status, IBV_WC_SUCCESS);
    expect_received(sniffer.get(), 7, 7, other);
    EXPECT_EQ(a_.send(matched).status, IBV_WC_SUCCESS);
    expect_received(b_.qp.get(), 2, 1, matched);
}

// A NIC's embedded switch loops a port's frames back to the port's own flow
// rules (rdma-core's flow tests send and receive on one device, from two
// contexts): another context on uroce0 receives what uroce0 sends, while
// the sending QP's own rules, even a sniffer, take nothing.
TEST_F(RawPacketTest, FramesLoopBackToOtherQpsOfTheSendingDevice) {
    RawSide same;
    ASSERT_NO_FATAL_FAILURE(same.open("uroce0"));
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = same.flow(same.qp.get(), rule);
    EthUdpFlow all = specless_flow(IBV_FLOW_ATTR_SNIFFER);
    FlowPtr own = a_.flow(a_.qp.get(), all);
    same.post_recv(same.qp.get(), 1, 0);
    a_.post_recv(a_.qp.get(), 2, 0);
    b_.post_recv(b_.qp.get(), 3, 0);
    FlowPtr remote = b_.flow(b_.qp.get(), rule);
    const auto frame = udp_frame(kMacB, 1, 1);
    EXPECT_EQ(a_.send(frame).status, IBV_WC_SUCCESS);
    const ibv_wc looped = RawSide::poll_one(same.cq.get());
    EXPECT_EQ(looped.status, IBV_WC_SUCCESS);
    EXPECT_EQ(looped.wr_id, 1u);
    EXPECT_TRUE(same_bytes(std::span(same.slot(0), frame.size()), frame));
    expect_received(b_.qp.get(), 3, 0, frame);  // and the other device still hears it
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(a_.cq.get(), 1, &wc), 0) << "the sender heard its own frame";
}

TEST_F(RawPacketTest, DropActionDropsWhatItMatches) {
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    struct {
        ibv_flow_attr attr;
        ibv_flow_spec_tcp_udp udp;
        ibv_flow_spec_action_drop drop;
    } dropping{};
    dropping.attr.type = IBV_FLOW_ATTR_NORMAL;
    dropping.attr.size = sizeof(dropping);
    dropping.attr.num_of_specs = 2;
    dropping.attr.port = 1;
    dropping.udp.type = IBV_FLOW_SPEC_UDP;
    dropping.udp.size = sizeof(dropping.udp);
    dropping.udp.val.dst_port = htons(53);
    dropping.udp.mask.dst_port = 0xffff;
    dropping.drop.type = IBV_FLOW_SPEC_ACTION_DROP;
    dropping.drop.size = sizeof(dropping.drop);
    FlowPtr drop(ibv_create_flow(b_.qp.get(), &dropping.attr));
    ASSERT_TRUE(drop) << strerror(errno);
    b_.post_recv(b_.qp.get(), 1, 0);
    send_counted(udp_frame(kMacB, 1, 53), "raw_steered_drop");
    expect_nothing_received();
    const auto kept = udp_frame(kMacB, 1, 54);
    EXPECT_EQ(a_.send(kept).status, IBV_WC_SUCCESS);
    expect_received(b_.qp.get(), 1, 0, kept);
}

TEST_F(RawPacketTest, FramesOutsideTheSegmentsLimitsFailTheSend) {
    for (size_t size : {size_t{10}, size_t{9019}}) {
        QpPtr qp = a_.raw_qp();
        std::swap(qp, a_.qp);
        std::vector<uint8_t> big(std::max<size_t>(size, 16), 0x5a);
        big.resize(size);
        std::vector<uint8_t> memory(size);
        MrPtr mr(ibv_reg_mr(a_.pd.get(), memory.data(), memory.size(), 0));
        ibv_sge sge{reinterpret_cast<uintptr_t>(memory.data()), static_cast<uint32_t>(size),
                    mr->lkey};
        ibv_send_wr wr{};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(a_.qp.get(), &wr, &bad), 0);
        EXPECT_EQ(RawSide::poll_one(a_.cq.get()).status, IBV_WC_LOC_LEN_ERR) << size;
        std::swap(qp, a_.qp);
    }
}

TEST_F(RawPacketTest, ReceiveTooSmallCompletesWithALengthError) {
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    b_.post_recv(b_.qp.get(), 1, 0, 32);
    b_.post_recv(b_.qp.get(), 2, 1);
    const auto frame = udp_frame(kMacB, 1, 2);
    EXPECT_EQ(a_.send(frame).status, IBV_WC_SUCCESS);
    EXPECT_EQ(RawSide::poll_one(b_.cq.get()).status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(a_.send(frame).status, IBV_WC_SUCCESS);
    expect_received(b_.qp.get(), 2, 1, frame);
}

TEST_F(RawPacketTest, FlowsAreRefusedAsTheKernelRefusesThem) {
    EthUdpFlow rule = mac_flow(kMacB);
    {
        WithoutCapNetRaw unprivileged;
        ASSERT_TRUE(unprivileged.ok());
        EXPECT_EQ(error_of(FlowPtr(ibv_create_flow(b_.qp.get(), &rule.attr))), EPERM);
    }
    RcSide rc;
    ASSERT_NO_FATAL_FAILURE(rc.open("uroce1", RcOptions{}));
    EXPECT_EQ(error_of(FlowPtr(ibv_create_flow(rc.qp(), &rule.attr))), EINVAL);
    EthUdpFlow bad = mac_flow(kMacB);
    bad.attr.port = 2;
    EXPECT_EQ(error_of(FlowPtr(ibv_create_flow(b_.qp.get(), &bad.attr))), EINVAL);
    bad = mac_flow(kMacB);
    bad.eth.size = 4;
    EXPECT_EQ(error_of(FlowPtr(ibv_create_flow(b_.qp.get(), &bad.attr))), EINVAL);
    bad = mac_flow(kMacB);
    bad.attr.flags = IBV_FLOW_ATTR_FLAGS_EGRESS;
    EXPECT_EQ(error_of(FlowPtr(ibv_create_flow(b_.qp.get(), &bad.attr))), EOPNOTSUPP);
    // A QP with rules cannot go.
    FlowPtr flow = b_.flow(b_.qp.get(), rule);
    EXPECT_EQ(ibv_destroy_qp(b_.qp.get()), EBUSY);
}

// An RSS QP over four WQs: each frame lands in the WQ that the Toeplitz
// hash of its IPv4 addresses and UDP ports selects (the low two bits).
TEST_F(RawPacketTest, RssSpreadsFramesOverTheWqsByToeplitzHash) {
    std::vector<WqPtr> wqs;
    std::vector<ibv_wq*> table_wqs;
    for (int i = 0; i < 4; ++i) {
        ibv_wq_init_attr attr{};
        attr.wq_type = IBV_WQT_RQ;
        attr.max_wr = 16;
        attr.max_sge = 1;
        attr.pd = b_.pd.get();
        attr.cq = b_.cq.get();
        wqs.emplace_back(ibv_create_wq(b_.context.get(), &attr));
        ASSERT_TRUE(wqs.back()) << strerror(errno);
        ibv_wq_attr rdy{};
        rdy.attr_mask = IBV_WQ_ATTR_STATE;
        rdy.wq_state = IBV_WQS_RDY;
        ASSERT_EQ(ibv_modify_wq(wqs.back().get(), &rdy), 0);
        table_wqs.push_back(wqs.back().get());
    }
    ibv_rwq_ind_table_init_attr table_attr{};
    table_attr.log_ind_tbl_size = 2;
    table_attr.ind_tbl = table_wqs.data();
    IndTablePtr table(ibv_create_rwq_ind_table(b_.context.get(), &table_attr));
    ASSERT_TRUE(table) << strerror(errno);
    std::vector<uint8_t> key = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
    ibv_qp_init_attr_ex init{};
    init.qp_type = IBV_QPT_RAW_PACKET;
    init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    init.pd = b_.pd.get();
    init.rwq_ind_tbl = table.get();
    init.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    init.rx_hash_conf.rx_hash_key_len = static_cast<uint8_t>(key.size());
    init.rx_hash_conf.rx_hash_key = key.data();
    init.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
                                            IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
    QpPtr rss(ibv_create_qp_ex(b_.context.get(), &init));
    ASSERT_TRUE(rss) << strerror(errno);
    EXPECT_EQ(ibv_destroy_rwq_ind_table(table.get()), EBUSY);
    EthUdpFlow rule = mac_flow(kMacB);
    FlowPtr flow = b_.flow(rss.get(), rule);
    ASSERT_TRUE(flow);
    constexpr int kFrames = 12;
    for (int i = 0; i < kFrames; ++i) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(b_.slot(i)), kBuffer, b_.mr->lkey};
        ibv_recv_wr wr{static_cast<uint64_t>(i), nullptr, &sge, 1};
        ibv_recv_wr* bad = nullptr;
        // Every WQ gets enough receives for all the frames it could take.
        for (ibv_wq* wq : table_wqs) {
            ASSERT_EQ(ibv_post_wq_recv(wq, &wr, &bad), 0);
        }
    }
    std::set<uint32_t> used;
    for (int i = 0; i < kFrames; ++i) {
        const uint16_t sport = static_cast<uint16_t>(1024 + 97 * i);
        const auto frame = udp_frame(kMacB, sport, 4791);
        EXPECT_EQ(a_.send(frame).status, IBV_WC_SUCCESS);
        const ibv_wc wc = RawSide::poll_one(b_.cq.get());
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.byte_len, frame.size());
        // The hash's input: source and destination address, then ports (4791 is 0x12b7).
        const auto port_high = static_cast<uint8_t>(sport >> 8);
        const auto port_low = static_cast<uint8_t>(sport);
        const std::vector<uint8_t> input = {10, 0, 0,         1,        10,   0,
                                            0,  2, port_high, port_low, 0x12, 0xb7};
        const uint32_t expected = table_wqs[toeplitz(key, input) & 3]->wq_num;
        EXPECT_EQ(wc.qp_num, expected) << "frame from port " << sport;
        used.insert(wc.qp_num);
    }
    EXPECT_GT(used.size(), 1u) << "the hash spread the flows";
    // An RSS QP has no state to change.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(rss.get(), &attr, IBV_QP_STATE | IBV_QP_PORT), EOPNOTSUPP);
}

TEST_F(RawPacketTest, RssQpsAreRefusedAsMlx5RefusesThem) {
    ibv_wq_init_attr wq_attr{};
    wq_attr.wq_type = IBV_WQT_RQ;
    wq_attr.max_wr = wq_attr.max_sge = 1;
    wq_attr.pd = b_.pd.get();
    wq_attr.cq = b_.cq.get();
    WqPtr wq(ibv_create_wq(b_.context.get(), &wq_attr));
    ASSERT_TRUE(wq);
    ibv_wq* wqs[] = {wq.get()};
    ibv_rwq_ind_table_init_attr table_attr{};
    table_attr.ind_tbl = wqs;
    IndTablePtr table(ibv_create_rwq_ind_table(b_.context.get(), &table_attr));
    ASSERT_TRUE(table);
    uint8_t key[40] = {1};
    auto create = [&](auto change) {
        ibv_qp_init_attr_ex init{};
        init.qp_type = IBV_QPT_RAW_PACKET;
        init.comp_mask =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
        init.pd = b_.pd.get();
        init.rwq_ind_tbl = table.get();
        init.rx_hash_conf = {IBV_RX_HASH_FUNC_TOEPLITZ, 40, key, IBV_RX_HASH_SRC_IPV4};
        change(init);
        return error_of(QpPtr(ibv_create_qp_ex(b_.context.get(), &init)));
    };
    EXPECT_EQ(create([](ibv_qp_init_attr_ex&) {}), 0);
    EXPECT_EQ(create([](ibv_qp_init_attr_ex& i) { i.rx_hash_conf.rx_hash_key_len = 16; }), EINVAL);
    EXPECT_EQ(create([](ibv_qp_init_attr_ex& i) { i.rx_hash_conf.rx_hash_function = 2; }),
              EOPNOTSUPP);
    EXPECT_EQ(create([](ibv_qp_init_attr_ex& i) {
                  i.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_IPSEC_SPI;
              }),
              EOPNOTSUPP);
    EXPECT_EQ(create([](ibv_qp_init_attr_ex& i) { i.qp_type = IBV_QPT_UD; }), EINVAL);
    EXPECT_EQ(create([](ibv_qp_init_attr_ex& i) { i.comp_mask &= ~IBV_QP_INIT_ATTR_RX_HASH; }),
              EINVAL);
    {
        WithoutCapNetRaw unprivileged;
        ASSERT_TRUE(unprivileged.ok());
        EXPECT_EQ(create([](ibv_qp_init_attr_ex&) {}), EPERM);
    }
}

}  // namespace
}  // namespace uroce::test
