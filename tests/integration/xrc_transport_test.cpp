// XRC between the two devices: an XRC_INI QP on uroce0 sends to XRC SRQs
// behind one XRC_TGT QP on uroce1. Each request names its SRQ, whose WQEs,
// CQ and PD serve it; an SRQ outside the QP's XRC domain is refused; the
// target QP can be opened by another client of the domain and outlives its
// creator's handle.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <filesystem>

#include "rc_pair.h"

namespace uroce::test {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kPsn = 0x123;

ibv_gid gid0(ibv_context* context) {
    ibv_gid gid{};
    EXPECT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
    return gid;
}

void to_init(ibv_qp* qp, int access) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = access;
    ASSERT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0)
        << "to INIT: " << strerror(errno);
}

void to_rtr(ibv_qp* qp, const ibv_gid& peer, uint32_t peer_qpn, int extra_mask) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.dgid = peer;
    attr.ah_attr.grh.hop_limit = 64;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = kPsn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | extra_mask),
              0)
        << "to RTR: " << strerror(errno);
}

// One client of the target device: its XRC domain (opened through `file`
// when given), a PD, and XRC SRQs each with its own CQ.
struct TargetClient {
    ContextPtr context;
    XrcdPtr xrcd;
    PdPtr pd;
    std::vector<std::unique_ptr<Buffer>> buffers;  // go before the PD
    std::vector<CqPtr> cqs;
    std::vector<SrqPtr> srqs;

    void open(const std::string& device, int file) {
        context = open_device(device);
        ASSERT_TRUE(context);
        ibv_xrcd_init_attr attr{};
        attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        attr.fd = file;
        attr.oflags = O_CREAT;
        xrcd.reset(ibv_open_xrcd(context.get(), &attr));
        ASSERT_TRUE(xrcd) << "ibv_open_xrcd: " << strerror(errno);
        pd.reset(ibv_alloc_pd(context.get()));
        ASSERT_TRUE(pd) << "ibv_alloc_pd: " << strerror(errno);
    }
    // An XRC SRQ (on `pd`, or the client's) with a CQ of its own; returns its index.
    size_t add_srq(ibv_pd* on_pd = nullptr) {
        cqs.emplace_back(ibv_create_cq(context.get(), 64, nullptr, nullptr, 0));
        EXPECT_TRUE(cqs.back()) << "ibv_create_cq: " << strerror(errno);
        ibv_srq_init_attr_ex attr{};
        attr.attr = {16, 2, 0};
        attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                         IBV_SRQ_INIT_ATTR_CQ;
        attr.srq_type = IBV_SRQT_XRC;
        attr.pd = on_pd ? on_pd : pd.get();
        attr.xrcd = xrcd.get();
        attr.cq = cqs.back().get();
        srqs.emplace_back(ibv_create_srq_ex(context.get(), &attr));
        EXPECT_TRUE(srqs.back()) << "ibv_create_srq_ex: " << strerror(errno);
        return srqs.size() - 1;
    }
    uint32_t srq_num(size_t index) const {
        uint32_t number = 0;
        EXPECT_EQ(ibv_get_srq_num(srqs[index].get(), &number), 0);
        return number;
    }
    Buffer& buffer(size_t size, int access, uint32_t seed = 0) {
        buffers.push_back(std::make_unique<Buffer>(pd.get(), size, access, seed));
        return *buffers.back();
    }
    void post_srq_recv(size_t index, uint64_t wr_id, ibv_sge sge) {
        ibv_recv_wr wr{wr_id, nullptr, &sge, 1};
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_srq_recv(srqs[index].get(), &wr, &bad), 0) << strerror(errno);
    }
    // The next completion of SRQ `index`'s CQ, or a failure at the deadline.
    ibv_wc poll(size_t index) {
        ibv_wc wc{};
        wc.status = IBV_WC_GENERAL_ERR;
        const auto deadline = std::chrono::steady_clock::now() + kDeadline;
        while (ibv_poll_cq(cqs[index].get(), 1, &wc) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "no completion on the CQ of XRC SRQ " << index;
                break;
            }
            usleep(50);
        }
        return wc;
    }
    // The next async event other than IBV_EVENT_COMM_EST (which the first
    // request to the QP in RTR raises).
    ibv_event_type async_event() {
        for (;;) {
            pollfd ready{context->async_fd, POLLIN, 0};
            if (::poll(&ready, 1, 30000) != 1) {
                ADD_FAILURE() << "no async event by the deadline";
                return static_cast<ibv_event_type>(-1);
            }
            ibv_async_event event{};
            EXPECT_EQ(ibv_get_async_event(context.get(), &event), 0) << strerror(errno);
            const ibv_event_type type = event.event_type;
            ibv_ack_async_event(&event);
            if (type != IBV_EVENT_COMM_EST) {
                return type;
            }
        }
    }
};

class XrcTransportTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(initiator_.open("uroce0", RcOptions{}));
        // The initiator side's QP is replaced by an XRC_INI one.
        ibv_qp_init_attr_ex ini{};
        ini.qp_type = IBV_QPT_XRC_SEND;
        ini.send_cq = initiator_.cq();
        ini.cap.max_send_wr = 32;
        ini.cap.max_send_sge = 2;
        ini.comp_mask = IBV_QP_INIT_ATTR_PD;
        ini.pd = initiator_.pd();
        ini_.reset(ibv_create_qp_ex(initiator_.context(), &ini));
        ASSERT_TRUE(ini_) << "XRC_INI: " << strerror(errno);

        file_ = std::filesystem::temp_directory_path() /
                ("uroce-xrcd-" + std::to_string(getpid()) + "-" + path_name());
        fd_ = ::open(file_.c_str(), O_RDWR | O_CREAT, 0600);
        ASSERT_GE(fd_, 0) << strerror(errno);
        ASSERT_NO_FATAL_FAILURE(target_.open("uroce1", fd_));
        ibv_qp_init_attr_ex tgt{};
        tgt.qp_type = IBV_QPT_XRC_RECV;
        tgt.comp_mask = IBV_QP_INIT_ATTR_XRCD;
        tgt.xrcd = target_.xrcd.get();
        tgt_.reset(ibv_create_qp_ex(target_.context.get(), &tgt));
        ASSERT_TRUE(tgt_) << "XRC_TGT: " << strerror(errno);

        const int access =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        ASSERT_NO_FATAL_FAILURE(to_init(ini_.get(), 0));
        ASSERT_NO_FATAL_FAILURE(to_init(tgt_.get(), access));
        ASSERT_NO_FATAL_FAILURE(to_rtr(tgt_.get(), gid0(initiator_.context()), ini_->qp_num,
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
        ASSERT_NO_FATAL_FAILURE(to_rtr(ini_.get(), gid0(target_.context.get()), tgt_->qp_num, 0));
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = kPsn;
        attr.timeout = 14;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.max_rd_atomic = 1;
        ASSERT_EQ(ibv_modify_qp(ini_.get(), &attr,
                                IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
                  0)
            << "XRC_INI to RTS: " << strerror(errno);
    }
    void TearDown() override {
        if (fd_ >= 0) {
            ::close(fd_);
            std::filesystem::remove(file_);
        }
    }

    void post(ibv_send_wr& wr, uint32_t srq_num) {
        wr.qp_type.xrc.remote_srqn = srq_num;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(ini_.get(), &wr, &bad), 0) << strerror(errno);
    }
    // What ibv_open_qp needs to open the target QP in `client`'s XRC domain.
    ibv_qp_open_attr target_attr(const TargetClient& client) const {
        ibv_qp_open_attr attr{};
        attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
        attr.qp_num = tgt_->qp_num;
        attr.xrcd = client.xrcd.get();
        attr.qp_type = IBV_QPT_XRC_RECV;
        return attr;
    }
    // The target QP, opened by `client` (ibv_open_qp); null, with a test
    // failure, when it cannot be.
    QpPtr open_target(const TargetClient& client) const {
        ibv_qp_open_attr attr = target_attr(client);
        QpPtr opened(ibv_open_qp(client.context.get(), &attr));
        EXPECT_TRUE(opened) << "ibv_open_qp: " << strerror(errno);
        return opened;
    }
    ibv_qp_state state(ibv_qp* qp) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0) << strerror(errno);
        return attr.qp_state;
    }

    RcSide initiator_;  // its context, PD and CQ; its RC QP stays unused
    QpPtr ini_;
    std::filesystem::path file_;
    int fd_ = -1;
    TargetClient target_;
    QpPtr tgt_;
};

