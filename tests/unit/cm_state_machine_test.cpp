// The IB CM state machine of emulator/cm/connection_manager, driven as ucma
// drives it, without a daemon or sockets: two devices (uroce0 127.0.0.1, the
// active side, and uroce1 127.0.0.2, the passive side), the MADs each sends
// captured and handed to the other (or dropped, duplicated, forged) by the
// test. What is expected is what the kernel's cm.c and cma.c do; where the
// two differ the test says which function of the kernel it follows.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cm/address.h"
#include "cm/connection_manager.h"
#include "cm/mad.h"
#include "device/device.h"

namespace uroce::cm {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const wire::IpAddress kActiveIp = wire::IpAddress::v4(inet_addr("127.0.0.1"));    // uroce0
const wire::IpAddress kPassiveIp = wire::IpAddress::v4(inet_addr("127.0.0.2"));   // uroce1
const wire::IpAddress kStrangerIp = wire::IpAddress::v4(inet_addr("127.0.0.3"));  // no device

constexpr uint16_t kPort = 7471;
constexpr uint16_t kNobodyPort = 7472;
constexpr uint32_t kActiveQpn = 0x000123;
constexpr uint32_t kPassiveQpn = 0x000456;
constexpr uint64_t kListenerUid = 0x1000;
constexpr uint64_t kActiveUid = 0x2000;
constexpr uint64_t kAcceptUid = 0x3000;
constexpr uint32_t kForgedCommId = 0x0badc0de;
constexpr uint32_t kUdpQkey = 0x01234567;   // RDMA_UDP_QKEY
constexpr uint8_t kAckTimeout = 17;         // CMA_IBOE_PACKET_LIFETIME + 1
constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING without the delay flag
constexpr size_t kIpHeader = kIpCmHeaderSize;

constexpr unsigned kWrite = IBV_ACCESS_REMOTE_WRITE;
constexpr unsigned kWriteReadAtomic =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

std::vector<uint8_t> bytes_of(const std::string& text) {
    return {text.begin(), text.end()};
}

template <size_t N>
std::array<uint8_t, N> array_of(const std::string& text) {
    std::array<uint8_t, N> out{};
    memcpy(out.data(), text.data(), std::min(N, text.size()));
    return out;
}

std::string text_at(const uint8_t* data, size_t size) {
    return std::string(reinterpret_cast<const char*>(data), size);
}

// One MAD a device sent, as sent and decoded.
struct Sent {
    Device* from = nullptr;
    wire::IpAddress dest;
    std::vector<uint8_t> bytes;
    Mad mad;
};

ConnParam connect_param() {
    ConnParam p;
    p.qp_num = kActiveQpn;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.retry_count = 5;
    p.rnr_retry_count = 7;
    p.flow_control = 1;
    p.private_data = bytes_of("hello");
    return p;
}

// What librdmacm's passive side answers a request that asked for
// responder_resources 4 / initiator_depth 2: no more than it offered.
ConnParam accept_param() {
    ConnParam p;
    p.qp_num = kPassiveQpn;
    p.responder_resources = 2;
    p.initiator_depth = 3;
    p.rnr_retry_count = 7;
    p.flow_control = 1;
    p.private_data = bytes_of("world");
    return p;
}

// How far a connection between the two devices has come.
enum class Progress {
    kReqSent,        // active CONNECT: REQ sent, not delivered
    kReqDelivered,   // passive has the request (CONNECT_REQUEST taken), not accepted
    kRepSent,        // passive ACCEPT: REP sent, not delivered
    kRepDelivered,   // active has CONNECT_RESPONSE, not accepted
    kEstablished,    // active ACCEPT: RTU delivered, passive ESTABLISHED
    kDreqSent,       // active DISCONNECT: DREQ sent, not delivered
    kDreqDelivered,  // passive DISCONNECTED
    kDrepSent,       // passive DISCONNECT: DREP sent (passive in timewait), not delivered
    kDrepDelivered,  // active DISCONNECTED: both in timewait
};

struct Conn {
    uint32_t listener = 0;
    uint32_t active = 0;
    uint32_t passive = 0;  // the ID CONNECT_REQUEST brought
    Sent req, rep, rtu, dreq, drep;
    rdma_ucm_event_resp connect_request{};
    rdma_ucm_event_resp connect_response{};
    rdma_ucm_event_resp established{};

    uint32_t active_comm() const {
        const auto* m = std::get_if<Req>(&req.mad.message);
        return m ? m->local_comm_id : 0;
    }
    uint32_t passive_comm() const {
        const auto* m = std::get_if<Rep>(&rep.mad.message);
        return m ? m->local_comm_id : 0;
    }
};

Mad forge(Message message) {
    Mad mad;
    mad.header.transaction_id = 0x1234'5678'0000'0042ull;
    mad.header.attribute = attribute_of(message);
    mad.message = std::move(message);
    return mad;
}

// Messages as the peer of each side would send them.
Rep rep_to_active(const Conn& c) {
    Rep m;
    m.local_comm_id = kForgedCommId;
    m.remote_comm_id = c.active_comm();
    m.local_qpn = kPassiveQpn;
    m.starting_psn = 0x4321;
    m.responder_resources = 2;
    m.initiator_depth = 3;
    m.rnr_retry_count = 7;
    return m;
}
Rtu rtu_to_passive(const Conn& c) {
    Rtu m;
    m.local_comm_id = c.active_comm();
    m.remote_comm_id = c.passive_comm();
    return m;
}
Rej rej_to_active(const Conn& c, RejectReason reason, Answered rejected) {
    Rej m;
    m.local_comm_id = c.passive_comm() ? c.passive_comm() : kForgedCommId;
    m.remote_comm_id = c.active_comm();
    m.message_rejected = rejected;
    m.reason = reason;
    m.private_data = array_of<148>("no room");
    return m;
}
Rej rej_to_passive(const Conn& c, RejectReason reason, Answered rejected) {
    Rej m;
    m.local_comm_id = c.active_comm();
    m.remote_comm_id = c.passive_comm();
    m.message_rejected = rejected;
    m.reason = reason;
    return m;
}
Dreq dreq_to_passive(const Conn& c) {
    Dreq m;
    m.local_comm_id = c.active_comm();
    m.remote_comm_id = c.passive_comm();
    m.remote_qpn_eecn = kPassiveQpn;
    return m;
}
Dreq dreq_to_active(const Conn& c) {
    Dreq m;
    m.local_comm_id = c.passive_comm();
    m.remote_comm_id = c.active_comm();
    m.remote_qpn_eecn = kActiveQpn;
    return m;
}
Drep drep_to_active(const Conn& c) {
    Drep m;
    m.local_comm_id = c.passive_comm();
    m.remote_comm_id = c.active_comm();
    return m;
}

class CmStateMachine : public ::testing::Test {
  protected:
    CmStateMachine() {
        devices_.push_back(std::make_unique<Device>(DeviceConfig{"uroce0", {kActiveIp}}, 0));
        devices_.push_back(std::make_unique<Device>(DeviceConfig{"uroce1", {kPassiveIp}}, 1));
        cm_ = std::make_unique<ConnectionManager>(
            io_, devices_,
            [this](Device& from, uint8_t, const wire::IpAddress& dest,
                   std::span<const std::byte> mad) {
                Sent sent;
                sent.from = &from;
                sent.dest = dest;
                sent.bytes.resize(mad.size());
                memcpy(sent.bytes.data(), mad.data(), mad.size());
                EXPECT_EQ(decode(mad, sent.mad), DecodeError::kOk)
                    << "the daemon sent a MAD it cannot decode itself";
                sent_.push_back(std::move(sent));
            });
        active_ch_ = &open_channel();
        passive_ch_ = &open_channel();
    }

    Device& active_dev() { return *devices_[0]; }
    Device& passive_dev() { return *devices_[1]; }

    // A channel whose pipe's read end the test keeps, as a program would.
    Channel& open_channel() {
        int ends[2];
        if (pipe2(ends, O_NONBLOCK | O_CLOEXEC) != 0) {
            throw std::runtime_error("pipe2");
        }
        close(ends[1]);
        program_ends_.emplace_back(ends[0]);
        ClientPipe readiness;
        if (!ClientPipe::adopt(UniqueFd(dup(ends[0])), true, {"rdma_cm channel", getpid()},
                               readiness)) {
            throw std::runtime_error("adopt");
        }
        return cm_->open_channel(getpid(), getuid(), std::move(readiness));
    }

    Id& id_of(Channel& channel, uint32_t handle) {
        Id* id = nullptr;
        if (Result r = cm_->find(channel, handle, id); !r || !id) {
            throw std::runtime_error("no rdma_cm ID " + std::to_string(handle));
        }
        return *id;
    }

    // The IB CM state status_text prints for an ID: "idle" when it prints
    // none, "gone" when the ID is not listed.
    std::string cm_state(uint32_t handle) const {
        std::istringstream lines(cm_->status_text());
        std::string line;
        while (std::getline(lines, line)) {
            std::istringstream in(line);
            std::vector<std::string> w{std::istream_iterator<std::string>(in), {}};
            if (w.size() > 8 && w[0] == "cm" && w[1] == "id" && w[2] == std::to_string(handle)) {
                return w[7] == "cm" ? w[8] : "idle";
            }
        }
        return "gone";
    }

    size_t id_count() const {
        std::istringstream lines(cm_->status_text());
        std::string line;
        size_t n = 0;
        while (std::getline(lines, line)) {
            n += line.rfind("  cm id ", 0) == 0;
        }
        return n;
    }

    // ---- the wire ----

    std::vector<Sent> take_sent() { return std::exchange(sent_, {}); }

