#include "receive_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "protocol/queues.h"

namespace uroce::test {
namespace {

using Harness = ReceiveHarness;

std::array<uint8_t, 4> bytes_of(uint32_t ipv4) {
    std::array<uint8_t, 4> b;
    memcpy(b.data(), &ipv4, 4);
    return b;
}

void check(const Result& r, const char* what) {
    if (!r) {
        throw std::runtime_error(std::string(what) + ": " + r.message);
    }
}

// A UDP socket on the forger's address; port 0 lets the kernel pick one.
UniqueFd bind_forger(uint16_t& port) {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = loopback(Harness::kForgerHost);
    socklen_t len = sizeof(addr);
    if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        throw std::runtime_error(std::string("cannot bind the forger's socket: ") +
                                 strerror(errno));
    }
    port = ntohs(addr.sin_port);
    return fd;
}

constexpr size_t kBufferBytes = Harness::kGuardBytes + Harness::kRegionBytes +
                                Harness::kGuardBytes + Harness::kUnregisteredBytes;

// The same address in every run, so that a fuzzer's saved inputs keep
// naming the region; anywhere when that address is taken, and under
// ThreadSanitizer, whose shadow memory is there (its mmap then drops the
// address and keeps MAP_FIXED_NOREPLACE, which maps page 0).
#if defined(__SANITIZE_THREAD__)
constexpr uintptr_t kWantedAddress = 0;
#else
constexpr uintptr_t kWantedAddress = 0x7e0000000000;
#endif

uint8_t* map_buffer() {
    void* p = MAP_FAILED;
    if (kWantedAddress) {
        p = mmap(reinterpret_cast<void*>(kWantedAddress), kBufferBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    }
    if (p == MAP_FAILED) {
        p = mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) {
        throw std::runtime_error("cannot map the test buffer");
    }
    return static_cast<uint8_t*>(p);
}

}  // namespace

void Harness::Unmap::operator()(uint8_t* p) const {
    munmap(p, kBufferBytes);
}

uint32_t loopback(uint8_t host) {
    return htonl(0x7f000000u | host);
}

wire::PacketHeaders rc_request(wire::Operation op, uint32_t qpn, uint32_t psn) {
    wire::PacketHeaders h{};
    h.bth.opcode = wire::make_opcode(wire::Service::kRc, op);
    h.bth.dest_qp = qpn;
    h.bth.psn = psn;
    h.bth.ack_req = true;
    return h;
}

Harness::ReceiveHarness() : buffer_(map_buffer()) {
    memset(buffer_.get(), kGuardFill, kGuardBytes);
    memset(region(), kRegionFill, kRegionBytes);
    memset(region() + kRegionBytes, kGuardFill, kGuardBytes);
    memset(region() + kRegionBytes + kGuardBytes, kUnregisteredFill, kUnregisteredBytes);

    for (uint8_t host : {1, 2}) {
        DeviceConfig config{"uroce" + std::to_string(host - 1), wire::IpAddress::v4(loopback(host)),
                            "lo"};
        devices_.push_back(std::make_unique<Device>(config, host - 1u));
    }
    // The port the forger got may be taken on the devices' addresses: retry.
    for (int attempt = 0; !engines_; ++attempt) {
        forger_ = bind_forger(port_);
        try {
            // --open: the forger is not one of the daemon's devices.
            engines_ = std::make_unique<Engines>(
                io_, devices_, EngineOptions{.udp_port = port_, .shortcut = true, .open = true}, 1);
        } catch (const std::runtime_error&) {
            if (attempt == 20) {
                throw;
            }
        }
    }

    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw std::runtime_error("pipe2 failed");
    }
    events_read_.reset(pipe_fds[0]);
    ClientPipe events;
    check(ClientPipe::adopt(UniqueFd(pipe_fds[1]), false, {"async event pipe", getpid()}, events),
          "adopt the event pipe");
    context_ = std::make_unique<Context>(device(), getpid(), std::move(events));

    rpc::AllocPdReply pd;
    check(context_->alloc_pd({}, pd), "alloc_pd");
    pd_ = pd.handle;
    check(context_->alloc_pd({}, pd), "alloc_pd");
    other_pd_ = pd.handle;