TEST_F(XrcTransportTest, EachSendLandsInTheSrqItNamesAndCompletesOnThatSrqsCq) {
    const size_t first = target_.add_srq();
    const size_t second = target_.add_srq();
    constexpr uint32_t kLength = 3 * kMtu + 77;  // several packets
    Buffer& out = initiator_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE, 3);
    Buffer& in_first = target_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE);
    Buffer& in_second = target_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NO_FATAL_FAILURE(target_.post_srq_recv(first, 11, in_first.sge(0, kLength)));
    ASSERT_NO_FATAL_FAILURE(target_.post_srq_recv(second, 22, in_second.sge(0, kLength)));

    ibv_sge sge = out.sge(0, kLength);
    ibv_send_wr to_second = make_wr(1, IBV_WR_SEND_WITH_IMM, std::span(&sge, 1));
    to_second.imm_data = htonl(0xabc);
    ASSERT_NO_FATAL_FAILURE(post(to_second, target_.srq_num(second)));
    const ibv_wc sent = initiator_.poll_one();
    EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent.status);
    const ibv_wc got = target_.poll(second);
    EXPECT_EQ(got.status, IBV_WC_SUCCESS) << ibv_wc_status_str(got.status);
    EXPECT_EQ(got.wr_id, 22u);
    EXPECT_EQ(got.opcode, IBV_WC_RECV);
    EXPECT_EQ(got.byte_len, kLength);
    EXPECT_EQ(got.qp_num, tgt_->qp_num);
    EXPECT_EQ(ntohl(got.imm_data), 0xabcu);
    EXPECT_TRUE(same_bytes(in_second.bytes(), out.bytes()));
    // The other SRQ kept its WQE and its CQ saw nothing.
    ibv_wc none{};
    EXPECT_EQ(ibv_poll_cq(target_.cqs[first].get(), 1, &none), 0);
    EXPECT_TRUE(same_bytes(in_first.bytes(), pattern(0, kLength)));

    ibv_send_wr to_first = make_wr(2, IBV_WR_SEND, std::span(&sge, 1));
    ASSERT_NO_FATAL_FAILURE(post(to_first, target_.srq_num(first)));
    EXPECT_EQ(initiator_.poll_one().status, IBV_WC_SUCCESS);
    const ibv_wc got_first = target_.poll(first);
    EXPECT_EQ(got_first.status, IBV_WC_SUCCESS) << ibv_wc_status_str(got_first.status);
    EXPECT_EQ(got_first.wr_id, 11u);
    EXPECT_TRUE(same_bytes(in_first.bytes(), out.bytes()));
}

TEST_F(XrcTransportTest, SendWaitsForAWqeInItsSrq) {
    const size_t srq = target_.add_srq();
    Buffer& out = initiator_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 8);
    Buffer& in = target_.buffer(64, IBV_ACCESS_LOCAL_WRITE);
    ibv_sge sge = out.sge(0, 64);
    ibv_send_wr wr = make_wr(5, IBV_WR_SEND, std::span(&sge, 1));
    const uint64_t rnr_before = counter("uroce1", "send_rnr_err");
    ASSERT_NO_FATAL_FAILURE(post(wr, target_.srq_num(srq)));
    EXPECT_GT(counter_after("uroce1", "send_rnr_err", rnr_before), rnr_before);
    ASSERT_NO_FATAL_FAILURE(target_.post_srq_recv(srq, 6, in.sge(0, 64)));
    EXPECT_EQ(initiator_.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(target_.poll(srq).wr_id, 6u);
    EXPECT_TRUE(same_bytes(in.bytes(), out.bytes()));
}