    void take_one(Attribute attribute, Sent& out) {
        std::vector<Sent> sent = take_sent();
        ASSERT_EQ(sent.size(), 1u) << "expected exactly one " << name(attribute);
        ASSERT_EQ(sent[0].mad.header.attribute, attribute)
            << "sent " << name(sent[0].mad.header.attribute) << ", expected " << name(attribute);
        out = std::move(sent[0]);
    }

    void expect_nothing_sent() {
        for (const Sent& s : take_sent()) {
            ADD_FAILURE() << "unexpected " << name(s.mad.header.attribute) << " sent";
        }
    }

    Device* device_at_ip(const wire::IpAddress& ip) {
        for (auto& device : devices_) {
            if (device->config().address == ip) {
                return device.get();
            }
        }
        return nullptr;
    }

    // Hands a captured MAD to the device it was sent to.
    void deliver(const Sent& sent) {
        Device* to = device_at_ip(sent.dest);
        ASSERT_NE(to, nullptr);
        cm_->receive_mad(*to, sent.from->config().address, sent.dest, sent.bytes);
    }

    void inject(Device& to, const wire::IpAddress& src_ip, const Mad& mad) {
        const auto bytes = encode(mad.header.transaction_id, mad.message);
        cm_->receive_mad(to, src_ip, to.config().address,
                         std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    }

    // ---- events ----

    std::vector<rdma_ucm_event_resp> take_events(Channel& channel) {
        std::vector<rdma_ucm_event_resp> events;
        rdma_ucm_event_resp resp{};
        while (cm_->get_event(channel, resp)) {
            events.push_back(resp);
            resp = {};
        }
        return events;
    }

    void take_event(Channel& channel, uint32_t event, rdma_ucm_event_resp& out) {
        std::vector<rdma_ucm_event_resp> events = take_events(channel);
        ASSERT_EQ(events.size(), 1u) << "expected exactly event " << event;
        ASSERT_EQ(events[0].event, event);
        out = events[0];
    }

    void take_event(Channel& channel, uint32_t event) {
        rdma_ucm_event_resp ignored;
        take_event(channel, event, ignored);
    }

    void expect_no_events(Channel& channel) {
        for (const auto& e : take_events(channel)) {
            ADD_FAILURE() << "unexpected event " << e.event << " status " << int32_t(e.status)
                          << " on ID " << e.id;
        }
    }

    // ---- setting up ----

    uint32_t listen_on(const wire::IpAddress& ipv4, uint16_t port, uint16_t ps,
                       uint32_t backlog = 8) {
        uint32_t handle = 0;
        EXPECT_TRUE(cm_->create_id(*passive_ch_, kListenerUid, ps, 0, handle));
        Id& id = id_of(*passive_ch_, handle);
        EXPECT_TRUE(cm_->bind(id, make_address(AF_INET, ipv4, port)));
        EXPECT_TRUE(cm_->listen(id, backlog));
        return handle;
    }

    // An active ID of uroce0 whose route to 127.0.0.2:`port` is resolved.
    uint32_t resolved(uint16_t ps, uint16_t port) {
        uint32_t handle = 0;
        EXPECT_TRUE(cm_->create_id(*active_ch_, kActiveUid, ps, 0, handle));
        Id& id = id_of(*active_ch_, handle);
        const Address src = make_address(AF_INET, kActiveIp, 0);
        EXPECT_TRUE(cm_->resolve_addr(id, &src, make_address(AF_INET, kPassiveIp, port)));
        rdma_ucm_event_resp e;
        take_event(*active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED, e);
        EXPECT_TRUE(cm_->resolve_route(id));
        take_event(*active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED, e);
        return handle;
    }

    // Brings a connection from 127.0.0.1 to 127.0.0.2:kPort as far as `until`,
    // checking each step on the way.
    void drive(Progress until, Conn& c, const ConnParam& connect = connect_param(),
               const ConnParam& accept = accept_param()) {
        c.listener = listen_on(kPassiveIp, kPort, RDMA_PS_TCP);
        c.active = resolved(RDMA_PS_TCP, kPort);
        ASSERT_TRUE(cm_->connect(id_of(*active_ch_, c.active), connect));
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, c.req));
        if (until == Progress::kReqSent) {
            return;
        }
        ASSERT_NO_FATAL_FAILURE(deliver(c.req));
        expect_nothing_sent();  // rdma_cm's MRA waits for a REQ sent again
        ASSERT_NO_FATAL_FAILURE(
            take_event(*passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST, c.connect_request));
        c.passive = c.connect_request.id;
        if (until == Progress::kReqDelivered) {
            return;
        }
        ASSERT_TRUE(cm_->accept(id_of(*passive_ch_, c.passive), kAcceptUid, &accept));
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kRep, c.rep));
        if (until == Progress::kRepSent) {
            return;
        }
        ASSERT_NO_FATAL_FAILURE(deliver(c.rep));
        expect_nothing_sent();  // no MRA either: ACCEPT comes first
        ASSERT_NO_FATAL_FAILURE(
            take_event(*active_ch_, RDMA_CM_EVENT_CONNECT_RESPONSE, c.connect_response));
        if (until == Progress::kRepDelivered) {
            return;
        }
        // rdma_establish: ACCEPT without connection parameters.
        ASSERT_TRUE(cm_->accept(id_of(*active_ch_, c.active), 0, nullptr));
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kRtu, c.rtu));
        ASSERT_NO_FATAL_FAILURE(deliver(c.rtu));
        expect_nothing_sent();
        ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_ESTABLISHED, c.established));
        if (until == Progress::kEstablished) {
            return;
        }
        ASSERT_TRUE(cm_->disconnect(id_of(*active_ch_, c.active)));
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kDreq, c.dreq));
        if (until == Progress::kDreqSent) {
            return;
        }
        ASSERT_NO_FATAL_FAILURE(deliver(c.dreq));
        expect_nothing_sent();
        ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_DISCONNECTED));
        if (until == Progress::kDreqDelivered) {
            return;
        }
        ASSERT_TRUE(cm_->disconnect(id_of(*passive_ch_, c.passive)));
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kDrep, c.drep));
        if (until == Progress::kDrepSent) {
            return;
        }
        ASSERT_NO_FATAL_FAILURE(deliver(c.drep));
        expect_nothing_sent();
        ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_DISCONNECTED));
    }

    ib_uverbs_qp_attr qp_attr(Channel& channel, uint32_t handle, uint32_t state) {
        ib_uverbs_qp_attr attr{};
        Result r = cm_->init_qp_attr(id_of(channel, handle), state, attr);
        EXPECT_TRUE(r) << "INIT_QP_ATTR(" << state << "): " << r.message;
        return attr;
    }

    // Runs the io_context's timers for `duration`, then whatever is due.
    void run_for(milliseconds duration) {
        io_.restart();
        io_.run_for(duration);
        io_.restart();
        io_.poll();
    }

    // Whether the program's descriptor of channel `index` (0 active, 1
    // passive, then in order of opening) polls readable.
    bool readable(size_t index) const {
        pollfd p{program_ends_.at(index).get(), POLLIN, 0};
        return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
    }

    boost::asio::io_context io_;
    std::vector<std::unique_ptr<Device>> devices_;
    std::vector<Sent> sent_;
    std::vector<UniqueFd> program_ends_;  // the channels' descriptors, as the programs hold them
    std::unique_ptr<ConnectionManager> cm_;
    Channel* active_ch_ = nullptr;
    Channel* passive_ch_ = nullptr;
};

// ---- the happy path ----------------------------------------------------------