    rpc::CreateCqRequest cq_req{};
    cq_req.user_handle = 1;
    cq_req.cqe = 255;
    cq_req.channel_fd = -1;
    rpc::CreateCqReply cq;
    ReplyFds fds;
    check(context_->create_cq(cq_req, cq, fds), "create_cq");
    cq_ = cq.handle;
    if (SharedRing::map(fds.at(0).get(), cq.ring_entries, queues::kCqeSize, sizeof(queues::CqState),
                        SharedRing::Side::kConsumer, cq_ring_) != 0) {
        throw std::runtime_error("cannot map the CQ ring");
    }

    constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;
    lkey_ = reg_mr(pd_, kLocalWrite | kAllRemote, false);
    rkey_ = lkey_;
    read_only_rkey_ = reg_mr(pd_, IBV_ACCESS_REMOTE_READ, true);
    write_only_rkey_ = reg_mr(pd_, kLocalWrite | IBV_ACCESS_REMOTE_WRITE, true);
    other_pd_rkey_ = reg_mr(other_pd_, kLocalWrite | kAllRemote, true);

    rtr_ = create_qp();
    rts_ = create_qp();
    reset_ = create_qp();
    init_ = create_qp();
    no_access_ = create_qp();
    modify(rtr_, IBV_QPS_RTR, kAllRemote);
    modify(rts_, IBV_QPS_RTS, kAllRemote);
    modify(init_, IBV_QPS_INIT, kAllRemote);
    modify(no_access_, IBV_QPS_RTR, 0);
    uc_ = create_qp(IBV_QPT_UC);
    ud_ = create_qp(IBV_QPT_UD);
    modify(uc_, IBV_QPS_RTR, IBV_ACCESS_REMOTE_WRITE);
    modify(ud_, IBV_QPS_RTR, 0);
}

Harness::~ReceiveHarness() = default;

uint32_t Harness::reg_mr(uint32_t pd, int access, bool want_rkey) {
    rpc::RegMrRequest req{pd, access, region_va(), kRegionBytes, region_va()};
    rpc::RegMrReply reply;
    check(context_->reg_mr(req, reply), "reg_mr");
    return want_rkey ? reply.rkey : reply.lkey;
}

Harness::QueuePair Harness::create_qp(ibv_qp_type type) {
    rpc::CreateQpRequest req{};
    req.user_handle = next_user_handle_++;
    req.qp_type = type;
    req.sq_sig_all = 1;
    req.pd = pd_;
    req.send_cq = cq_;
    req.recv_cq = cq_;
    req.cap = {16, 16, 1, 1, 0};
    rpc::CreateQpReply reply;
    ReplyFds fds;
    check(context_->create_qp(req, reply, fds), "create_qp");
    QueuePair qp;
    qp.type = type;
    qp.handle = reply.handle;
    qp.qpn = reply.qpn;
    qp.doorbell_slot = reply.doorbell_slot;
    // Reply fds: the send ring, then the receive ring.
    if (map_work_queue(fds.at(0).get(), reply.send_queue,
                       queues::send_wqe_size(reply.cap.max_send_sge, reply.cap.max_inline_data),
                       reply.cap.max_send_wr, qp.send_queue) != 0 ||
        map_work_queue(fds.at(1).get(), reply.recv_queue,
                       queues::recv_wqe_size(reply.cap.max_recv_sge), reply.cap.max_recv_wr,
                       qp.recv_queue) != 0) {
        throw std::runtime_error("cannot map a QP's queues");
    }
    return qp;
}