// RDMA and atomics name an SRQ too, and reach memory through its PD.
TEST_F(XrcTransportTest, WriteReadAndAtomicsReachMemoryOnTheSrqsPd) {
    const size_t srq = target_.add_srq();
    constexpr uint32_t kLength = 2 * kMtu + 5;
    Buffer& out = initiator_.buffer(kLength, IBV_ACCESS_LOCAL_WRITE, 4);
    Buffer& back = initiator_.buffer(kLength + 8, IBV_ACCESS_LOCAL_WRITE);
    Buffer& remote = target_.buffer(kLength, kRemoteAccess);

    ibv_sge write_sge = out.sge(0, kLength);
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&write_sge, 1));
    write.wr.rdma = {remote.addr(), remote.rkey()};
    ibv_sge read_sge = back.sge(0, kLength);
    ibv_send_wr read = make_wr(2, IBV_WR_RDMA_READ, std::span(&read_sge, 1));
    read.wr.rdma = {remote.addr(), remote.rkey()};
    ASSERT_NO_FATAL_FAILURE(post(write, target_.srq_num(srq)));
    EXPECT_EQ(initiator_.poll_one().status, IBV_WC_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(post(read, target_.srq_num(srq)));
    const ibv_wc read_wc = initiator_.poll_one();
    EXPECT_EQ(read_wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(read_wc.status);
    EXPECT_EQ(read_wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_TRUE(same_bytes(remote.bytes().first(kLength), out.bytes()));
    EXPECT_TRUE(same_bytes(back.bytes().first(kLength), out.bytes()));

    Buffer& word = target_.buffer(8, kRemoteAccess);
    word.word(0) = 40;
    Buffer& result = initiator_.buffer(8, IBV_ACCESS_LOCAL_WRITE);
    ibv_sge result_sge = result.sge(0, 8);
    ibv_send_wr add = make_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD, std::span(&result_sge, 1));
    add.wr.atomic = {word.addr(), 2, 0, word.rkey()};
    ASSERT_NO_FATAL_FAILURE(post(add, target_.srq_num(srq)));
    const ibv_wc add_wc = initiator_.poll_one();
    EXPECT_EQ(add_wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(add_wc.status);
    EXPECT_EQ(result.word(0), 40u);
    EXPECT_EQ(word.word(0), 42u);
    // Nothing of this took a receive WQE or made a receive completion.
    ibv_wc none{};
    EXPECT_EQ(ibv_poll_cq(target_.cqs[srq].get(), 1, &none), 0);
}

TEST_F(XrcTransportTest, AnSrqOnAnotherPdCannotReachTheMemory) {
    PdPtr other(ibv_alloc_pd(target_.context.get()));
    ASSERT_TRUE(other);
    const size_t srq = target_.add_srq(other.get());
    Buffer& out = initiator_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 4);
    Buffer& remote = target_.buffer(64, kRemoteAccess);  // on the client's own PD
    ibv_sge sge = out.sge(0, 64);
    ibv_send_wr write = make_wr(1, IBV_WR_RDMA_WRITE, std::span(&sge, 1));
    write.wr.rdma = {remote.addr(), remote.rkey()};
    ASSERT_NO_FATAL_FAILURE(post(write, target_.srq_num(srq)));
    const ibv_wc wc = initiator_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_TRUE(same_bytes(remote.bytes(), pattern(0, 64)));
    EXPECT_EQ(target_.async_event(), IBV_EVENT_QP_ACCESS_ERR);
    target_.srqs.clear();  // before the PD it is on
}

TEST_F(XrcTransportTest, AnSrqOutsideTheQpsDomainIsRefused) {
    // An SRQ of another XRC domain on the same device, and a number no SRQ has.
    TargetClient stranger;
    ASSERT_NO_FATAL_FAILURE(stranger.open("uroce1", -1));
    const size_t foreign = stranger.add_srq();
    Buffer& out = initiator_.buffer(64, IBV_ACCESS_LOCAL_WRITE, 4);
    Buffer& in = stranger.buffer(64, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NO_FATAL_FAILURE(stranger.post_srq_recv(foreign, 9, in.sge(0, 64)));
    ibv_sge sge = out.sge(0, 64);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    const uint64_t refused = counter("uroce1", "rcvd_xrc_srq_err");
    ASSERT_NO_FATAL_FAILURE(post(wr, stranger.srq_num(foreign)));
    const ibv_wc wc = initiator_.poll_one();
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(counter("uroce1", "rcvd_xrc_srq_err"), refused + 1);
    EXPECT_EQ(target_.async_event(), IBV_EVENT_QP_REQ_ERR);
    EXPECT_EQ(state(tgt_.get()), IBV_QPS_ERR);
    // The stranger's SRQ was not touched.
    ibv_wc none{};
    EXPECT_EQ(ibv_poll_cq(stranger.cqs[foreign].get(), 1, &none), 0);
    EXPECT_TRUE(same_bytes(in.bytes(), pattern(0, 64)));
}

// ibv_open_qp: another client of the same domain (through the same file)
// holds the target QP; it keeps working after its creator lets go, and both
// holders hear its events.
TEST_F(XrcTransportTest, AnOpenedTargetQpOutlivesItsCreatorsHandle) {
    TargetClient other;
    ASSERT_NO_FATAL_FAILURE(other.open("uroce1", fd_));
    QpPtr opened = open_target(other);
    ASSERT_TRUE(opened);
    EXPECT_EQ(opened->qp_num, tgt_->qp_num);
    EXPECT_EQ(state(opened.get()), IBV_QPS_RTR);

    const size_t srq = other.add_srq();
    tgt_.reset();  // the creator's handle goes; the QP stays
    Buffer& out = initiator_.buffer(2 * kMtu, IBV_ACCESS_LOCAL_WRITE, 6);
    Buffer& in = other.buffer(2 * kMtu, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NO_FATAL_FAILURE(other.post_srq_recv(srq, 4, in.sge(0, 2 * kMtu)));
    ibv_sge sge = out.sge(0, 2 * kMtu);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    ASSERT_NO_FATAL_FAILURE(post(wr, other.srq_num(srq)));
    EXPECT_EQ(initiator_.poll_one().status, IBV_WC_SUCCESS);
    EXPECT_EQ(other.poll(srq).wr_id, 4u);
    EXPECT_TRUE(same_bytes(in.bytes(), out.bytes()));
    EXPECT_EQ(device_objects(test_daemon().status(), "uroce1")["qp"], 1);

    opened.reset();  // the last handle: now the QP goes
    EXPECT_EQ(device_objects(test_daemon().status(), "uroce1")["qp"], 0);
}

TEST_F(XrcTransportTest, EveryHolderOfTheTargetQpHearsItsEvents) {
    TargetClient other;
    ASSERT_NO_FATAL_FAILURE(other.open("uroce1", fd_));
    QpPtr opened = open_target(other);
    ASSERT_TRUE(opened);
    Buffer& out = initiator_.buffer(8, IBV_ACCESS_LOCAL_WRITE);
    ibv_sge sge = out.sge(0, 8);
    ibv_send_wr wr = make_wr(1, IBV_WR_SEND, std::span(&sge, 1));
    ASSERT_NO_FATAL_FAILURE(post(wr, 0xfffff));  // no SRQ has that number
    EXPECT_EQ(initiator_.poll_one().status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(target_.async_event(), IBV_EVENT_QP_REQ_ERR);
    EXPECT_EQ(other.async_event(), IBV_EVENT_QP_REQ_ERR);
}

TEST_F(XrcTransportTest, OpenQpRefusesWhatIsNotAnXrcTargetOfTheDomain) {
    TargetClient other;
    ASSERT_NO_FATAL_FAILURE(other.open("uroce1", -1));  // a domain of its own
    ibv_qp_open_attr open_attr = target_attr(other);
    errno = 0;
    EXPECT_EQ(ibv_open_qp(other.context.get(), &open_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);  // another domain's QP

    TargetClient same;
    ASSERT_NO_FATAL_FAILURE(same.open("uroce1", fd_));
    open_attr.xrcd = same.xrcd.get();
    open_attr.qp_type = IBV_QPT_RC;
    errno = 0;
    EXPECT_EQ(ibv_open_qp(same.context.get(), &open_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);  // only XRC_TGT QPs are shared
    open_attr.qp_type = IBV_QPT_XRC_RECV;
    open_attr.qp_num = 0xfffff;
    errno = 0;
    EXPECT_EQ(ibv_open_qp(same.context.get(), &open_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);  // no such QP
    open_attr.qp_num = tgt_->qp_num;
    open_attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
    errno = 0;
    EXPECT_EQ(ibv_open_qp(same.context.get(), &open_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);  // no domain given
    // Nothing was opened: the creator's handle is the only one.
    EXPECT_EQ(device_objects(test_daemon().status(), "uroce1")["qp"], 1);
}

}  // namespace
}  // namespace uroce::test