TEST_F(CmStateMachine, HappyPathBothSides) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c));

    // The REQ: from uroce0 to 127.0.0.2, the service ID of TCP port kPort, the
    // IP CM header and then the program's private data.
    EXPECT_EQ(c.req.from, &active_dev());
    EXPECT_EQ(c.req.dest, kPassiveIp);
    const Req& req = std::get<Req>(c.req.mad.message);
    EXPECT_EQ(req.service_id, service_id(PortSpace::kTcp, kPort));
    EXPECT_EQ(req.local_qpn, kActiveQpn);
    EXPECT_EQ(req.responder_resources, 4);
    EXPECT_EQ(req.initiator_depth, 2);
    EXPECT_EQ(req.retry_count, 5);
    EXPECT_EQ(req.rnr_retry_count, 7);
    EXPECT_EQ(req.max_cm_retries, 15);
    EXPECT_EQ(req.primary.local_ack_timeout, kAckTimeout);
    const auto header = decode_ip_cm_header(req.private_data);
    ASSERT_TRUE(header);
    EXPECT_EQ(header->src_ip, kActiveIp);
    EXPECT_EQ(header->dst_ip, kPassiveIp);
    EXPECT_EQ(text_at(req.private_data.data() + kIpHeader, 5), "hello");

    // CONNECT_REQUEST on the listener's channel, for a new ID, with the REQ's
    // parameters seen from the passive side.
    const rdma_ucm_event_resp& request = c.connect_request;
    EXPECT_EQ(request.uid, kListenerUid);
    EXPECT_NE(request.id, c.listener);
    EXPECT_EQ(request.status, 0u);
    EXPECT_EQ(request.param.conn.qp_num, kActiveQpn);
    EXPECT_EQ(request.param.conn.responder_resources, 2);  // the REQ's initiator depth
    EXPECT_EQ(request.param.conn.initiator_depth, 4);      // the REQ's responder resources
    EXPECT_EQ(request.param.conn.retry_count, 5);
    EXPECT_EQ(request.param.conn.rnr_retry_count, 7);
    EXPECT_EQ(request.param.conn.flow_control, 1);
    EXPECT_EQ(request.param.conn.private_data_len, 92 - kIpHeader);
    EXPECT_EQ(text_at(request.param.conn.private_data, 5), "hello");

    // The REP answers the REQ with the passive's QPN and starting PSN.
    EXPECT_EQ(c.rep.from, &passive_dev());
    EXPECT_EQ(c.rep.dest, kActiveIp);
    const Rep& rep = std::get<Rep>(c.rep.mad.message);
    EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
    EXPECT_NE(rep.local_comm_id, 0u);
    EXPECT_EQ(rep.local_qpn, kPassiveQpn);
    EXPECT_EQ(rep.responder_resources, 2);
    EXPECT_EQ(rep.initiator_depth, 3);
    EXPECT_EQ(rep.rnr_retry_count, 7);
    EXPECT_EQ(text_at(rep.private_data.data(), 5), "world");

    const rdma_ucm_event_resp& response = c.connect_response;
    EXPECT_EQ(response.uid, kActiveUid);
    EXPECT_EQ(response.id, c.active);
    EXPECT_EQ(response.param.conn.qp_num, kPassiveQpn);
    EXPECT_EQ(response.param.conn.responder_resources, 3);  // the REP's initiator depth
    EXPECT_EQ(response.param.conn.initiator_depth, 2);      // the REP's responder resources
    EXPECT_EQ(response.param.conn.rnr_retry_count, 7);
    EXPECT_EQ(response.param.conn.private_data_len, 196);
    EXPECT_EQ(text_at(response.param.conn.private_data, 5), "world");

    const Rtu& rtu = std::get<Rtu>(c.rtu.mad.message);
    EXPECT_EQ(rtu.local_comm_id, req.local_comm_id);
    EXPECT_EQ(rtu.remote_comm_id, rep.local_comm_id);

    // ESTABLISHED for the accepted ID, under the uid ACCEPT gave it.
    EXPECT_EQ(c.established.id, c.passive);
    EXPECT_EQ(c.established.uid, kAcceptUid);
    EXPECT_EQ(cm_state(c.active), "established");
    EXPECT_EQ(cm_state(c.passive), "established");
    expect_no_events(*active_ch_);
    expect_no_events(*passive_ch_);
}

// rdma_init_qp_attr over ib_cm_init_qp_attr, both sides, after the handshake:
// each side's RTR rq_psn is the PSN it announced itself, its RTS sq_psn the
// peer's.
TEST_F(CmStateMachine, InitQpAttrCarriesThePsnHandshake) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c));
    const Req& req = std::get<Req>(c.req.mad.message);
    const Rep& rep = std::get<Rep>(c.rep.mad.message);

    struct Side {
        const char* name;
        Channel* channel;
        uint32_t handle;
        uint32_t peer_qpn;
        wire::IpAddress peer_ip;
        uint32_t own_psn;   // in its own REQ or REP
        uint32_t peer_psn;  // in the peer's
        uint8_t max_dest_rd_atomic;
        uint8_t max_rd_atomic;
        uint8_t rnr_retry;
    };
    const Side sides[] = {
        // The active takes its resources from the REP (cm_rep_handler).
        {"active", active_ch_, c.active, kPassiveQpn, kPassiveIp, req.starting_psn,
         rep.starting_psn, rep.initiator_depth, rep.responder_resources, rep.rnr_retry_count},
        // The passive from its ACCEPT (ib_send_cm_rep), its RNR retry from the REQ.
        {"passive", passive_ch_, c.passive, kActiveQpn, kActiveIp, rep.starting_psn,
         req.starting_psn, 2, 3, req.rnr_retry_count},
    };
    for (const Side& side : sides) {
        SCOPED_TRACE(side.name);
        const auto init = qp_attr(*side.channel, side.handle, IBV_QPS_INIT);
        EXPECT_EQ(init.qp_attr_mask,
                  unsigned(IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT));
        EXPECT_EQ(init.qp_state, unsigned(IBV_QPS_INIT));
        EXPECT_EQ(init.qp_access_flags, kWriteReadAtomic);
        EXPECT_EQ(init.port_num, 1);
        EXPECT_EQ(init.pkey_index, 0);

        const auto rtr = qp_attr(*side.channel, side.handle, IBV_QPS_RTR);
        EXPECT_EQ(rtr.qp_attr_mask,
                  unsigned(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
        EXPECT_EQ(rtr.dest_qp_num, side.peer_qpn);
        EXPECT_EQ(rtr.rq_psn, side.own_psn);
        EXPECT_EQ(rtr.path_mtu, req.path_mtu);
        EXPECT_EQ(rtr.max_dest_rd_atomic, side.max_dest_rd_atomic);
        EXPECT_EQ(rtr.min_rnr_timer, 0);
        EXPECT_EQ(rtr.ah_attr.is_global, 1);
        EXPECT_EQ(wire::IpAddress(rtr.ah_attr.grh.dgid), side.peer_ip);  // ::ffff:127.0.0.x

        const auto rts = qp_attr(*side.channel, side.handle, IBV_QPS_RTS);
        EXPECT_EQ(rts.qp_attr_mask,
                  unsigned(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
        EXPECT_EQ(rts.sq_psn, side.peer_psn);
        EXPECT_EQ(rts.timeout, kAckTimeout);
        EXPECT_EQ(rts.retry_cnt, 5);
        EXPECT_EQ(rts.rnr_retry, side.rnr_retry);
        EXPECT_EQ(rts.max_rd_atomic, side.max_rd_atomic);
    }
    // The handshake itself: what one side receives first is what the other sends first.
    EXPECT_EQ(qp_attr(*active_ch_, c.active, IBV_QPS_RTR).rq_psn,
              qp_attr(*passive_ch_, c.passive, IBV_QPS_RTS).sq_psn);
    EXPECT_EQ(qp_attr(*passive_ch_, c.passive, IBV_QPS_RTR).rq_psn,
              qp_attr(*active_ch_, c.active, IBV_QPS_RTS).sq_psn);
}

// cm_req_handler takes the passive's rnr_retry_count from the REQ and
// ib_send_cm_rep leaves it: the REP's RNR retry count is the active's to use,
// the REQ's the passive's.
TEST_F(CmStateMachine, PassiveRnrRetryIsTheRequests) {
    ConnParam connect = connect_param();
    connect.rnr_retry_count = 6;
    ConnParam accept = accept_param();
    accept.rnr_retry_count = 3;
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c, connect, accept));
    EXPECT_EQ(std::get<Req>(c.req.mad.message).rnr_retry_count, 6);
    EXPECT_EQ(std::get<Rep>(c.rep.mad.message).rnr_retry_count, 3);
    EXPECT_EQ(qp_attr(*active_ch_, c.active, IBV_QPS_RTS).rnr_retry, 3);
    EXPECT_EQ(qp_attr(*passive_ch_, c.passive, IBV_QPS_RTS).rnr_retry, 6);
}

// cm_rep_handler: the active's initiator depth is the REP's responder
// resources and its responder resources the REP's initiator depth, as the
// REP says them.
TEST_F(CmStateMachine, ActiveTakesItsRdAtomicFromTheRep) {
    ConnParam connect = connect_param();
    connect.responder_resources = 1;
    connect.initiator_depth = 1;
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kReqSent, c, connect));
    Rep rep = rep_to_active(c);
    rep.responder_resources = 4;
    rep.initiator_depth = 5;
    inject(active_dev(), kPassiveIp, forge(rep));
    take_event(*active_ch_, RDMA_CM_EVENT_CONNECT_RESPONSE);
    EXPECT_EQ(qp_attr(*active_ch_, c.active, IBV_QPS_RTR).max_dest_rd_atomic, 5);
    EXPECT_EQ(qp_attr(*active_ch_, c.active, IBV_QPS_RTS).max_rd_atomic, 4);
}

// INIT's access flags while the connection is being made: REMOTE_WRITE, and
// READ|ATOMIC when the side has responder resources (cm_init_qp_init_attr);
// the active's are its CONNECT's, the passive's the REQ's initiator depth.
struct AccessRow {
    const char* name;
    uint8_t responder_resources;  // CONNECT's
    uint8_t initiator_depth;      // CONNECT's
    unsigned active_flags;
    unsigned passive_flags;
};

const AccessRow kAccessRows[] = {
    {"ReadsBothWays", 4, 2, kWriteReadAtomic, kWriteReadAtomic},
    {"ActiveServesNoReads", 0, 2, kWrite, kWriteReadAtomic},
    {"ActiveIssuesNoReads", 4, 0, kWriteReadAtomic, kWrite},
    {"NoReadsAtAll", 0, 0, kWrite, kWrite},
};

class CmInitAccess : public CmStateMachine, public ::testing::WithParamInterface<AccessRow> {};

TEST_P(CmInitAccess, FollowsResponderResources) {
    const AccessRow& row = GetParam();
    ConnParam connect = connect_param();
    connect.responder_resources = row.responder_resources;
    connect.initiator_depth = row.initiator_depth;
    Conn c;
    c.listener = listen_on(kPassiveIp, kPort, RDMA_PS_TCP);
    c.active = resolved(RDMA_PS_TCP, kPort);
    // Before CONNECT there is no IB CM connection: cma_ib_init_qp_attr's flags 0.
    const auto before = qp_attr(*active_ch_, c.active, IBV_QPS_INIT);
    EXPECT_EQ(before.qp_attr_mask,
              unsigned(IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT));
    EXPECT_EQ(before.qp_access_flags, 0u);

    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, c.active), connect));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, c.req));
    EXPECT_EQ(qp_attr(*active_ch_, c.active, IBV_QPS_INIT).qp_access_flags, row.active_flags);
    ASSERT_NO_FATAL_FAILURE(deliver(c.req));
    ASSERT_NO_FATAL_FAILURE(
        take_event(*passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST, c.connect_request));
    EXPECT_EQ(qp_attr(*passive_ch_, c.connect_request.id, IBV_QPS_INIT).qp_access_flags,
              row.passive_flags);
}