void Harness::modify(QueuePair& qp, ibv_qp_state to, int qp_access) {
    rpc::ModifyQpRequest req{};
    req.handle = qp.handle;
    rpc::Empty none;
    ibv_qp_attr& a = req.attr;

    req.attr_mask = IBV_QP_STATE;
    a.qp_state = IBV_QPS_RESET;
    check(context_->modify_qp(req, none), "modify_qp to RESET");
    if (to == IBV_QPS_RESET) {
        return;
    }
    const bool ud = qp.type == IBV_QPT_UD;
    const bool rc = qp.type == IBV_QPT_RC;
    req.attr_mask =
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = static_cast<unsigned>(qp_access);
    a.qkey = kQkey;
    check(context_->modify_qp(req, none), "modify_qp to INIT");
    if (to == IBV_QPS_INIT) {
        return;
    }
    req.attr_mask = ud ? IBV_QP_STATE
                       : IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN |
                             (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
    a.qp_state = IBV_QPS_RTR;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
    const uint32_t peer = loopback(kForgerHost);
    memcpy(&a.ah_attr.grh.dgid.raw[12], &peer, sizeof(peer));
    a.path_mtu = kMtu;
    a.dest_qp_num = kForgerQpn;
    a.rq_psn = kRqPsn;
    a.max_dest_rd_atomic = kMaxDestRdAtomic;
    a.min_rnr_timer = 1;
    check(context_->modify_qp(req, none), "modify_qp to RTR");
    if (to == IBV_QPS_RTR) {
        return;
    }
    req.attr_mask =
        IBV_QP_STATE | IBV_QP_SQ_PSN |
        (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 3;
    a.rnr_retry = 3;
    a.sq_psn = kSqPsn;
    a.max_rd_atomic = 4;
    check(context_->modify_qp(req, none), "modify_qp to RTS");
}

void Harness::reconnect(QueuePair& qp, ibv_qp_state to, int qp_access) {
    modify(qp, to, qp_access);
}

ibv_qp_state Harness::state(const QueuePair& qp) {
    rpc::QueryQpRequest req{qp.handle, IBV_QP_STATE};
    rpc::QueryQpReply reply;
    check(context_->query_qp(req, reply), "query_qp");
    return reply.attr.qp_state;
}

std::string Harness::memory_outside_region_damage() const {
    struct Span {
        const char* name;
        size_t offset, length;
        uint8_t fill;
    };
    const Span spans[] = {
        {"guard before the region", 0, kGuardBytes, kGuardFill},
        {"guard after the region", kGuardBytes + kRegionBytes, kGuardBytes, kGuardFill},
        {"unregistered buffer", kGuardBytes + kRegionBytes + kGuardBytes, kUnregisteredBytes,
         kUnregisteredFill},
    };
    for (const Span& s : spans) {
        for (size_t i = 0; i < s.length; ++i) {
            if (buffer_.get()[s.offset + i] != s.fill) {
                return std::string(s.name) + " changed at byte " + std::to_string(i);
            }
        }
    }
    return {};
}

std::vector<uint8_t> Harness::build(const wire::PacketHeaders& headers,
                                    std::span<const uint8_t> payload,
                                    std::optional<uint32_t> src_ip) const {
    const wire::OpcodeInfo* info = wire::opcode_info(headers.bth.opcode);
    if (!info) {
        throw std::runtime_error("build: unknown opcode");
    }
    std::vector<uint8_t> bytes(wire::packet_size(*info, payload.size()));
    const auto addresses = wire::IcrcAddresses::v4(bytes_of(src_ip.value_or(loopback(kForgerHost))),
                                                   bytes_of(loopback(kDeviceHost)), port_, port_);
    if (wire::build_packet(headers, payload, addresses, bytes).error != wire::BuildError::kOk) {
        throw std::runtime_error("build_packet failed");
    }
    return bytes;
}

void Harness::seal(std::span<uint8_t> datagram, std::optional<uint32_t> src_ip,
                   uint16_t ipv4_id) const {
    if (datagram.size() < wire::kIcrcBytes) {
        return;
    }
    auto addresses = wire::IcrcAddresses::v4(bytes_of(src_ip.value_or(loopback(kForgerHost))),
                                             bytes_of(loopback(kDeviceHost)), port_, port_);
    addresses.ipv4_id = ipv4_id;
    const size_t covered = datagram.size() - wire::kIcrcBytes;
    wire::store_icrc(wire::icrc(addresses, datagram.first(covered)),
                     datagram.subspan(covered).first<wire::kIcrcBytes>());
}

void Harness::arrive(std::span<const uint8_t> datagram) {
    engines_->engine(0).receive_datagram(1, datagram, wire::IpAddress::v4(loopback(kForgerHost)),
                                         port_, now());
}

void Harness::send_udp(std::span<const uint8_t> datagram) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = loopback(kDeviceHost);
    to.sin_port = htons(port_);
    if (sendto(forger_.get(), datagram.data(), datagram.size(), 0,
               reinterpret_cast<const sockaddr*>(&to),
               sizeof(to)) != static_cast<ssize_t>(datagram.size())) {
        throw std::runtime_error(std::string("sendto: ") + strerror(errno));
    }
}

void Harness::inject(std::span<const uint8_t> datagram, std::optional<uint32_t> src_ip) {
    engines_->engine(0).receive_datagram(
        1, datagram, wire::IpAddress::v4(src_ip.value_or(loopback(kForgerHost))), port_, now());
    settle();
}

void Harness::settle() {
    // Answers queued by receive_datagram leave on the first turn; a few idle
    // turns in a row mean nothing else is pending.
    for (int idle = 0, turns = 0; idle < 3 && turns < 1000; ++turns) {
        idle = engines_->engine(0).run_once(now()) ? 0 : idle + 1;
    }
}

std::vector<Answer> Harness::answers(int wait_ms) {
    settle();
    std::vector<Answer> out;
    for (;;) {
        uint8_t datagram[65536];
        sockaddr_in from{};
        socklen_t from_len = sizeof(from);
        const ssize_t n = recvfrom(forger_.get(), datagram, sizeof(datagram), MSG_DONTWAIT,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
        if (n < 0) {
            pollfd p{forger_.get(), POLLIN, 0};
            if (wait_ms <= 0 || poll(&p, 1, wait_ms) <= 0) {
                break;
            }
            continue;
        }
        Answer a;
        a.bytes.assign(datagram, datagram + n);
        a.src_port = ntohs(from.sin_port);
        const auto addresses = wire::IcrcAddresses::v4(
            bytes_of(loopback(kDeviceHost)), bytes_of(loopback(kForgerHost)), a.src_port, port_);
        a.error = wire::parse_packet(a.bytes, addresses, a.packet);
        out.push_back(std::move(a));
    }
    return out;
}

void Harness::post_recv(QueuePair& qp, uint64_t wr_id, size_t offset, uint32_t length) {
    SharedRing& ring = qp.recv_queue;
    if (ring.full()) {
        throw std::runtime_error("receive queue full");
    }
    const queues::RecvWqe wqe{wr_id, 1, 0};
    const ibv_sge sge{region_va() + offset, length, lkey_};
    memcpy(ring.slot(), &wqe, sizeof(wqe));
    memcpy(ring.slot() + queues::kRecvWqeFixed, &sge, sizeof(sge));
    ring.advance();
    ring.publish();
    device().doorbell()->post(qp.doorbell_slot);  // as the provider rings it
}

void Harness::post_send(QueuePair& qp, queues::SendWqe wqe, size_t offset, uint32_t length,
                        std::span<const uint8_t> prefetched) {
    SharedRing& ring = qp.send_queue;
    if (ring.full()) {
        throw std::runtime_error("send queue full");
    }
    wqe.num_sge = 1;
    const ibv_sge sge{region_va() + offset, length, lkey_};
    memcpy(ring.slot(), &wqe, sizeof(wqe));
    memcpy(ring.slot() + queues::kSendWqeFixed, &sge, sizeof(sge));
    if (!prefetched.empty()) {
        memcpy(ring.slot() + queues::kSendWqeFixed + sizeof(sge), prefetched.data(),
               prefetched.size());
    }
    ring.advance();
    ring.publish();
    device().doorbell()->post(qp.doorbell_slot);  // as the provider rings it
}

std::vector<ibv_wc> Harness::poll_cq(size_t most) {
    std::vector<ibv_wc> out;
    while (out.size() < most && cq_ring_.ready()) {
        queues::Cqe cqe;
        memcpy(&cqe, cq_ring_.slot(), sizeof(cqe));
        if (cqe.data_length) {  // what the provider does with data a completion carries
            memcpy(reinterpret_cast<void*>(cqe.data_addr), cq_ring_.slot() + sizeof(cqe),
                   cqe.data_length);
        }
        cq_ring_.advance();
        cq_ring_.publish();
        out.push_back(cqe.wc);
    }
    return out;
}

std::vector<uint32_t> Harness::async_events() {
    std::vector<uint32_t> out;
    ib_uverbs_async_event_desc desc;
    while (read(events_read_.get(), &desc, sizeof(desc)) == sizeof(desc)) {
        out.push_back(desc.event_type);
    }
    return out;
}

}  // namespace uroce::test