INSTANTIATE_TEST_SUITE_P(Rows, CmInitAccess, ::testing::ValuesIn(kAccessRows),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- one MAD arriving in one state -------------------------------------------

enum class Side { kActive, kPassive };
enum class Source { kPeer, kStranger };

struct Transition {
    const char* name;
    Progress progress;   // how far the connection is brought first
    Side side;           // which side the MAD arrives at
    const char* before;  // that side's CM state then
    Mad (*mad)(const Conn&);
    Source source = Source::kPeer;
    std::optional<Attribute> reply = std::nullopt;  // what it sends back
    void (*check_reply)(const Conn&, const Message&) = nullptr;
    std::optional<uint32_t> event = std::nullopt;  // what it reports
    uint32_t status = 0;
    void (*check_event)(const rdma_ucm_event_resp&) = nullptr;
    const char* after = nullptr;  // its CM state then
    // How much the receiving device's cm_mads_dropped grows (nullopt: not checked).
    std::optional<uint64_t> dropped = 0;
};

void PrintTo(const Transition& row, std::ostream* os) {
    *os << row.name;
}

void rejected_with_private_data(const rdma_ucm_event_resp& e) {
    EXPECT_EQ(e.param.conn.private_data_len, 148);  // IB_CM_REJ_PRIVATE_DATA_SIZE
    EXPECT_EQ(text_at(e.param.conn.private_data, 7), "no room");
}

const Transition kTransitions[] = {
    // -- what each state is there for --
    {.name = "ReqSent_Rep_ReportsConnectResponse",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad = [](const Conn& c) { return forge(rep_to_active(c)); },
     .event = RDMA_CM_EVENT_CONNECT_RESPONSE,
     .after = "mra-rep-sent"},
    {.name = "ReqSent_Rej_ReportsRejectedWithReasonAndPrivateData",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_active(c, RejectReason::kConsumerDefined, Answered::kReq));
         },
     .event = RDMA_CM_EVENT_REJECTED,
     .status = 28,
     .check_event = rejected_with_private_data,
     .after = "idle"},
    // cm_rej_handler: a stale-connection REJ puts the ID in timewait.
    {.name = "ReqSent_RejStaleConnection_EntersTimewait",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_active(c, RejectReason::kStaleConnection, Answered::kReq));
         },
     .event = RDMA_CM_EVENT_REJECTED,
     .status = 10,
     .after = "timewait"},
    // The MRA only stretches the REQ's timeout (cm.c's MRA_REQ_RCVD, which
    // the daemon keeps as req-sent with a longer retry interval).
    {.name = "ReqSent_MraOfReq_Waits",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             Mra m;
             m.local_comm_id = kForgedCommId;
             m.remote_comm_id = c.active_comm();
             m.message_mraed = Answered::kReq;
             m.service_timeout = kMraServiceTimeout;
             return forge(m);
         },
     .after = "req-sent"},
    {.name = "RepSent_Rtu_ReportsEstablished",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad = [](const Conn& c) { return forge(rtu_to_passive(c)); },
     .event = RDMA_CM_EVENT_ESTABLISHED,
     .after = "established"},
    {.name = "RepSent_Rej_ReportsRejected",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_passive(c, RejectReason::kConsumerDefined, Answered::kRep));
         },
     .event = RDMA_CM_EVENT_REJECTED,
     .status = 28,
     .after = "idle"},
    {.name = "RepSent_Dreq_ReportsDisconnected",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad = [](const Conn& c) { return forge(dreq_to_passive(c)); },
     .event = RDMA_CM_EVENT_DISCONNECTED,
     .after = "dreq-rcvd"},
    // cm_rej_handler: REP_RCVD and MRA_REP_SENT go to timewait on a REJ.
    {.name = "RepDelivered_Rej_EntersTimewait",
     .progress = Progress::kRepDelivered,
     .side = Side::kActive,
     .before = "mra-rep-sent",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_active(c, RejectReason::kConsumerDefined, Answered::kOther));
         },
     .event = RDMA_CM_EVENT_REJECTED,
     .status = 28,
     .after = "timewait"},
    // cm_dreq_handler answers a DREQ in REP_SENT, DREQ_SENT, ESTABLISHED,
    // MRA_REP_RCVD and TIMEWAIT only: in MRA_REP_SENT it is dropped.
    {.name = "RepDelivered_Dreq_IsDropped",
     .progress = Progress::kRepDelivered,
     .side = Side::kActive,
     .before = "mra-rep-sent",
     .mad = [](const Conn& c) { return forge(dreq_to_active(c)); },
     .after = "mra-rep-sent",
     .dropped = std::nullopt},
    {.name = "Established_DreqAtPassive_ReportsDisconnected",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad = [](const Conn& c) { return forge(dreq_to_passive(c)); },
     .event = RDMA_CM_EVENT_DISCONNECTED,
     .after = "dreq-rcvd"},
    {.name = "Established_DreqAtActive_ReportsDisconnected",
     .progress = Progress::kEstablished,
     .side = Side::kActive,
     .before = "established",
     .mad = [](const Conn& c) { return forge(dreq_to_active(c)); },
     .event = RDMA_CM_EVENT_DISCONNECTED,
     .after = "dreq-rcvd"},
    // cm_rej_handler: ESTABLISHED (no LAP on RoCE) goes to timewait on a REJ,
    // and cma reports REJECTED.
    {.name = "Established_Rej_EntersTimewait",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_passive(c, RejectReason::kConsumerDefined, Answered::kOther));
         },
     .event = RDMA_CM_EVENT_REJECTED,
     .status = 28,
     .after = "timewait"},
    {.name = "DreqSent_Drep_ReportsDisconnected",
     .progress = Progress::kDreqSent,
     .side = Side::kActive,
     .before = "dreq-sent",
     .mad = [](const Conn& c) { return forge(drep_to_active(c)); },
     .event = RDMA_CM_EVENT_DISCONNECTED,
     .after = "timewait"},
    // Both sides disconnect at once: cm_dreq_handler moves DREQ_SENT to
    // DREQ_RCVD and sends nothing; the DREP is the program's DISCONNECT.
    {.name = "DreqSent_Dreq_ReportsDisconnectedAndWaitsForTheProgram",
     .progress = Progress::kDreqSent,
     .side = Side::kActive,
     .before = "dreq-sent",
     .mad = [](const Conn& c) { return forge(dreq_to_active(c)); },
     .event = RDMA_CM_EVENT_DISCONNECTED,
     .after = "dreq-rcvd"},
    // The active gave up (cm_destroy_id in REQ_SENT: REJ "timeout" with its CA
    // GUID as ARI, naming no remote comm ID). cm_acquire_rejected_id finds the
    // passive by GUID and comm ID; it goes idle, and ucma reports nothing for
    // an ID the program has not accepted yet.
    {.name = "ReqDelivered_RejTimeoutFromGoneActive_GoesIdle",
     .progress = Progress::kReqDelivered,
     .side = Side::kPassive,
     .before = "mra-req-sent",
     .mad =
         [](const Conn& c) {
             Rej m;
             m.local_comm_id = c.active_comm();
             m.remote_comm_id = 0;
             m.message_rejected = Answered::kOther;
             m.reason = RejectReason::kTimeout;
             m.reject_info_length = 8;
             const uint64_t guid = std::get<Req>(c.req.mad.message).local_ca_guid;
             const uint64_t be = htobe64(guid);
             memcpy(m.ari.data(), &be, sizeof(be));
             return forge(m);
         },
     .after = "idle",
     .dropped = std::nullopt},

    // -- the same message again --
    {.name = "ReqDelivered_ReqAgain_IsMraed",
     .progress = Progress::kReqDelivered,
     .side = Side::kPassive,
     .before = "mra-req-sent",
     .mad = [](const Conn& c) { return c.req.mad; },
     .reply = Attribute::kMra,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Mra& mra = std::get<Mra>(m);
             EXPECT_EQ(mra.message_mraed, Answered::kReq);
             EXPECT_EQ(mra.service_timeout, kMraServiceTimeout);
             EXPECT_EQ(mra.remote_comm_id, c.active_comm());
             EXPECT_NE(mra.local_comm_id, 0u);
         },
     .after = "mra-req-sent"},
    // cm_dup_req_handler answers only in MRA_REQ_SENT (MRA) and TIMEWAIT: in
    // REP_SENT the REP's own retransmission answers.
    {.name = "RepSent_ReqAgain_IsIgnored",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad = [](const Conn& c) { return c.req.mad; },
     .after = "rep-sent",
     .dropped = std::nullopt},
    {.name = "RepDelivered_RepAgain_IsMraed",
     .progress = Progress::kRepDelivered,
     .side = Side::kActive,
     .before = "mra-rep-sent",
     .mad = [](const Conn& c) { return c.rep.mad; },
     .reply = Attribute::kMra,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Mra& mra = std::get<Mra>(m);
             EXPECT_EQ(mra.message_mraed, Answered::kRep);
             EXPECT_EQ(mra.service_timeout, kMraServiceTimeout);
             EXPECT_EQ(mra.local_comm_id, c.active_comm());
             EXPECT_EQ(mra.remote_comm_id, c.passive_comm());
         },
     .after = "mra-rep-sent"},
    {.name = "Established_RepAgain_IsAnsweredWithTheRtu",
     .progress = Progress::kEstablished,
     .side = Side::kActive,
     .before = "established",
     .mad = [](const Conn& c) { return c.rep.mad; },
     .reply = Attribute::kRtu,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Rtu& rtu = std::get<Rtu>(m);
             EXPECT_EQ(rtu.local_comm_id, c.active_comm());
             EXPECT_EQ(rtu.remote_comm_id, c.passive_comm());
         },
     .after = "established"},
    {.name = "Established_RtuAgain_IsDropped",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad = [](const Conn& c) { return c.rtu.mad; },
     .after = "established",
     .dropped = 1},
    {.name = "DreqDelivered_DreqAgain_IsDropped",
     .progress = Progress::kDreqDelivered,
     .side = Side::kPassive,
     .before = "dreq-rcvd",
     .mad = [](const Conn& c) { return c.dreq.mad; },
     .after = "dreq-rcvd",
     .dropped = 1},
    {.name = "DrepSent_DreqAgain_IsAnsweredWithTheDrep",
     .progress = Progress::kDrepSent,
     .side = Side::kPassive,
     .before = "timewait",
     .mad = [](const Conn& c) { return c.dreq.mad; },
     .reply = Attribute::kDrep,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Drep& drep = std::get<Drep>(m);
             EXPECT_EQ(drep.local_comm_id, c.passive_comm());
             EXPECT_EQ(drep.remote_comm_id, c.active_comm());
         },
     .after = "timewait"},
    {.name = "DrepDelivered_DrepAgain_IsDropped",
     .progress = Progress::kDrepDelivered,
     .side = Side::kActive,
     .before = "timewait",
     .mad = [](const Conn& c) { return c.drep.mad; },
     .after = "timewait",
     .dropped = 1},

    // -- nothing on the wire is trusted --
    {.name = "ReqSent_Rep_UnknownCommId",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             Rep m = rep_to_active(c);
             m.remote_comm_id = ~c.active_comm();
             return forge(m);
         },
     .after = "req-sent",
     .dropped = 1},
    {.name = "ReqSent_Rep_FromAnotherAddress",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad = [](const Conn& c) { return forge(rep_to_active(c)); },
     .source = Source::kStranger,
     .after = "req-sent",
     .dropped = 1},
    {.name = "RepDelivered_Rep_WrongRemoteCommId",
     .progress = Progress::kRepDelivered,
     .side = Side::kActive,
     .before = "mra-rep-sent",
     .mad =
         [](const Conn& c) {
             Mad mad = c.rep.mad;
             std::get<Rep>(mad.message).local_comm_id += 0x100;
             return mad;
         },
     .after = "mra-rep-sent",
     .dropped = 1},
    {.name = "RepSent_Rtu_UnknownCommId",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad =
         [](const Conn& c) {
             Rtu m = rtu_to_passive(c);
             m.remote_comm_id = ~c.passive_comm();
             return forge(m);
         },
     .after = "rep-sent",
     .dropped = 1},
    {.name = "RepSent_Rtu_FromAnotherAddress",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad = [](const Conn& c) { return forge(rtu_to_passive(c)); },
     .source = Source::kStranger,
     .after = "rep-sent",
     .dropped = 1},
    {.name = "RepSent_Rtu_WrongRemoteCommId",
     .progress = Progress::kRepSent,
     .side = Side::kPassive,
     .before = "rep-sent",
     .mad =
         [](const Conn& c) {
             Rtu m = rtu_to_passive(c);
             m.local_comm_id += 0x100;
             return forge(m);
         },
     .after = "rep-sent",
     .dropped = 1},
    {.name = "ReqSent_Rej_UnknownCommId",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_active(c, RejectReason::kConsumerDefined, Answered::kReq);
             m.remote_comm_id = ~c.active_comm();
             return forge(m);
         },
     .after = "req-sent",
     .dropped = 1},
    {.name = "ReqSent_Rej_FromAnotherAddress",
     .progress = Progress::kReqSent,
     .side = Side::kActive,
     .before = "req-sent",
     .mad =
         [](const Conn& c) {
             return forge(rej_to_active(c, RejectReason::kConsumerDefined, Answered::kReq));
         },
     .source = Source::kStranger,
     .after = "req-sent",
     .dropped = 1},
    {.name = "RepDelivered_Rej_WrongRemoteCommId",
     .progress = Progress::kRepDelivered,
     .side = Side::kActive,
     .before = "mra-rep-sent",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_active(c, RejectReason::kConsumerDefined, Answered::kOther);
             m.local_comm_id += 0x100;
             return forge(m);
         },
     .after = "mra-rep-sent",
     .dropped = 1},
    // cm_dreq_handler answers a DREQ it cannot match with a DREP
    // (cm_issue_drep: the DREQ's comm IDs swapped), and changes nothing.
    {.name = "Established_Dreq_UnknownCommId_IsAnsweredStatelessly",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Dreq m = dreq_to_passive(c);
             m.remote_comm_id = ~c.passive_comm();
             return forge(m);
         },
     .reply = Attribute::kDrep,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Drep& drep = std::get<Drep>(m);
             EXPECT_EQ(drep.local_comm_id, ~c.passive_comm());
             EXPECT_EQ(drep.remote_comm_id, c.active_comm());
         },
     .after = "established",
     .dropped = std::nullopt},
    {.name = "Established_Dreq_FromAnotherAddress",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad = [](const Conn& c) { return forge(dreq_to_passive(c)); },
     .source = Source::kStranger,
     .after = "established",
     .dropped = 1},
    {.name = "Established_Dreq_WrongRemoteCommId_IsAnsweredStatelessly",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Dreq m = dreq_to_passive(c);
             m.local_comm_id += 0x100;
             return forge(m);
         },
     .reply = Attribute::kDrep,
     .check_reply =
         [](const Conn& c, const Message& m) {
             const Drep& drep = std::get<Drep>(m);
             EXPECT_EQ(drep.local_comm_id, c.passive_comm());
             EXPECT_EQ(drep.remote_comm_id, c.active_comm() + 0x100);
         },
     .after = "established",
     .dropped = std::nullopt},
    {.name = "Established_Dreq_WrongQpn",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Dreq m = dreq_to_passive(c);
             m.remote_qpn_eecn = kPassiveQpn + 1;
             return forge(m);
         },
     .after = "established",
     .dropped = 1},
    {.name = "DreqSent_Drep_UnknownCommId",
     .progress = Progress::kDreqSent,
     .side = Side::kActive,
     .before = "dreq-sent",
     .mad =
         [](const Conn& c) {
             Drep m = drep_to_active(c);
             m.remote_comm_id = ~c.active_comm();
             return forge(m);
         },
     .after = "dreq-sent",
     .dropped = 1},
    {.name = "DreqSent_Drep_FromAnotherAddress",
     .progress = Progress::kDreqSent,
     .side = Side::kActive,
     .before = "dreq-sent",
     .mad = [](const Conn& c) { return forge(drep_to_active(c)); },
     .source = Source::kStranger,
     .after = "dreq-sent",
     .dropped = 1},
    {.name = "DreqSent_Drep_WrongRemoteCommId",
     .progress = Progress::kDreqSent,
     .side = Side::kActive,
     .before = "dreq-sent",
     .mad =
         [](const Conn& c) {
             Drep m = drep_to_active(c);
             m.local_comm_id += 0x100;
             return forge(m);
         },
     .after = "dreq-sent",
     .dropped = 1},
    // A forger who learnt the client's comm ID names only it, from the
    // client's address: once tore down the live server. The kernel takes a
    // REJ without our comm ID only for a timeout with the peer's CA GUID.
    {.name = "Established_RejNamingOnlyThePeer_IsDropped",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_passive(c, RejectReason::kConsumerDefined, Answered::kOther);
             m.remote_comm_id = 0;
             return forge(m);
         },
     .after = "established",
     .dropped = 1},
    {.name = "Established_RejTimeoutWithoutThePeersGuid_IsDropped",
     .progress = Progress::kEstablished,
     .side = Side::kPassive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_passive(c, RejectReason::kTimeout, Answered::kOther);
             m.remote_comm_id = 0;
             m.reject_info_length = 8;
             const uint64_t guid = htobe64(0x0123456789abcdefull);
             memcpy(m.ari.data(), &guid, sizeof(guid));
             return forge(m);
         },
     .after = "established",
     .dropped = 1},
    {.name = "ReqDelivered_RejTimeoutWithoutGuid_IsDropped",
     .progress = Progress::kReqDelivered,
     .side = Side::kPassive,
     .before = "mra-req-sent",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_passive(c, RejectReason::kTimeout, Answered::kOther);
             m.remote_comm_id = 0;
             return forge(m);
         },
     .after = "mra-req-sent",
     .dropped = 1},
    // "A REJ of your REQ" names our comm ID alone only while the peer's is
    // unknown; once the REP brought it, the REJ must carry it.
    {.name = "Established_RejOfReqNamingOnlyUs_IsDropped",
     .progress = Progress::kEstablished,
     .side = Side::kActive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Rej m = rej_to_active(c, RejectReason::kConsumerDefined, Answered::kReq);
             m.local_comm_id = kForgedCommId;
             return forge(m);
         },
     .after = "established",
     .dropped = 1},
    {.name = "Established_MraWithoutThePeersCommId_IsDropped",
     .progress = Progress::kEstablished,
     .side = Side::kActive,
     .before = "established",
     .mad =
         [](const Conn& c) {
             Mra m;
             m.local_comm_id = kForgedCommId;
             m.remote_comm_id = c.active_comm();
             m.message_mraed = Answered::kReq;
             return forge(m);
         },
     .after = "established",
     .dropped = 1},
};

class CmTransition : public CmStateMachine, public ::testing::WithParamInterface<Transition> {};

TEST_P(CmTransition, ArrivingMad) {
    const Transition& row = GetParam();
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(row.progress, c));
    expect_no_events(*active_ch_);
    expect_no_events(*passive_ch_);

    const bool active = row.side == Side::kActive;
    Channel& channel = active ? *active_ch_ : *passive_ch_;
    Channel& other = active ? *passive_ch_ : *active_ch_;
    Device& device = active ? active_dev() : passive_dev();
    const uint32_t handle = active ? c.active : c.passive;
    const wire::IpAddress peer_ip = active ? kPassiveIp : kActiveIp;
    ASSERT_EQ(cm_state(handle), row.before);

    const uint64_t dropped = device.stats().cm_mads_dropped;
    const uint64_t received = device.stats().cm_mads_rcvd;
    inject(device, row.source == Source::kPeer ? peer_ip : kStrangerIp, row.mad(c));
    EXPECT_EQ(device.stats().cm_mads_rcvd, received + 1);

    std::vector<Sent> sent = take_sent();
    if (row.reply) {
        ASSERT_EQ(sent.size(), 1u) << "expected a " << name(*row.reply) << " in answer";
        EXPECT_EQ(sent[0].from, &device);
        EXPECT_EQ(sent[0].dest, peer_ip);
        ASSERT_EQ(sent[0].mad.header.attribute, *row.reply)
            << "answered with " << name(sent[0].mad.header.attribute);
        if (row.check_reply) {
            row.check_reply(c, sent[0].mad.message);
        }
    } else {
        for (const Sent& s : sent) {
            ADD_FAILURE() << "answered with " << name(s.mad.header.attribute);
        }
    }

    std::vector<rdma_ucm_event_resp> events = take_events(channel);
    if (row.event) {
        ASSERT_EQ(events.size(), 1u) << "expected event " << *row.event;
        EXPECT_EQ(events[0].event, *row.event);
        EXPECT_EQ(events[0].id, handle);
        EXPECT_EQ(events[0].status, row.status);
        if (row.check_event) {
            row.check_event(events[0]);
        }
    } else {
        for (const auto& e : events) {
            ADD_FAILURE() << "reported event " << e.event << " status " << int32_t(e.status);
        }
    }
    expect_no_events(other);

    EXPECT_EQ(cm_state(handle), row.after);
    if (row.dropped) {
        EXPECT_EQ(device.stats().cm_mads_dropped, dropped + *row.dropped);
    }
}

INSTANTIATE_TEST_SUITE_P(Rows, CmTransition, ::testing::ValuesIn(kTransitions),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- what is not a CM MAD ------------------------------------------------------

struct Malformed {
    const char* name;
    void (*spoil)(std::vector<uint8_t>& mad);
};

const Malformed kMalformed[] = {
    {"Truncated", [](std::vector<uint8_t>& m) { m.resize(200); }},
    {"Empty", [](std::vector<uint8_t>& m) { m.clear(); }},
    {"BaseVersion2", [](std::vector<uint8_t>& m) { m[0] = 2; }},
    {"SubnetManagementClass", [](std::vector<uint8_t>& m) { m[1] = 0x01; }},
    {"ClassVersion1", [](std::vector<uint8_t>& m) { m[2] = 1; }},
    {"MethodGet", [](std::vector<uint8_t>& m) { m[3] = 0x01; }},
    {"UnknownAttribute", [](std::vector<uint8_t>& m) { m[16] = 0x00, m[17] = 0x33; }},
    {"Lap", [](std::vector<uint8_t>& m) { m[16] = 0x00, m[17] = 0x19; }},
};

class CmMalformed : public CmStateMachine, public ::testing::WithParamInterface<Malformed> {};

// A DREQ that would disconnect the active, spoilt: dropped, nothing changes.
TEST_P(CmMalformed, IsDropped) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c));
    const auto encoded = encode(0x42, dreq_to_active(c));
    std::vector<uint8_t> mad(256);
    memcpy(mad.data(), encoded.data(), mad.size());
    GetParam().spoil(mad);
    const uint64_t dropped = active_dev().stats().cm_mads_dropped;
    cm_->receive_mad(active_dev(), kPassiveIp, kActiveIp, mad);
    EXPECT_EQ(active_dev().stats().cm_mads_dropped, dropped + 1);
    expect_nothing_sent();
    expect_no_events(*active_ch_);
    EXPECT_EQ(cm_state(c.active), "established");
}

INSTANTIATE_TEST_SUITE_P(Rows, CmMalformed, ::testing::ValuesIn(kMalformed),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// The unspoilt DREQ does disconnect: the rows above test the spoiling.
TEST_F(CmStateMachine, UnspoiltDreqOfMalformedRowsDisconnects) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c));
    const auto encoded = encode(0x42, dreq_to_active(c));
    cm_->receive_mad(active_dev(), kPassiveIp, kActiveIp,
                     std::span(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()));
    take_event(*active_ch_, RDMA_CM_EVENT_DISCONNECTED);
}

// ---- refusals --------------------------------------------------------------------

// The program's REJECT: REJ 28 with its private data, REJECTED on the active.
TEST_F(CmStateMachine, RejectSendsConsumerRejWithPrivateData) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kReqDelivered, c));
    const std::vector<uint8_t> data = bytes_of("go away");
    ASSERT_TRUE(cm_->reject(id_of(*passive_ch_, c.passive), data, 0));
    Sent rej;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kRej, rej));
    const Rej& m = std::get<Rej>(rej.mad.message);
    EXPECT_EQ(m.reason, RejectReason::kConsumerDefined);
    EXPECT_EQ(m.message_rejected, Answered::kReq);
    EXPECT_EQ(m.remote_comm_id, c.active_comm());
    EXPECT_NE(m.local_comm_id, 0u);
    EXPECT_EQ(text_at(m.private_data.data(), 7), "go away");

    ASSERT_NO_FATAL_FAILURE(deliver(rej));
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_REJECTED, e));
    EXPECT_EQ(e.id, c.active);
    EXPECT_EQ(e.status, 28u);
    EXPECT_EQ(e.param.conn.private_data_len, 148);
    EXPECT_EQ(text_at(e.param.conn.private_data, 7), "go away");
    EXPECT_EQ(cm_state(c.active), "idle");
    expect_nothing_sent();
}

// cm_req_handler: no listener, REJ "invalid service ID" (8) in answer.
TEST_F(CmStateMachine, ReqToPortNobodyListensOnIsRejectedWith8) {
    listen_on(kPassiveIp, kPort, RDMA_PS_TCP);  // another port
    const uint32_t active = resolved(RDMA_PS_TCP, kNobodyPort);
    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, active), connect_param()));
    Sent req, rej;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, req));
    const size_t ids = id_count();
    ASSERT_NO_FATAL_FAILURE(deliver(req));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kRej, rej));
    EXPECT_EQ(rej.from, &passive_dev());
    EXPECT_EQ(rej.dest, kActiveIp);
    EXPECT_EQ(rej.mad.header.transaction_id, req.mad.header.transaction_id);
    const Rej& m = std::get<Rej>(rej.mad.message);
    EXPECT_EQ(m.reason, RejectReason::kInvalidServiceId);
    EXPECT_EQ(m.message_rejected, Answered::kReq);
    EXPECT_EQ(m.remote_comm_id, std::get<Req>(req.mad.message).local_comm_id);
    EXPECT_EQ(m.local_comm_id, 0u);
    expect_no_events(*passive_ch_);
    EXPECT_EQ(id_count(), ids);

    ASSERT_NO_FATAL_FAILURE(deliver(rej));
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_REJECTED, e));
    EXPECT_EQ(e.status, 8u);
    EXPECT_EQ(cm_state(active), "idle");
}

// ucma's backlog: a request beyond it is neither answered nor reported
// (cm_destroy_id with -ENOMEM: "do not reject to allow future retries"); the
// REQ sent again once the program took a request gets through.
TEST_F(CmStateMachine, FullBacklogLeavesTheReqUnansweredUntilRetried) {
    const uint32_t listener = listen_on(kPassiveIp, kPort, RDMA_PS_TCP, 1);
    const uint32_t first = resolved(RDMA_PS_TCP, kPort);
    const uint32_t second = resolved(RDMA_PS_TCP, kPort);
    Sent req1, req2;
    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, first), connect_param()));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, req1));
    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, second), connect_param()));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, req2));

    ASSERT_NO_FATAL_FAILURE(deliver(req1));
    const size_t ids = id_count();
    ASSERT_NO_FATAL_FAILURE(deliver(req2));
    expect_nothing_sent();
    EXPECT_EQ(id_count(), ids) << "no ID for the request the backlog has no room for";
    std::vector<rdma_ucm_event_resp> events = take_events(*passive_ch_);  // takes the first
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].event, uint32_t(RDMA_CM_EVENT_CONNECT_REQUEST));
    EXPECT_EQ(cm_state(second), "req-sent");

    ASSERT_NO_FATAL_FAILURE(deliver(req2));  // its retry
    expect_nothing_sent();
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST, e));
    EXPECT_NE(e.id, events[0].id);
    EXPECT_NE(e.id, listener);
    EXPECT_EQ(cm_state(e.id), "mra-req-sent");
}

// ---- disconnecting ------------------------------------------------------------------

TEST_F(CmStateMachine, DisconnectBothSidesThroughTimewait) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kEstablished, c));

    ASSERT_TRUE(cm_->disconnect(id_of(*active_ch_, c.active)));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kDreq, c.dreq));
    const Dreq& dreq = std::get<Dreq>(c.dreq.mad.message);
    EXPECT_EQ(dreq.local_comm_id, c.active_comm());
    EXPECT_EQ(dreq.remote_comm_id, c.passive_comm());
    EXPECT_EQ(dreq.remote_qpn_eecn, kPassiveQpn);
    EXPECT_EQ(cm_state(c.active), "dreq-sent");
    expect_no_events(*active_ch_);

    ASSERT_NO_FATAL_FAILURE(deliver(c.dreq));
    expect_nothing_sent();  // the DREP is the program's
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_DISCONNECTED, e));
    EXPECT_EQ(e.id, c.passive);
    EXPECT_EQ(e.uid, kAcceptUid);
    EXPECT_EQ(cm_state(c.passive), "dreq-rcvd");

    ASSERT_TRUE(cm_->disconnect(id_of(*passive_ch_, c.passive)));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kDrep, c.drep));
    const Drep& drep = std::get<Drep>(c.drep.mad.message);
    EXPECT_EQ(drep.local_comm_id, c.passive_comm());
    EXPECT_EQ(drep.remote_comm_id, c.active_comm());
    EXPECT_EQ(cm_state(c.passive), "timewait");

    ASSERT_NO_FATAL_FAILURE(deliver(c.drep));
    expect_nothing_sent();
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_DISCONNECTED, e));
    EXPECT_EQ(e.id, c.active);
    EXPECT_EQ(cm_state(c.active), "timewait");
    const auto start = Clock::now();

    // Timewait is the ack timeout's 4.096 µs * 2^17: about half a second.
    run_for(milliseconds(200));
    expect_no_events(*active_ch_);
    expect_no_events(*passive_ch_);
    std::vector<rdma_ucm_event_resp> active_events, passive_events;
    while ((active_events.empty() || passive_events.empty()) &&
           Clock::now() - start < milliseconds(3000)) {
        run_for(milliseconds(50));
        for (const auto& ev : take_events(*active_ch_)) {
            active_events.push_back(ev);
        }
        for (const auto& ev : take_events(*passive_ch_)) {
            passive_events.push_back(ev);
        }
    }
    EXPECT_GE(Clock::now() - start, milliseconds(450));
    ASSERT_EQ(active_events.size(), 1u);
    ASSERT_EQ(passive_events.size(), 1u);
    EXPECT_EQ(active_events[0].event, uint32_t(RDMA_CM_EVENT_TIMEWAIT_EXIT));
    EXPECT_EQ(active_events[0].id, c.active);
    EXPECT_EQ(passive_events[0].event, uint32_t(RDMA_CM_EVENT_TIMEWAIT_EXIT));
    EXPECT_EQ(passive_events[0].id, c.passive);
    EXPECT_EQ(cm_state(c.active), "idle");
    EXPECT_EQ(cm_state(c.passive), "idle");
    expect_nothing_sent();
}

// cm_dreq_handler answers a DREQ in TIMEWAIT with the DREP again and leaves
// the timewait timer alone: the exit stays ~512 ms after entering it.
TEST_F(CmStateMachine, DreqAgainInTimewaitDoesNotExtendIt) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kDrepSent, c));
    const auto start = Clock::now();  // the passive entered timewait
    run_for(milliseconds(300));
    expect_no_events(*passive_ch_);
    ASSERT_NO_FATAL_FAILURE(deliver(c.dreq));
    Sent drep;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kDrep, drep));
    const auto left =
        milliseconds(650) - std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    run_for(std::max(left, milliseconds(0)));
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT, e));
    EXPECT_EQ(e.id, c.passive);
}

// ---- rdma_destroy_id ------------------------------------------------------------------

struct Destroy {
    const char* name;
    Progress progress;
    Side side;  // whose ID is destroyed
    const char* before;
    std::optional<Attribute> sent;  // what goes to the peer, if anything
    void (*check)(const Conn&, const Device& from, const Message&) = nullptr;
    // What the peer reports on receiving it (nullopt: not delivered).
    std::optional<uint32_t> peer_event = std::nullopt;
    uint32_t peer_status = 0;
};

void PrintTo(const Destroy& row, std::ostream* os) {
    *os << row.name;
}

const Destroy kDestroys[] = {
    {"EstablishedActive_SendsDreq", Progress::kEstablished, Side::kActive, "established",
     Attribute::kDreq,
     [](const Conn& c, const Device&, const Message& m) {
         const Dreq& dreq = std::get<Dreq>(m);
         EXPECT_EQ(dreq.local_comm_id, c.active_comm());
         EXPECT_EQ(dreq.remote_comm_id, c.passive_comm());
         EXPECT_EQ(dreq.remote_qpn_eecn, kPassiveQpn);
     },
     RDMA_CM_EVENT_DISCONNECTED},
    {"EstablishedPassive_SendsDreq", Progress::kEstablished, Side::kPassive, "established",
     Attribute::kDreq,
     [](const Conn& c, const Device&, const Message& m) {
         const Dreq& dreq = std::get<Dreq>(m);
         EXPECT_EQ(dreq.local_comm_id, c.passive_comm());
         EXPECT_EQ(dreq.remote_comm_id, c.active_comm());
         EXPECT_EQ(dreq.remote_qpn_eecn, kActiveQpn);
     },
     RDMA_CM_EVENT_DISCONNECTED},
    {"RequestNotAccepted_SendsRej28", Progress::kReqDelivered, Side::kPassive, "mra-req-sent",
     Attribute::kRej,
     [](const Conn& c, const Device&, const Message& m) {
         const Rej& rej = std::get<Rej>(m);
         EXPECT_EQ(rej.reason, RejectReason::kConsumerDefined);
         EXPECT_EQ(rej.message_rejected, Answered::kReq);
         EXPECT_EQ(rej.remote_comm_id, c.active_comm());
     },
     RDMA_CM_EVENT_REJECTED, 28},
    {"ResponseNotAccepted_SendsRej28", Progress::kRepDelivered, Side::kActive, "mra-rep-sent",
     Attribute::kRej,
     [](const Conn& c, const Device&, const Message& m) {
         const Rej& rej = std::get<Rej>(m);
         EXPECT_EQ(rej.reason, RejectReason::kConsumerDefined);
         EXPECT_EQ(rej.message_rejected, Answered::kRep);
         EXPECT_EQ(rej.local_comm_id, c.active_comm());
         EXPECT_EQ(rej.remote_comm_id, c.passive_comm());
     },
     RDMA_CM_EVENT_REJECTED, 28},
    // cm_destroy_id in REP_SENT: REJ 28; cm_format_rej names no message
    // rejected in that state (CM_MSG_RESPONSE_OTHER).
    {"RepSentPassive_SendsRej28", Progress::kRepSent, Side::kPassive, "rep-sent", Attribute::kRej,
     [](const Conn& c, const Device&, const Message& m) {
         const Rej& rej = std::get<Rej>(m);
         EXPECT_EQ(rej.reason, RejectReason::kConsumerDefined);
         EXPECT_EQ(rej.message_rejected, Answered::kOther);
         EXPECT_EQ(rej.local_comm_id, c.passive_comm());
         EXPECT_EQ(rej.remote_comm_id, c.active_comm());
     }},
    // cm_destroy_id in REQ_SENT: REJ "timeout" whose ARI is the local CA GUID,
    // which is how the passive's cm_acquire_rejected_id finds the connection.
    {"ReqSentActive_SendsRejTimeoutWithGuid", Progress::kReqSent, Side::kActive, "req-sent",
     Attribute::kRej,
     [](const Conn& c, const Device& from, const Message& m) {
         const Rej& rej = std::get<Rej>(m);
         EXPECT_EQ(rej.reason, RejectReason::kTimeout);
         EXPECT_EQ(rej.local_comm_id, c.active_comm());
         EXPECT_EQ(rej.message_rejected, Answered::kOther);
         EXPECT_EQ(rej.reject_info_length, 8);
         const uint64_t guid = htobe64(from.node_guid());
         EXPECT_EQ(memcmp(rej.ari.data(), &guid, sizeof(guid)), 0);
     }},
    {"DreqReceived_SendsDrep", Progress::kDreqDelivered, Side::kPassive, "dreq-rcvd",
     Attribute::kDrep,
     [](const Conn& c, const Device&, const Message& m) {
         const Drep& drep = std::get<Drep>(m);
         EXPECT_EQ(drep.local_comm_id, c.passive_comm());
         EXPECT_EQ(drep.remote_comm_id, c.active_comm());
     },
     RDMA_CM_EVENT_DISCONNECTED},
    {"DreqSent_SendsNothing", Progress::kDreqSent, Side::kActive, "dreq-sent", std::nullopt},
    {"Timewait_SendsNothing", Progress::kDrepDelivered, Side::kActive, "timewait", std::nullopt},
};

class CmDestroy : public CmStateMachine, public ::testing::WithParamInterface<Destroy> {};

TEST_P(CmDestroy, TellsThePeer) {
    const Destroy& row = GetParam();
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(row.progress, c));
    const bool active = row.side == Side::kActive;
    Channel& channel = active ? *active_ch_ : *passive_ch_;
    Channel& peer_channel = active ? *passive_ch_ : *active_ch_;
    Device& device = active ? active_dev() : passive_dev();
    const uint32_t handle = active ? c.active : c.passive;
    const uint32_t peer_handle = active ? c.passive : c.active;
    ASSERT_EQ(cm_state(handle), row.before);

    uint32_t events_reported = 0;
    ASSERT_TRUE(cm_->destroy_id(channel, handle, events_reported));
    EXPECT_EQ(cm_state(handle), "gone");
    std::vector<Sent> sent = take_sent();
    if (!row.sent) {
        for (const Sent& s : sent) {
            ADD_FAILURE() << "sent " << name(s.mad.header.attribute);
        }
        return;
    }
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].from, &device);
    EXPECT_EQ(sent[0].dest, active ? kPassiveIp : kActiveIp);
    ASSERT_EQ(sent[0].mad.header.attribute, *row.sent)
        << "sent " << name(sent[0].mad.header.attribute);
    row.check(c, device, sent[0].mad.message);
    if (row.peer_event) {
        ASSERT_NO_FATAL_FAILURE(deliver(sent[0]));
        rdma_ucm_event_resp e;
        ASSERT_NO_FATAL_FAILURE(take_event(peer_channel, *row.peer_event, e));
        EXPECT_EQ(e.id, peer_handle);
        EXPECT_EQ(e.status, row.peer_status);
    }
}

INSTANTIATE_TEST_SUITE_P(Rows, CmDestroy, ::testing::ValuesIn(kDestroys),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- SIDR (UD) --------------------------------------------------------------------------

TEST_F(CmStateMachine, SidrRequestToUdListenerIsAnsweredOnAccept) {
    const uint32_t listener = listen_on(kPassiveIp, kPort, RDMA_PS_UDP);
    const uint32_t active = resolved(RDMA_PS_UDP, kPort);
    ConnParam connect;
    connect.qp_num = kActiveQpn;
    connect.private_data = bytes_of("sidr");
    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, active), connect));
    Sent req;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kSidrReq, req));
    const SidrReq& m = std::get<SidrReq>(req.mad.message);
    EXPECT_EQ(m.service_id, service_id(PortSpace::kUdp, kPort));
    EXPECT_EQ(text_at(m.private_data.data() + kIpHeader, 4), "sidr");
    EXPECT_EQ(cm_state(active), "sidr-req-sent");

    ASSERT_NO_FATAL_FAILURE(deliver(req));
    expect_nothing_sent();
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST, e));
    EXPECT_NE(e.id, listener);
    EXPECT_EQ(e.uid, kListenerUid);
    EXPECT_EQ(e.param.ud.private_data_len, 216 - kIpHeader);  // cma_req_handler
    EXPECT_EQ(text_at(e.param.ud.private_data, 4), "sidr");
    const uint32_t request = e.id;

    ConnParam accept;
    accept.qp_num = kPassiveQpn;
    accept.qkey = 0x1111;  // ucma passes no qkey for AF_INET: RDMA_UDP_QKEY it is
    accept.private_data = bytes_of("ok");
    ASSERT_TRUE(cm_->accept(id_of(*passive_ch_, request), kAcceptUid, &accept));
    Sent rep;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kSidrRep, rep));
    EXPECT_EQ(rep.dest, kActiveIp);
    const SidrRep& r = std::get<SidrRep>(rep.mad.message);
    EXPECT_EQ(r.request_id, m.request_id);
    EXPECT_EQ(r.status, SidrStatus::kSuccess);
    EXPECT_EQ(r.qpn, kPassiveQpn);
    EXPECT_EQ(r.qkey, kUdpQkey);
    EXPECT_EQ(r.service_id, service_id(PortSpace::kUdp, kPort));
    EXPECT_EQ(text_at(r.private_data.data(), 2), "ok");

    ASSERT_NO_FATAL_FAILURE(deliver(rep));
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_ESTABLISHED, e));
    EXPECT_EQ(e.id, active);
    EXPECT_EQ(e.param.ud.qp_num, kPassiveQpn);
    EXPECT_EQ(e.param.ud.qkey, kUdpQkey);
    EXPECT_EQ(text_at(e.param.ud.private_data, 2), "ok");
    EXPECT_EQ(wire::IpAddress(e.param.ud.ah_attr.grh.dgid), kPassiveIp);
    expect_nothing_sent();
}

// cm_sidr_req_handler: no listener for the Service ID, SIDR_REP "unsupported".
TEST_F(CmStateMachine, SidrRequestToNoListenerIsUnsupported) {
    listen_on(kPassiveIp, kPort, RDMA_PS_TCP);  // the port, but in another port space
    const uint32_t active = resolved(RDMA_PS_UDP, kPort);
    ConnParam connect;
    connect.qp_num = kActiveQpn;
    ASSERT_TRUE(cm_->connect(id_of(*active_ch_, active), connect));
    Sent req, rep;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kSidrReq, req));
    ASSERT_NO_FATAL_FAILURE(deliver(req));
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kSidrRep, rep));
    EXPECT_EQ(rep.dest, kActiveIp);
    const SidrRep& r = std::get<SidrRep>(rep.mad.message);
    EXPECT_EQ(r.status, SidrStatus::kUnsupported);
    EXPECT_EQ(r.request_id, std::get<SidrReq>(req.mad.message).request_id);
    expect_no_events(*passive_ch_);

    ASSERT_NO_FATAL_FAILURE(deliver(rep));
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_UNREACHABLE, e));
    EXPECT_EQ(e.status, 1u);
}

// The channel's descriptor is readable exactly while events wait, whatever
// the program did to it: a byte it took itself is put back at the next
// change, and one left over is taken back when the last event goes.
TEST_F(CmStateMachine, ChannelIsReadableExactlyWhileEventsWait) {
    uint32_t handle = 0;
    ASSERT_TRUE(cm_->create_id(*active_ch_, kActiveUid, RDMA_PS_TCP, 0, handle));
    EXPECT_FALSE(readable(0));
    Id& id = id_of(*active_ch_, handle);
    const Address src = make_address(AF_INET, kActiveIp, 0);
    ASSERT_TRUE(cm_->resolve_addr(id, &src, make_address(AF_INET, kPassiveIp, kPort)));
    EXPECT_TRUE(readable(0));
    // The program reads its descriptor itself: the daemon does not wait on it.
    char byte;
    ASSERT_EQ(read(program_ends_[0].get(), &byte, 1), 1);
    EXPECT_FALSE(readable(0));
    ASSERT_TRUE(cm_->resolve_route(id));
    EXPECT_TRUE(readable(0)) << "the next event shows the channel readable again";
    rdma_ucm_event_resp resp{};
    ASSERT_TRUE(cm_->get_event(*active_ch_, resp));
    EXPECT_TRUE(readable(0));
    ASSERT_TRUE(cm_->get_event(*active_ch_, resp));
    EXPECT_FALSE(readable(0));
    // The program takes the byte, then destroys the ID whose event it was
    // (the daemon once waited here for ever).
    uint32_t other = 0;
    ASSERT_TRUE(cm_->create_id(*active_ch_, kActiveUid, RDMA_PS_TCP, 0, other));
    ASSERT_TRUE(cm_->resolve_addr(id_of(*active_ch_, other), &src,
                                  make_address(AF_INET, kPassiveIp, kPort)));
    ASSERT_EQ(read(program_ends_[0].get(), &byte, 1), 1);
    uint32_t reported = 0;
    ASSERT_TRUE(cm_->destroy_id(*active_ch_, other, reported));
    EXPECT_FALSE(readable(0)) << "its event went with it";
    EXPECT_EQ(cm_->get_event(*active_ch_, resp).error, EAGAIN);
    EXPECT_FALSE(readable(0));
}

// Communication IDs are drawn at random: a REP or REQ one connection shows
// tells nothing of the next (the kernel XORs a random operand; a counter
// once gave a forger every victim's ID).
TEST_F(CmStateMachine, CommIdsAreNotSequential) {
    listen_on(kPassiveIp, kPort, RDMA_PS_TCP);
    std::vector<uint32_t> comm_ids;
    for (int i = 0; i < 32; ++i) {
        const uint32_t active = resolved(RDMA_PS_TCP, kPort);
        ASSERT_TRUE(cm_->connect(id_of(*active_ch_, active), connect_param()));
        Sent req;
        ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kReq, req));
        comm_ids.push_back(std::get<Req>(req.mad.message).local_comm_id);
    }
    int near = 0;
    for (size_t i = 1; i < comm_ids.size(); ++i) {
        const uint32_t gap = comm_ids[i] - comm_ids[i - 1];
        near += gap < 256 || gap > ~0u - 256;
    }
    EXPECT_EQ(near, 0) << "consecutive communication IDs lie close together";
}

// cm_req_handler: a REQ whose path MTU is none of IBA's is refused at once
// (REJ "invalid MTU"), not handed to a program whose rdma_accept would fail.
TEST_F(CmStateMachine, ReqWithPathMtuZeroIsRejectedWith26) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(drive(Progress::kReqSent, c));
    Mad mad = c.req.mad;
    std::get<Req>(mad.message).path_mtu = 0;
    inject(passive_dev(), kActiveIp, mad);
    Sent rej;
    ASSERT_NO_FATAL_FAILURE(take_one(Attribute::kRej, rej));
    const Rej& r = std::get<Rej>(rej.mad.message);
    EXPECT_EQ(r.reason, RejectReason::kInvalidMtu);
    EXPECT_EQ(r.remote_comm_id, c.active_comm());
    EXPECT_EQ(r.message_rejected, Answered::kReq);
    expect_no_events(*passive_ch_);
    ASSERT_NO_FATAL_FAILURE(deliver(rej));
    rdma_ucm_event_resp e;
    ASSERT_NO_FATAL_FAILURE(take_event(*active_ch_, RDMA_CM_EVENT_REJECTED, e));
    EXPECT_EQ(e.status, 26u);
}

}  // namespace
}  // namespace uroce::cm
