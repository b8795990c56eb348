// rdma_cm through the installed librdmacm against a real uroced: the bridge
// answers /dev/infiniband/rdma_cm, and the daemon's connection manager
// connects IDs with IB CM MADs between uroce0 (127.0.0.1) and uroce1
// (127.0.0.2). Servers bind 127.0.0.2; clients resolve it, and the routing
// table gives them 127.0.0.1 (uroce0) as their source.
//
// What each test expects is what the kernel's rdma_cm (drivers/infiniband/
// core/cma.c, cm.c, ucma.c) reports for RoCE, as librdmacm hands it on.
// Every event is awaited on a non-blocking event channel with a deadline, so
// that a missing event fails the test instead of hanging it.
//
// Built twice, as the rc_* tests: MADs between the daemon's own devices
// directly, and across UDP (--no-shortcut).
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/ib.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "rc_pair.h"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Address and route resolution are local, and a MAD exchange without loss
// takes milliseconds: this is only reached when an event is missing.
constexpr auto kEventTimeout = 5s;
// TIMEWAIT_EXIT follows DISCONNECTED by the timewait, cm.c's
// cm_convert_to_ms(av.timeout): 4.096 us * 2^17, about half a second.
constexpr auto kTimewaitTimeout = 3s;
// A MAD lost is sent again after the time the IB CM waits for an answer
// (about 4.6 s for a REQ, 4.3 s for a REP), up to 15 times: the whole
// budget of one exchange (REQ then REP) is a little over 70 s.
constexpr auto kLossyTimeout = 75s;
constexpr int kResolveTimeoutMs = 2000;

constexpr const char* kServerIp = "127.0.0.2";  // uroce1
constexpr const char* kClientIp = "127.0.0.1";  // uroce0

// Private data as the kernel reports it: the whole field of the MAD, less
// rdma_cm's own header (struct cma_hdr, 36 bytes) in REQ and SIDR REQ.
constexpr int kCmaHeader = 36;
constexpr int kReqPrivateDataLen = 92 - kCmaHeader;       // IB_CM_REQ_PRIVATE_DATA_SIZE
constexpr int kRepPrivateDataLen = 196;                   // IB_CM_REP_PRIVATE_DATA_SIZE
constexpr int kRejPrivateDataLen = 148;                   // IB_CM_REJ_PRIVATE_DATA_SIZE
constexpr int kSidrReqPrivateDataLen = 216 - kCmaHeader;  // IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE
constexpr int kSidrRepPrivateDataLen = 136;               // IB_CM_SIDR_REP_PRIVATE_DATA_SIZE

// The status of RDMA_CM_EVENT_REJECTED: the IB CM's reject reason (ib_cm.h).
constexpr int kRejInvalidServiceId = 8;  // IB_CM_REJ_INVALID_SERVICE_ID
constexpr int kRejConsumerDefined = 28;  // IB_CM_REJ_CONSUMER_DEFINED
// The status of RDMA_CM_EVENT_UNREACHABLE after a SIDR_REP that refuses:
// the SIDR status itself (cma.c's cma_sidr_rep_handler).
constexpr int kSidrUnsupported = 1;        // IB_SIDR_UNSUPPORTED
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr size_t kGrh = 40;

// The end of uroced's log, for failure messages.
std::string daemon_log() {
    constexpr size_t kTail = 6000;
    std::string log = test_daemon().log();
    if (log.size() > kTail) {
        log = "...\n" + log.substr(log.size() - kTail);
    }
    return "\nuroced's log:\n" + log;
}

int remaining_ms(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(left.count(), 0));
}

// 0 when a librdmacm call succeeded, else its errno.
int errno_of(int result) {
    return result == 0 ? 0 : errno;
}

sockaddr_in ipv4(const char* ip, uint16_t port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    inet_pton(AF_INET, ip, &address.sin_addr);
    return address;
}

sockaddr* as_sockaddr(sockaddr_in& address) {
    return reinterpret_cast<sockaddr*>(&address);
}

std::string ip_of(const sockaddr* address) {
    if (!address || address->sa_family != AF_INET) {
        return "(not IPv4)";
    }
    char text[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
              sizeof(text));
    return text;
}

uint16_t port_of(const sockaddr* address) {
    return address && address->sa_family == AF_INET
               ? ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port)
               : 0;
}

std::string device_of(const rdma_cm_id* id) {
    return id && id->verbs ? ibv_get_device_name(id->verbs->device) : "(no device)";
}

// `bytes`, zero-filled to `size`: private data as the peer receives it.
std::vector<uint8_t> padded(std::vector<uint8_t> bytes, size_t size) {
    bytes.resize(size, 0);
    return bytes;
}

// ---- events ----------------------------------------------------------------

// An event, copied out of librdmacm's before it is acked.
struct Event {
    rdma_cm_event_type type{};
    int status = 0;
    rdma_cm_id* id = nullptr;
    rdma_cm_id* listen_id = nullptr;
    // param.conn, or param.ud for a UD ID's CONNECT_REQUEST and ESTABLISHED.
    int private_data_len = 0;
    std::vector<uint8_t> private_data;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint32_t qp_num = 0;
    uint32_t qkey = 0;
    ibv_ah_attr ah_attr{};
    bool matched = false;  // it is what expect_event waited for

    explicit operator bool() const { return matched; }
};

std::string describe(const Event& event) {
    return std::string(rdma_event_str(event.type)) + " (status " + std::to_string(event.status) +
           ")";
}

Event copy_of(const rdma_cm_event& event) {
    Event out;
    out.type = event.event;
    out.status = event.status;
    out.id = event.id;
    out.listen_id = event.listen_id;
    const bool ud = event.event == RDMA_CM_EVENT_MULTICAST_JOIN ||
                    (event.id && event.id->qp_type == IBV_QPT_UD &&
                     (event.event == RDMA_CM_EVENT_CONNECT_REQUEST ||
                      event.event == RDMA_CM_EVENT_ESTABLISHED));
    const void* data;
    if (ud) {
        const rdma_ud_param& ud_param = event.param.ud;
        data = ud_param.private_data;
        out.private_data_len = ud_param.private_data_len;
        out.qp_num = ud_param.qp_num;
        out.qkey = ud_param.qkey;
        out.ah_attr = ud_param.ah_attr;
    } else {
        const rdma_conn_param& conn = event.param.conn;
        data = conn.private_data;
        out.private_data_len = conn.private_data_len;
        out.responder_resources = conn.responder_resources;
        out.initiator_depth = conn.initiator_depth;
        out.qp_num = conn.qp_num;
    }
    if (data) {
        const auto* bytes = static_cast<const uint8_t*>(data);
        out.private_data.assign(bytes, bytes + out.private_data_len);
    }
    return out;
}

// The next event of `channel` (non-blocking), acked; nothing, with `why`,
// when none comes within `timeout` or librdmacm fails.
std::optional<Event> next_event(rdma_event_channel* channel, Clock::duration timeout,
                                std::string& why) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
        rdma_cm_event* event = nullptr;
        if (rdma_get_cm_event(channel, &event) == 0) {
            const Event copy = copy_of(*event);
            if (rdma_ack_cm_event(event) != 0) {
                why = std::string("rdma_ack_cm_event: ") + strerror(errno);
                return std::nullopt;
            }
            return copy;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            why = std::string("rdma_get_cm_event: ") + strerror(errno);
            return std::nullopt;
        }
        const int left = remaining_ms(deadline);
        if (left == 0) {
            why = "no event within " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                  " ms";
            return std::nullopt;
        }
        pollfd ready{channel->fd, POLLIN, 0};
        poll(&ready, 1, left);
    }
}

// The next event, if it is `type` with `status`; else nothing, with `why`.
// Usable without GoogleTest (in a child process).
std::optional<Event> wait_for(rdma_event_channel* channel, rdma_cm_event_type type,
                              Clock::duration timeout, int status, std::string& why) {
    std::optional<Event> event = next_event(channel, timeout, why);
    const std::string expected =
        std::string(rdma_event_str(type)) + " (status " + std::to_string(status) + ")";
    if (!event) {
        why = "waiting for " + expected + ": " + why;
        return std::nullopt;
    }
    if (event->type != type || event->status != status) {
        why = "expected " + expected + ", got " + describe(*event);
        return std::nullopt;
    }
    event->matched = true;
    return event;
}

// The next event of `channel` must be `type` with `status`, within
// `timeout`; it is acked. A test failure (with the daemon's log) otherwise,
// and an Event that converts to false.
Event expect_event(rdma_event_channel* channel, rdma_cm_event_type type,
                   Clock::duration timeout = kEventTimeout, int status = 0) {
    std::string why;
    std::optional<Event> event = wait_for(channel, type, timeout, status, why);
    if (!event) {
        ADD_FAILURE() << why << daemon_log();
        return {};
    }
    return *event;
}

// No event on `channel` for `quiet`; true, else a test failure naming the
// event that came.
bool expect_no_event(rdma_event_channel* channel, Clock::duration quiet, const std::string& why) {
    std::string ignored;
    if (std::optional<Event> event = next_event(channel, quiet, ignored)) {
        ADD_FAILURE() << why << ", but " << describe(*event) << " came" << daemon_log();
        return false;
    }
    return true;
}

rdma_event_channel* nonblocking_channel() {
    rdma_event_channel* channel = rdma_create_event_channel();
    if (channel) {
        const int flags = fcntl(channel->fd, F_GETFL);
        if (fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
            rdma_destroy_event_channel(channel);
            return nullptr;
        }
    }
    return channel;
}

// ---- one side of a connection ------------------------------------------------

// Registered memory, filled with a pattern.
struct Memory {
    std::vector<uint8_t> bytes;
    ibv_mr* mr = nullptr;

    uint64_t addr(size_t offset = 0) { return reinterpret_cast<uintptr_t>(bytes.data()) + offset; }
    ibv_sge sge(size_t offset, uint32_t length) { return {addr(offset), length, mr->lkey}; }
};

// An event channel with its IDs, and the verbs objects of their QPs. Goes
// in order: QPs and IDs, address handles, MRs, the PD, the channel.
class Side {
  public:
    explicit Side(std::string name) : name_(std::move(name)) {
        channel = nonblocking_channel();
        EXPECT_NE(channel, nullptr)
            << "rdma_create_event_channel: " << strerror(errno) << daemon_log();
    }
    ~Side() {
        for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
            release(*it);
        }
        for (ibv_ah* ah : ahs_) {
            EXPECT_EQ(ibv_destroy_ah(ah), 0);
        }
        for (auto& memory : memory_) {
            EXPECT_EQ(ibv_dereg_mr(memory->mr), 0);
        }
        if (pd_) {
            EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
        }
        if (channel) {
            rdma_destroy_event_channel(channel);
        }
    }
    Side(const Side&) = delete;
    Side& operator=(const Side&) = delete;

    rdma_cm_id* create_id(rdma_port_space ps = RDMA_PS_TCP) {
        rdma_cm_id* id = nullptr;
        if (!channel || rdma_create_id(channel, &id, nullptr, ps) != 0) {
            ADD_FAILURE() << name_ << ": rdma_create_id: " << strerror(errno) << daemon_log();
            return nullptr;
        }
        ids_.push_back(id);
        return id;
    }
    // The ID a connection request brought: this side destroys it.
    void adopt(rdma_cm_id* id) { ids_.push_back(id); }
    void destroy(rdma_cm_id* id) {
        std::erase(ids_, id);
        release(id);
        if (conn == id) {
            conn = nullptr;
        }
    }

    // The next event on this side's channel (see expect_event).
    Event expect(rdma_cm_event_type type, Clock::duration timeout = kEventTimeout, int status = 0) {
        SCOPED_TRACE("on the " + name_ + "'s event channel");
        return expect_event(channel, type, timeout, status);
    }

    // The side's PD, on the device of `id` (each side uses one device).
    ibv_pd* pd(const rdma_cm_id* id) {
        if (!pd_ && id->verbs) {
            pd_ = ibv_alloc_pd(id->verbs);
            EXPECT_NE(pd_, nullptr) << "ibv_alloc_pd: " << strerror(errno);
        }
        EXPECT_TRUE(pd_ && pd_->context == id->verbs) << name_ << ": IDs on more than one device";
        return pd_;
    }
    // A QP for `id`, through rdma_create_qp (which makes its CQs).
    bool create_qp(rdma_cm_id* id, ibv_qp_type type) {
        ibv_pd* pd = this->pd(id);
        if (!pd) {
            return false;
        }
        ibv_qp_init_attr attr{};
        attr.qp_type = type;
        attr.cap = {16, 16, 1, 1, 0};
        if (rdma_create_qp(id, pd, &attr) != 0) {
            ADD_FAILURE() << name_ << ": rdma_create_qp: " << strerror(errno) << daemon_log();
            return false;
        }
        return true;
    }
    // `size` bytes of pattern `seed` registered on the PD of `id`; null on failure.
    Memory* memory(const rdma_cm_id* id, size_t size, int access, uint32_t seed) {
        ibv_pd* pd = this->pd(id);
        if (!pd) {
            return nullptr;
        }
        auto memory = std::make_unique<Memory>();
        memory->bytes = pattern(seed, size);
        memory->mr = ibv_reg_mr(pd, memory->bytes.data(), size, access);
        if (!memory->mr) {
            ADD_FAILURE() << "ibv_reg_mr: " << strerror(errno);
            return nullptr;
        }
        memory_.push_back(std::move(memory));
        return memory_.back().get();
    }
    ibv_ah* create_ah(const rdma_cm_id* id, ibv_ah_attr& attr) {
        ibv_pd* pd = this->pd(id);
        ibv_ah* ah = pd ? ibv_create_ah(pd, &attr) : nullptr;
        if (ah) {
            ahs_.push_back(ah);
        }
        return ah;
    }

    rdma_event_channel* channel = nullptr;
    rdma_cm_id* conn = nullptr;  // the ID of this side's connection

  private:
    static void release(rdma_cm_id* id) {
        if (id->qp) {
            rdma_destroy_qp(id);
        }
        EXPECT_EQ(rdma_destroy_id(id), 0) << strerror(errno);
    }

    std::string name_;
    std::vector<rdma_cm_id*> ids_;
    std::vector<ibv_ah*> ahs_;
    std::vector<std::unique_ptr<Memory>> memory_;
    ibv_pd* pd_ = nullptr;
};

// An ID of `server` bound to the server address and listening; null, with a
// test failure, when it cannot.
rdma_cm_id* listen_on(Side& server, uint16_t port, int backlog = 8,
                      rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = server.create_id(ps);
    if (!id) {
        return nullptr;
    }
    sockaddr_in address = ipv4(kServerIp, port);
    if (rdma_bind_addr(id, as_sockaddr(address)) != 0) {
        ADD_FAILURE() << "rdma_bind_addr(" << kServerIp << ":" << port << "): " << strerror(errno)
                      << daemon_log();
        return nullptr;
    }
    if (rdma_listen(id, backlog) != 0) {
        ADD_FAILURE() << "rdma_listen: " << strerror(errno) << daemon_log();
        return nullptr;
    }
    return id;
}

// Resolves `address` (the server's unless given) and `port`, then the
// route, for `id`: each step reports its event.
bool resolve_id(Side& client, rdma_cm_id* id, uint16_t port, const char* address = kServerIp) {
    sockaddr_in destination = ipv4(address, port);
    if (rdma_resolve_addr(id, nullptr, as_sockaddr(destination), kResolveTimeoutMs) != 0) {
        ADD_FAILURE() << "rdma_resolve_addr: " << strerror(errno) << daemon_log();
        return false;
    }
    if (!client.expect(RDMA_CM_EVENT_ADDR_RESOLVED)) {
        return false;
    }
    if (rdma_resolve_route(id, kResolveTimeoutMs) != 0) {
        ADD_FAILURE() << "rdma_resolve_route: " << strerror(errno) << daemon_log();
        return false;
    }
    return static_cast<bool>(client.expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
}

rdma_cm_id* resolve(Side& client, uint16_t port, rdma_port_space ps = RDMA_PS_TCP,
                    const char* address = kServerIp) {
    rdma_cm_id* id = client.create_id(ps);
    return id && resolve_id(client, id, port, address) ? id : nullptr;
}

rdma_conn_param conn_param(const std::vector<uint8_t>& private_data,
                           uint8_t responder_resources = 1, uint8_t initiator_depth = 1) {
    rdma_conn_param param{};
    param.private_data = private_data.empty() ? nullptr : private_data.data();
    param.private_data_len = static_cast<uint8_t>(private_data.size());
    param.responder_resources = responder_resources;
    param.initiator_depth = initiator_depth;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    return param;
}

// The server listens on `port`; the client resolves it, makes an RC QP and
// asks to connect with `param`. The client's ID, or null with a failure.
rdma_cm_id* request_connection(Side& server, Side& client, uint16_t port, rdma_conn_param& param) {
    if (!listen_on(server, port)) {
        return nullptr;
    }
    rdma_cm_id* id = resolve(client, port);
    if (!id || !client.create_qp(id, IBV_QPT_RC)) {
        return nullptr;
    }
    if (rdma_connect(id, &param) != 0) {
        ADD_FAILURE() << "rdma_connect: " << strerror(errno) << daemon_log();
        return nullptr;
    }
    return id;
}

struct ConnectOptions {
    std::vector<uint8_t> request_data;
    std::vector<uint8_t> accept_data;
    uint8_t responder_resources = 1;  // what the client asks for
    uint8_t initiator_depth = 1;
    uint8_t accept_responder_resources = 1;  // what the server accepts with
    uint8_t accept_initiator_depth = 1;
    Clock::duration timeout = kEventTimeout;  // for each event
};

struct Connection {
    Event request;      // the server's CONNECT_REQUEST
    Event established;  // the client's ESTABLISHED
    bool ok = false;
};

// `client` resolves `port` of the server address and connects with an RC
// QP; `server`, listening there, accepts the request with an RC QP; both
// see ESTABLISHED. Sets both sides' `conn`.
Connection connect_pair(Side& server, Side& client, uint16_t port,
                        const ConnectOptions& options = {}) {
    Connection result;
    rdma_cm_id* id = resolve(client, port);
    if (!id || !client.create_qp(id, IBV_QPT_RC)) {
        return result;
    }
    client.conn = id;
    rdma_conn_param param =
        conn_param(options.request_data, options.responder_resources, options.initiator_depth);
    if (rdma_connect(id, &param) != 0) {
        ADD_FAILURE() << "rdma_connect: " << strerror(errno) << daemon_log();
        return result;
    }
    result.request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST, options.timeout);
    if (!result.request) {
        return result;
    }
    server.adopt(result.request.id);
    server.conn = result.request.id;
    if (!server.create_qp(server.conn, IBV_QPT_RC)) {
        return result;
    }
    rdma_conn_param accept = conn_param(options.accept_data, options.accept_responder_resources,
                                        options.accept_initiator_depth);
    if (rdma_accept(server.conn, &accept) != 0) {
        ADD_FAILURE() << "rdma_accept: " << strerror(errno) << daemon_log();
        return result;
    }
    result.established = client.expect(RDMA_CM_EVENT_ESTABLISHED, options.timeout);
    const Event server_established = server.expect(RDMA_CM_EVENT_ESTABLISHED, options.timeout);
    result.ok = result.established && server_established;
    return result;
}

// rdma_disconnect from `active`: DISCONNECTED on the passive side, whose
// rdma_disconnect answers; DISCONNECTED on the active side; TIMEWAIT_EXIT
// on both.
void disconnect_pair(Side& active, Side& passive) {
    ASSERT_EQ(rdma_disconnect(active.conn), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(passive.expect(RDMA_CM_EVENT_DISCONNECTED));
    ASSERT_EQ(rdma_disconnect(passive.conn), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(active.expect(RDMA_CM_EVENT_DISCONNECTED));
    EXPECT_TRUE(passive.expect(RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitTimeout));
    EXPECT_TRUE(active.expect(RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitTimeout));
}

// The completions of `cq`, `count` of them, or fewer at the deadline.
std::vector<ibv_wc> poll_cq(ibv_cq* cq, size_t count, Clock::duration timeout = 10s) {
    const auto deadline = Clock::now() + timeout;
    std::vector<ibv_wc> completions;
    while (completions.size() < count && Clock::now() < deadline) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) {
            ADD_FAILURE() << "ibv_poll_cq: " << n;
            break;
        }
        if (n == 1) {
            completions.push_back(wc);
        }
    }
    return completions;
}

int post_send(ibv_qp* qp, ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
}

int post_recv(ibv_qp* qp, ibv_sge sge, uint64_t wr_id) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &wr, &bad);
}

// Where a server's memory is, as its accept's private data tells the client.
struct RemoteBuffer {
    uint64_t addr;
    uint32_t rkey;
} __attribute__((packed));

// `uroce status` lines of rdma_cm IDs.
std::vector<std::string> cm_id_lines(const std::string& status) {
    std::vector<std::string> lines;
    std::istringstream in(status);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("  cm id ", 0) == 0) {
            lines.push_back(line);
        }
    }
    return lines;
}

// ---- a peer in another process ---------------------------------------------

// Run by spawn_child: `client PORT MODE` connects to PORT of the server
// address; `server PORT MODE` listens there ("listening" once it does) and
// accepts one request. Prints "established" once connected; then with MODE
// "exit" it ends at once (_exit: nothing disconnected, destroyed or closed
// by hand), with "wait" it waits to be killed. Any failure: "error ...".
int peer_main(const std::vector<std::string>& args) {
    auto say = [](const std::string& line) {
        const std::string text = line + "\n";
        return write(STDOUT_FILENO, text.data(), text.size()) == ssize_t(text.size());
    };
    auto fail = [&](const std::string& why) {
        say("error " + why + (errno ? std::string(": ") + strerror(errno) : ""));
        return 1;
    };
    if (args.size() != 3) {
        return fail("usage: client|server PORT exit|wait");
    }
    const bool server = args[0] == "server";
    const uint16_t port = static_cast<uint16_t>(std::stoi(args[1]));
    std::string why;
    rdma_event_channel* channel = nonblocking_channel();
    rdma_cm_id* id = nullptr;
    if (!channel || rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) {
        return fail("rdma_create_id");
    }
    sockaddr_in address = ipv4(kServerIp, port);
    if (server) {
        if (rdma_bind_addr(id, as_sockaddr(address)) != 0 || rdma_listen(id, 1) != 0) {
            return fail("listen");
        }
        say("listening");
        const auto request =
            wait_for(channel, RDMA_CM_EVENT_CONNECT_REQUEST, kEventTimeout, 0, why);
        if (!request) {
            return fail(why);
        }
        id = request->id;
    } else {
        errno = 0;
        if (rdma_resolve_addr(id, nullptr, as_sockaddr(address), kResolveTimeoutMs) != 0 ||
            !wait_for(channel, RDMA_CM_EVENT_ADDR_RESOLVED, kEventTimeout, 0, why) ||
            rdma_resolve_route(id, kResolveTimeoutMs) != 0 ||
            !wait_for(channel, RDMA_CM_EVENT_ROUTE_RESOLVED, kEventTimeout, 0, why)) {
            return fail("resolving " + why);
        }
    }
    ibv_pd* pd = ibv_alloc_pd(id->verbs);
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.cap = {4, 4, 1, 1, 0};
    if (!pd || rdma_create_qp(id, pd, &attr) != 0) {
        return fail("rdma_create_qp");
    }
    rdma_conn_param param = conn_param({});
    if ((server ? rdma_accept(id, &param) : rdma_connect(id, &param)) != 0) {
        return fail(server ? "rdma_accept" : "rdma_connect");
    }
    if (!wait_for(channel, RDMA_CM_EVENT_ESTABLISHED, kEventTimeout, 0, why)) {
        errno = 0;
        return fail(why);
    }
    say("established");
    if (args[2] == "exit") {
        _exit(0);
    }
    alarm(60);  // killed long before
    for (;;) {
        pause();
    }
}

[[maybe_unused]] const bool kPeerRegistered = register_child("rdma-cm-peer", peer_main);

// A spawned peer, killed and reaped when the test ends.
struct Peer {
    explicit Peer(const std::vector<std::string>& args)
        : child(spawn_child("rdma-cm-peer", args)) {}
    ~Peer() {
        if (child.pid > 0) {
            kill(child.pid, SIGKILL);
            waitpid(child.pid, nullptr, 0);
        }
        if (child.output >= 0) {
            close(child.output);
        }
    }
    // Its exit status (128 + signal when killed), once it ended.
    int wait() {
        int status = 0;
        waitpid(child.pid, &status, 0);
        child.pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::string line() { return read_line(child.output, kEventTimeout); }

    Child child;
};

// ---- the tests -----------------------------------------------------------------

class RdmaCmTest : public ::testing::Test {};

// A whole RC connection, every event in order on both sides: the client's
// address and route; the server's CONNECT_REQUEST with the client's private
// data and resources (in the receiver's view); ESTABLISHED on both (the
// client's made by librdmacm from CONNECT_RESPONSE, with the QP moved to
// RTS); SEND, RDMA WRITE and RDMA READ over the QPs; then the client's
// rdma_disconnect: DISCONNECTED on both sides, then TIMEWAIT_EXIT on both.
TEST_F(RdmaCmTest, RcConnectionReportsEveryEventInOrder) {
    constexpr uint16_t kPort = 7471;
    Side server("server");
    Side client("client");
    rdma_cm_id* listener = listen_on(server, kPort);
    ASSERT_TRUE(listener);
    EXPECT_EQ(device_of(listener), "uroce1");

    rdma_cm_id* id = client.create_id();
    ASSERT_TRUE(id);
    sockaddr_in destination = ipv4(kServerIp, kPort);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(destination), kResolveTimeoutMs), 0)
        << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ADDR_RESOLVED));
    EXPECT_EQ(device_of(id), "uroce0");
    EXPECT_EQ(ip_of(rdma_get_local_addr(id)), kClientIp);
    EXPECT_EQ(ip_of(rdma_get_peer_addr(id)), kServerIp);
    EXPECT_EQ(ntohs(rdma_get_dst_port(id)), kPort);
    const uint16_t client_port = ntohs(rdma_get_src_port(id));
    EXPECT_NE(client_port, 0);
    ASSERT_EQ(rdma_resolve_route(id, kResolveTimeoutMs), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_RC));
    client.conn = id;

    // The client asks for 5 responder resources and an initiator depth of 3.
    const std::vector<uint8_t> hello = pattern(11, 20);
    rdma_conn_param param = conn_param(hello, 5, 3);
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    ASSERT_NE(request.id, nullptr);
    ASSERT_NE(request.id, listener);
    server.adopt(request.id);
    server.conn = request.id;
    EXPECT_EQ(request.listen_id, listener);
    EXPECT_EQ(device_of(request.id), "uroce1");
    EXPECT_EQ(ip_of(rdma_get_local_addr(request.id)), kServerIp);
    EXPECT_EQ(port_of(rdma_get_local_addr(request.id)), kPort);
    EXPECT_EQ(ip_of(rdma_get_peer_addr(request.id)), kClientIp);
    EXPECT_EQ(port_of(rdma_get_peer_addr(request.id)), client_port);
    EXPECT_EQ(request.private_data_len, kReqPrivateDataLen);
    EXPECT_TRUE(same_bytes(request.private_data, padded(hello, kReqPrivateDataLen)));
    // The receiver's view: what the client reads is what the server answers.
    EXPECT_EQ(request.responder_resources, 3);
    EXPECT_EQ(request.initiator_depth, 5);
    EXPECT_EQ(request.qp_num, id->qp->qp_num);

    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_RC));
    constexpr int kTargetAccess =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    Memory* inbox = server.memory(request.id, 64, IBV_ACCESS_LOCAL_WRITE, 0);
    Memory* target = server.memory(request.id, 4096, kTargetAccess, 3);
    ASSERT_TRUE(inbox && target);
    const std::vector<uint8_t> served = target->bytes;
    ASSERT_EQ(post_recv(request.id->qp, inbox->sge(0, 64), 1), 0);
    RemoteBuffer remote{target->addr(), target->mr->rkey};
    std::vector<uint8_t> where(sizeof(remote));
    memcpy(where.data(), &remote, sizeof(remote));
    rdma_conn_param accept = conn_param(where, 3, 5);
    ASSERT_EQ(rdma_accept(request.id, &accept), 0) << strerror(errno) << daemon_log();

    const Event established = client.expect(RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(established);
    ASSERT_GE(established.private_data.size(), sizeof(remote));
    memcpy(&remote, established.private_data.data(), sizeof(remote));
    EXPECT_EQ(remote.addr, target->addr());
    EXPECT_EQ(remote.rkey, target->mr->rkey);
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_ESTABLISHED));

    // A SEND into the posted receive, a WRITE of 2 KiB into the first half
    // of the server's memory and a READ of its second half, in one list.
    Memory* message = client.memory(id, 16, IBV_ACCESS_LOCAL_WRITE, 21);
    Memory* source = client.memory(id, 2048, IBV_ACCESS_LOCAL_WRITE, 22);
    Memory* sink = client.memory(id, 2048, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_TRUE(message && source && sink);
    std::fill(sink->bytes.begin(), sink->bytes.end(), 0);
    ibv_sge sges[3] = {message->sge(0, 16), source->sge(0, 2048), sink->sge(0, 2048)};
    ibv_send_wr wrs[3]{};
    const ibv_wr_opcode opcodes[3] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
    for (int i = 0; i < 3; ++i) {
        wrs[i].wr_id = 10 + i;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].opcode = opcodes[i];
        wrs[i].send_flags = IBV_SEND_SIGNALED;
        wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
    }
    wrs[1].wr.rdma = {remote.addr, remote.rkey};
    wrs[2].wr.rdma = {remote.addr + 2048, remote.rkey};
    ASSERT_EQ(post_send(id->qp, wrs[0]), 0);
    const std::vector<ibv_wc> sent = poll_cq(id->send_cq, 3);
    ASSERT_EQ(sent.size(), 3u) << daemon_log();
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(sent[i].wr_id, 10u + i);
        EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent[i].status);
    }
    const std::vector<ibv_wc> received = poll_cq(request.id->recv_cq, 1);
    ASSERT_EQ(received.size(), 1u) << daemon_log();
    EXPECT_EQ(received[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(received[0].status);
    EXPECT_EQ(received[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(received[0].byte_len, 16u);
    EXPECT_TRUE(same_bytes(std::span(inbox->bytes).first(16), message->bytes));
    EXPECT_TRUE(same_bytes(std::span(target->bytes).first(2048), source->bytes));
    EXPECT_TRUE(same_bytes(sink->bytes, std::span(served).subspan(2048)));

    ASSERT_NO_FATAL_FAILURE(disconnect_pair(client, server));
    // And nothing else.
    expect_no_event(server.channel, 200ms, "the server's connection is over");
    expect_no_event(client.channel, 200ms, "the client's connection is over");
}

// rdma_accept's private data reaches the client whole, in its ESTABLISHED
// event (librdmacm's from CONNECT_RESPONSE), zero-filled to the size of a
// REP's field as the kernel reports it; with the server's resources in the
// client's view and the server's QP number.
TEST_F(RdmaCmTest, AcceptPrivateDataReachesClient) {
    constexpr uint16_t kPort = 7472;
    Side server("server");
    Side client("client");
    ASSERT_TRUE(listen_on(server, kPort));
    ConnectOptions options;
    options.request_data = pattern(30, 8);
    options.accept_data = pattern(31, 150);
    options.responder_resources = 4;
    options.initiator_depth = 4;
    options.accept_responder_resources = 2;
    options.accept_initiator_depth = 1;
    const Connection connection = connect_pair(server, client, kPort, options);
    ASSERT_TRUE(connection.ok);
    const Event& established = connection.established;
    EXPECT_EQ(established.private_data_len, kRepPrivateDataLen);
    EXPECT_TRUE(
        same_bytes(established.private_data, padded(options.accept_data, kRepPrivateDataLen)));
    EXPECT_EQ(established.responder_resources, 1);
    EXPECT_EQ(established.initiator_depth, 2);
    EXPECT_EQ(established.qp_num, server.conn->qp->qp_num);
}

// rdma_reject with private data: the client's REJECTED carries the IB CM
// reason a program's reject has (28, consumer defined) and the bytes,
// zero-filled to the size of a REJ's field.
TEST_F(RdmaCmTest, RejectCarriesReasonAndPrivateData) {
    constexpr uint16_t kPort = 7473;
    Side server("server");
    Side client("client");
    rdma_conn_param param = conn_param(pattern(40, 10));
    ASSERT_TRUE(request_connection(server, client, kPort, param));

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    const std::vector<uint8_t> refusal = pattern(41, 40);
    ASSERT_EQ(rdma_reject(request.id, refusal.data(), refusal.size()), 0)
        << strerror(errno) << daemon_log();

    const Event rejected =
        client.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejConsumerDefined);
    ASSERT_TRUE(rejected);
    EXPECT_EQ(rejected.private_data_len, kRejPrivateDataLen);
    EXPECT_TRUE(same_bytes(rejected.private_data, padded(refusal, kRejPrivateDataLen)));
    expect_no_event(server.channel, 200ms, "the server rejected the request");
}

// Nobody listens on the port: the IB CM refuses the REQ itself, with
// reason 8 (invalid service ID), as cm.c's cm_req_handler does when no
// listener matches.
TEST_F(RdmaCmTest, ConnectToPortWithoutListenerIsRejected) {
    constexpr uint16_t kPort = 7474;
    Side server("server");
    Side client("client");
    // A listener on another port, and one of another port space on this
    // one, match nothing.
    ASSERT_TRUE(listen_on(server, kPort + 1));
    ASSERT_TRUE(listen_on(server, kPort, 8, RDMA_PS_UDP));
    rdma_cm_id* id = resolve(client, kPort);
    ASSERT_TRUE(id);
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_RC));
    rdma_conn_param param = conn_param(pattern(42, 4));
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();
    const Event rejected =
        client.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejInvalidServiceId);
    ASSERT_TRUE(rejected);
    EXPECT_EQ(rejected.private_data_len, kRejPrivateDataLen);
    expect_no_event(server.channel, 200ms, "no listener matched the request");
}

// A client whose ID has no QP gets the REP as CONNECT_RESPONSE (librdmacm
// moves no QP), with the server's private data and QPN, and completes the
// connection itself with rdma_establish: the RTU makes the server's side
// ESTABLISHED.
TEST_F(RdmaCmTest, ClientWithoutQpGetsConnectResponse) {
    constexpr uint16_t kPort = 7479;
    Side server("server");
    Side client("client");
    ASSERT_TRUE(listen_on(server, kPort));
    rdma_cm_id* id = resolve(client, kPort);
    ASSERT_TRUE(id);
    rdma_conn_param param = conn_param({});
    param.qp_num = 0x1234;  // the QP the application keeps itself
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_RC));
    const std::vector<uint8_t> answer = pattern(44, 12);
    rdma_conn_param accept = conn_param(answer);
    ASSERT_EQ(rdma_accept(request.id, &accept), 0) << strerror(errno) << daemon_log();

    const Event response = client.expect(RDMA_CM_EVENT_CONNECT_RESPONSE);
    ASSERT_TRUE(response);
    EXPECT_EQ(response.qp_num, request.id->qp->qp_num);
    EXPECT_EQ(response.private_data_len, kRepPrivateDataLen);
    EXPECT_TRUE(same_bytes(response.private_data, padded(answer, kRepPrivateDataLen)));
    expect_no_event(server.channel, 200ms, "the client has not established yet");
    ASSERT_EQ(rdma_establish(id), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_ESTABLISHED));
}

// Joining an IPv4 multicast group on a UDP ID: MULTICAST_JOIN with the
// group's GID (::ffff:239.1.2.3), QPN 0xffffff and the port space's Q_Key,
// as cma.c's cma_make_mc_event reports it for RoCE.
TEST_F(RdmaCmTest, JoiningAGroupReportsItsAddress) {
    Side member("member");
    rdma_cm_id* id = member.create_id(RDMA_PS_UDP);
    ASSERT_TRUE(id);
    sockaddr_in source = ipv4(kClientIp, 0);
    ASSERT_EQ(rdma_bind_addr(id, as_sockaddr(source)), 0) << strerror(errno) << daemon_log();
    sockaddr_in group = ipv4("239.1.2.3", 0);
    ASSERT_EQ(rdma_join_multicast(id, as_sockaddr(group), nullptr), 0)
        << strerror(errno) << daemon_log();

    const Event joined = member.expect(RDMA_CM_EVENT_MULTICAST_JOIN);
    ASSERT_TRUE(joined);
    EXPECT_EQ(joined.qp_num, 0xffffffu);
    EXPECT_EQ(joined.qkey, kUdpQkey);
    EXPECT_TRUE(joined.ah_attr.is_global);
    const std::vector<uint8_t> expected_gid = {0, 0, 0,    0,    0,   0, 0, 0,
                                               0, 0, 0xff, 0xff, 239, 1, 2, 3};
    EXPECT_TRUE(same_bytes(std::span(joined.ah_attr.grh.dgid.raw), expected_gid));
    EXPECT_EQ(rdma_leave_multicast(id, as_sockaddr(group)), 0) << strerror(errno);
}

// An AF_IB destination (a GID and a service ID) resolves as cma.c's
// cma_resolve_ib_addr does: to the device with that GID, whose GID becomes
// the source. A RoCE route needs the network device an IP address names,
// and an AF_IB address names none: rdma_resolve_route fails with ENODEV
// (cma_resolve_iboe_route). A GID in no device's subnet: ENODEV at once.
TEST_F(RdmaCmTest, AfIbDestinationResolvesButHasNoRoceRoute) {
    Side client("client");
    rdma_cm_id* id = client.create_id();
    ASSERT_TRUE(id);
    sockaddr_ib destination{};
    destination.sib_family = AF_IB;
    destination.sib_pkey = htobe16(0xffff);
    const uint8_t uroce1_gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2};
    memcpy(destination.sib_addr.sib_raw, uroce1_gid, 16);
    destination.sib_sid = htobe64((uint64_t{RDMA_PS_TCP} << 16) | 7480);
    destination.sib_sid_mask = htobe64(~uint64_t{0});
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&destination),
                                kResolveTimeoutMs),
              0)
        << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ADDR_RESOLVED));
    ASSERT_NE(id->verbs, nullptr);
    EXPECT_STREQ(ibv_get_device_name(id->verbs->device), "uroce1");
    EXPECT_EQ(rdma_get_local_addr(id)->sa_family, AF_IB);
    EXPECT_TRUE(same_bytes(std::span(id->route.addr.addr.ibaddr.sgid.raw),
                           std::vector<uint8_t>(uroce1_gid, uroce1_gid + 16)));
    EXPECT_EQ(rdma_resolve_route(id, kResolveTimeoutMs), -1);
    EXPECT_EQ(errno, ENODEV);

    rdma_cm_id* elsewhere = client.create_id();
    ASSERT_TRUE(elsewhere);
    destination.sib_addr.sib_raw[0] = 0x20;  // 2000::/8, no device's subnet
    EXPECT_EQ(rdma_resolve_addr(elsewhere, nullptr, reinterpret_cast<sockaddr*>(&destination),
                                kResolveTimeoutMs),
              -1);
    EXPECT_EQ(errno, ENODEV);
}

// A UD resolution of a port nobody listens on: the IB CM answers the
// SIDR_REQ itself with status IB_SIDR_UNSUPPORTED (cm.c's
// cm_sidr_req_handler), which rdma_cm reports as UNREACHABLE.
TEST_F(RdmaCmTest, UdResolveOfPortWithoutListenerIsUnreachable) {
    constexpr uint16_t kPort = 7476;
    Side server("server");
    Side client("client");
    ASSERT_TRUE(listen_on(server, kPort));  // TCP: another port space
    rdma_cm_id* id = resolve(client, kPort, RDMA_PS_UDP);
    ASSERT_TRUE(id);
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_UD));
    rdma_conn_param param = conn_param(pattern(43, 8));
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_UNREACHABLE, kEventTimeout, kSidrUnsupported));
    expect_no_event(server.channel, 200ms, "no listener matched the SIDR_REQ");
}

// No device answers at the destination (127.0.0.3 routes through uroce0,
// and nothing there speaks RoCE): the REQ is sent again each time the IB
// CM's response timeout passes, 15 times (CMA_MAX_CM_RETRIES), and then
// the connection is UNREACHABLE with -ETIMEDOUT (cma.c's IB_CM_REQ_ERROR).
// As with the kernel, that takes about 16 response timeouts: over a minute.
TEST_F(RdmaCmTest, RequestNobodyAnswersIsUnreachableAfterItsRetries) {
    constexpr uint16_t kPort = 7477;
    constexpr int kMaxCmRetries = 15;
    Side client("client");
    rdma_cm_id* id = resolve(client, kPort, RDMA_PS_TCP, "127.0.0.3");
    ASSERT_TRUE(id);
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_RC));
    const uint64_t retried = counter("uroce0", "cm_mads_retried");
    rdma_conn_param param = conn_param({});
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();
    const auto connecting = Clock::now();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_UNREACHABLE, 120s, -ETIMEDOUT));
    // Sixteen REQs, each waited for about 4.6 s.
    EXPECT_GT(Clock::now() - connecting, 60s);
    EXPECT_EQ(counter("uroce0", "cm_mads_retried") - retried, uint64_t{kMaxCmRetries});
}

// The client's QP cannot follow the REP (the application moved it to ERROR
// while connecting): librdmacm's ucma_process_conn_resp fails to bring it to
// RTR and reports CONNECT_ERROR instead of ESTABLISHED, sending no RTU.
// When the client then destroys its ID, the IB CM rejects the connection it
// left half open (cm.c's cm_destroy_id in REP_RCVD), and the server sees
// REJECTED, consumer-defined.
TEST_F(RdmaCmTest, QpThatCannotFollowTheReplyIsConnectError) {
    constexpr uint16_t kPort = 7478;
    Side server("server");
    Side client("client");
    rdma_conn_param param = conn_param({});
    rdma_cm_id* id = request_connection(server, client, kPort, param);
    ASSERT_TRUE(id);
    ibv_qp_attr error{};
    error.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(id->qp, &error, IBV_QP_STATE), 0);

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_RC));
    ASSERT_EQ(rdma_accept(request.id, &param), 0) << strerror(errno) << daemon_log();
    // librdmacm's own status for a failed transition: -1, errno set.
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_CONNECT_ERROR, kEventTimeout, -1));
    expect_no_event(server.channel, 200ms, "the client sent no RTU");

    client.destroy(id);
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejConsumerDefined));
}

// A listener with a backlog of 1 that has not taken its first request: the
// kernel does not refuse a second one. ucma_connect_event_handler returns
// -ENOMEM when the backlog is used up, and cm.c's cm_destroy_id then leaves a
// REQ_RCVD connection without a REJ ("Do not reject to allow future
// retries"): the client's REQ goes unanswered, is sent again, and reaches
// the listener once it has taken the request that waited.
TEST_F(RdmaCmTest, RequestBeyondBacklogWaitsForTheListener) {
    constexpr uint16_t kPort = 7475;
    Side server("server");
    Side first("first client");
    Side second("second client");
    ASSERT_TRUE(listen_on(server, kPort, 1));

    rdma_cm_id* first_id = resolve(first, kPort);
    ASSERT_TRUE(first_id);
    ASSERT_TRUE(first.create_qp(first_id, IBV_QPT_RC));
    const std::vector<uint8_t> first_data = pattern(50, 8);
    rdma_conn_param first_param = conn_param(first_data);
    ASSERT_EQ(rdma_connect(first_id, &first_param), 0) << strerror(errno);
    // Its CONNECT_REQUEST waits in the server's channel, untaken.
    pollfd ready{server.channel->fd, POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 5000), 1) << "no connection request came" << daemon_log();

    rdma_cm_id* second_id = resolve(second, kPort);
    ASSERT_TRUE(second_id);
    ASSERT_TRUE(second.create_qp(second_id, IBV_QPT_RC));
    const std::vector<uint8_t> second_data = pattern(51, 8);
    rdma_conn_param second_param = conn_param(second_data);
    ASSERT_EQ(rdma_connect(second_id, &second_param), 0) << strerror(errno);
    if (!expect_no_event(second.channel, 2s,
                         "a request beyond the backlog goes unanswered (ucma: -ENOMEM; cm.c "
                         "cm_destroy_id: no REJ, so that the REQ is retried)")) {
        return;
    }

    // The server takes the request that waited...
    const Event taken = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(taken);
    server.adopt(taken.id);
    EXPECT_TRUE(same_bytes(std::span(taken.private_data).first(8), first_data));
    ASSERT_EQ(rdma_reject(taken.id, nullptr, 0), 0);
    EXPECT_TRUE(first.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejConsumerDefined));
    // ...and the second client's REQ, sent again, now reaches it.
    const Event retried = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST, 15s);
    ASSERT_TRUE(retried);
    server.adopt(retried.id);
    EXPECT_TRUE(same_bytes(std::span(retried.private_data).first(8), second_data));
    ASSERT_EQ(rdma_reject(retried.id, nullptr, 0), 0);
    EXPECT_TRUE(second.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejConsumerDefined));
}

// A connected client process is killed: the server's side of the
// connection gets DISCONNECTED (its peer's DREQ, sent as the dead process's
// IDs are destroyed), and TIMEWAIT_EXIT after its own rdma_disconnect.
TEST_F(RdmaCmTest, KilledClientDisconnectsTheServer) {
    constexpr uint16_t kPort = 7476;
    Side server("server");
    rdma_cm_id* listener = listen_on(server, kPort);
    ASSERT_TRUE(listener);
    Peer peer({"client", std::to_string(kPort), "wait"});
    ASSERT_GT(peer.child.pid, 0);

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request) << "the peer says: " << peer.line();
    server.adopt(request.id);
    server.conn = request.id;
    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_RC));
    rdma_conn_param accept = conn_param({});
    ASSERT_EQ(rdma_accept(request.id, &accept), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_ESTABLISHED));
    ASSERT_EQ(peer.line(), "established");

    kill(peer.child.pid, SIGKILL);
    EXPECT_EQ(peer.wait(), 128 + SIGKILL);
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_DISCONNECTED));
    ASSERT_EQ(rdma_disconnect(request.id), 0) << strerror(errno) << daemon_log();
    EXPECT_TRUE(server.expect(RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitTimeout));
}

// A connected server process exits without disconnecting: the client gets
// DISCONNECTED, and TIMEWAIT_EXIT after its own rdma_disconnect.
TEST_F(RdmaCmTest, ExitedServerDisconnectsTheClient) {
    constexpr uint16_t kPort = 7477;
    Side client("client");
    Peer peer({"server", std::to_string(kPort), "exit"});
    ASSERT_GT(peer.child.pid, 0);
    ASSERT_EQ(peer.line(), "listening");

    rdma_cm_id* id = resolve(client, kPort);
    ASSERT_TRUE(id);
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_RC));
    client.conn = id;
    rdma_conn_param param = conn_param({});
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ESTABLISHED)) << "the peer says: " << peer.line();
    EXPECT_EQ(peer.line(), "established");
    EXPECT_EQ(peer.wait(), 0);

    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_DISCONNECTED));
    ASSERT_EQ(rdma_disconnect(id), 0) << strerror(errno) << daemon_log();
    EXPECT_TRUE(client.expect(RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitTimeout));
}

// rdma_bind_addr of an address of this host that no RDMA device has is
// ENODEV (cma_acquire_dev finds no device for its netdev); of an address
// this host does not have, EADDRNOTAVAIL (rdma_translate_ip). The ID stays
// idle: it binds afterwards, to uroce1.
TEST_F(RdmaCmTest, BindRefusesAddressesWithoutDevice) {
    Side side("side");
    rdma_cm_id* id = side.create_id();
    ASSERT_TRUE(id);
    sockaddr_in loopback = ipv4("127.0.0.9", 7480);
    EXPECT_EQ(errno_of(rdma_bind_addr(id, as_sockaddr(loopback))), ENODEV) << daemon_log();
    sockaddr_in elsewhere = ipv4("192.0.2.1", 7480);
    EXPECT_EQ(errno_of(rdma_bind_addr(id, as_sockaddr(elsewhere))), EADDRNOTAVAIL) << daemon_log();
    sockaddr_in server = ipv4(kServerIp, 7480);
    ASSERT_EQ(errno_of(rdma_bind_addr(id, as_sockaddr(server))), 0) << daemon_log();
    EXPECT_EQ(device_of(id), "uroce1");
    EXPECT_EQ(port_of(rdma_get_local_addr(id)), 7480);
}

// A port another ID holds, as cma.c's cma_check_port judges it: the same
// address is EADDRINUSE, the wildcard on either side EADDRNOTAVAIL;
// another address of the host, or another port space, may have the port.
// A destroyed ID's port is free again. Every refused ID binds afterwards.
TEST_F(RdmaCmTest, BindRefusesTakenPorts) {
    Side side("side");
    auto bind_to = [](rdma_cm_id* id, const char* ip, uint16_t port) {
        sockaddr_in address = ipv4(ip, port);
        return errno_of(rdma_bind_addr(id, as_sockaddr(address)));
    };
    rdma_cm_id* holder = side.create_id();
    rdma_cm_id* other = side.create_id();
    rdma_cm_id* wildcard = side.create_id();
    rdma_cm_id* late = side.create_id();
    rdma_cm_id* udp = side.create_id(RDMA_PS_UDP);
    ASSERT_TRUE(holder && other && wildcard && late && udp);

    ASSERT_EQ(bind_to(holder, kServerIp, 7481), 0);
    EXPECT_EQ(bind_to(other, kServerIp, 7481), EADDRINUSE);
    EXPECT_EQ(bind_to(other, "0.0.0.0", 7481), EADDRNOTAVAIL);
    EXPECT_EQ(bind_to(other, kClientIp, 7481), 0);
    EXPECT_EQ(bind_to(udp, kServerIp, 7481), 0);

    ASSERT_EQ(bind_to(wildcard, "0.0.0.0", 7482), 0);
    EXPECT_EQ(bind_to(late, kServerIp, 7482), EADDRNOTAVAIL);
    EXPECT_EQ(bind_to(late, kClientIp, 7482), EADDRNOTAVAIL);

    side.destroy(holder);
    EXPECT_EQ(bind_to(late, kServerIp, 7481), 0);
}

// RDMA_OPTION_ID_REUSEADDR lets two IDs bind one address and port, but a
// listener must have it alone: while both are bound neither listens
// (rdma_listen's cma_check_port without reuse: EADDRINUSE); once one is
// destroyed the other listens, and from then on its port is not shared,
// not even with an ID that asks for reuse ("Once the ID reaches
// RDMA_CM_LISTEN it is not allowed to be reusable any more").
TEST_F(RdmaCmTest, ReuseAddrSharesBindButNotListen) {
    constexpr uint16_t kPort = 7483;
    Side side("side");
    auto reusable = [&]() -> rdma_cm_id* {
        rdma_cm_id* id = side.create_id();
        int reuse = 1;
        if (id && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &reuse,
                                  sizeof(reuse)) != 0) {
            ADD_FAILURE() << "RDMA_OPTION_ID_REUSEADDR: " << strerror(errno) << daemon_log();
            return nullptr;
        }
        return id;
    };
    sockaddr_in address = ipv4(kServerIp, kPort);
    rdma_cm_id* first = reusable();
    rdma_cm_id* second = reusable();
    ASSERT_TRUE(first && second);
    ASSERT_EQ(errno_of(rdma_bind_addr(first, as_sockaddr(address))), 0);
    ASSERT_EQ(errno_of(rdma_bind_addr(second, as_sockaddr(address))), 0) << daemon_log();

    EXPECT_EQ(errno_of(rdma_listen(first, 8)), EADDRINUSE) << daemon_log();
    EXPECT_EQ(errno_of(rdma_listen(second, 8)), EADDRINUSE) << daemon_log();
    side.destroy(second);
    ASSERT_EQ(errno_of(rdma_listen(first, 8)), 0) << daemon_log();

    rdma_cm_id* third = reusable();
    ASSERT_TRUE(third);
    const int bound = errno_of(rdma_bind_addr(third, as_sockaddr(address)));
    EXPECT_EQ(bound, EADDRINUSE) << "a listener's port is shared" << daemon_log();
    if (bound == 0) {
        EXPECT_EQ(errno_of(rdma_listen(third, 8)), EADDRINUSE) << daemon_log();
    }
}

// Calls on an ID in a state that does not allow them are EINVAL, and
// change nothing: each ID then goes on as if they had not been made.
TEST_F(RdmaCmTest, CallsInTheWrongStateFailWithEinval) {
    constexpr uint16_t kPort = 7484;
    Side server("server");
    Side client("client");
    rdma_cm_id* listener = listen_on(server, kPort);
    ASSERT_TRUE(listener);
    rdma_conn_param param = conn_param(pattern(60, 4));

    // A listener: not again (rdma_listen wants ADDR_BOUND), and it neither
    // connects, accepts nor resolves a route.
    EXPECT_EQ(errno_of(rdma_listen(listener, 8)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_connect(listener, &param)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_accept(listener, &param)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_resolve_route(listener, kResolveTimeoutMs)), EINVAL) << daemon_log();

    // A bound ID resolves no route before its address.
    rdma_cm_id* id = client.create_id();
    ASSERT_TRUE(id);
    sockaddr_in source = ipv4(kClientIp, 0);
    ASSERT_EQ(errno_of(rdma_bind_addr(id, as_sockaddr(source))), 0) << daemon_log();
    EXPECT_EQ(errno_of(rdma_resolve_route(id, kResolveTimeoutMs)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_disconnect(id)), EINVAL) << daemon_log();

    // Its address resolved: no listen, no connect before the route, no
    // accept, no disconnect.
    sockaddr_in destination = ipv4(kServerIp, kPort);
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(destination), kResolveTimeoutMs), 0)
        << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ADDR_RESOLVED));
    EXPECT_EQ(errno_of(rdma_listen(id, 8)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_connect(id, &param)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_accept(id, &param)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_disconnect(id)), EINVAL) << daemon_log();

    // Its route resolved: still no accept, listen or disconnect.
    ASSERT_EQ(rdma_resolve_route(id, kResolveTimeoutMs), 0) << strerror(errno) << daemon_log();
    ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
    EXPECT_EQ(errno_of(rdma_accept(id, &param)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_listen(id, 8)), EINVAL) << daemon_log();
    EXPECT_EQ(errno_of(rdma_disconnect(id)), EINVAL) << daemon_log();
    expect_no_event(client.channel, 100ms, "refused calls report nothing");

    // Both go on: the client connects, the listener hears it.
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_RC));
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();
    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    EXPECT_EQ(request.listen_id, listener);
    // Requested, not yet accepted: the client's ID connects no more.
    EXPECT_EQ(errno_of(rdma_connect(id, &param)), EINVAL) << daemon_log();
    ASSERT_EQ(rdma_reject(request.id, nullptr, 0), 0) << strerror(errno);
    EXPECT_TRUE(client.expect(RDMA_CM_EVENT_REJECTED, kEventTimeout, kRejConsumerDefined));
}

// RDMA_OPTION_ID_TOS takes one byte (ucma_set_option_id: EINVAL for any
// other length); the ID keeps working, and the type of service it sets is
// the traffic class of the route it resolves.
TEST_F(RdmaCmTest, TosOptionTakesOneByte) {
    Side client("client");
    rdma_cm_id* id = client.create_id();
    ASSERT_TRUE(id);
    int wide = 32;
    EXPECT_EQ(
        errno_of(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &wide, sizeof(wide))),
        EINVAL)
        << daemon_log();
    uint8_t tos = 32;
    ASSERT_EQ(errno_of(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1)), 0)
        << daemon_log();
    ASSERT_TRUE(resolve_id(client, id, 7485));
    ASSERT_GE(id->route.num_paths, 1);
    ASSERT_NE(id->route.path_rec, nullptr);
    EXPECT_EQ(id->route.path_rec[0].traffic_class, tos);
}

// UD: SIDR resolves the server's QP. The client's rdma_connect carries
// private data to the server's CONNECT_REQUEST; the server's rdma_accept
// with its UD QP gives the client ESTABLISHED with that QP's number,
// rdma_cm's Q_Key and an address handle's attributes; a datagram sent with
// them arrives.
TEST_F(RdmaCmTest, UdSidrResolvesTheServersQp) {
    constexpr uint16_t kPort = 7486;
    Side server("server");
    Side client("client");
    ASSERT_TRUE(listen_on(server, kPort, 8, RDMA_PS_UDP));
    rdma_cm_id* id = resolve(client, kPort, RDMA_PS_UDP);
    ASSERT_TRUE(id);
    ASSERT_TRUE(client.create_qp(id, IBV_QPT_UD));
    const std::vector<uint8_t> question = pattern(70, 30);
    rdma_conn_param param = conn_param(question);
    ASSERT_EQ(rdma_connect(id, &param), 0) << strerror(errno) << daemon_log();

    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    EXPECT_EQ(request.private_data_len, kSidrReqPrivateDataLen);
    EXPECT_TRUE(same_bytes(request.private_data, padded(question, kSidrReqPrivateDataLen)));
    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_UD));
    Memory* inbox = server.memory(request.id, kGrh + 64, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_TRUE(inbox);
    ASSERT_EQ(post_recv(request.id->qp, inbox->sge(0, kGrh + 64), 7), 0);
    const std::vector<uint8_t> answer = pattern(71, 20);
    rdma_conn_param accept = conn_param(answer);
    ASSERT_EQ(rdma_accept(request.id, &accept), 0) << strerror(errno) << daemon_log();

    Event established = client.expect(RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(established);
    EXPECT_EQ(established.qp_num, request.id->qp->qp_num);
    EXPECT_EQ(established.qkey, kUdpQkey);
    EXPECT_EQ(established.private_data_len, kSidrRepPrivateDataLen);
    EXPECT_TRUE(same_bytes(established.private_data, padded(answer, kSidrRepPrivateDataLen)));
    ibv_ah* ah = client.create_ah(id, established.ah_attr);
    ASSERT_NE(ah, nullptr) << "ibv_create_ah: " << strerror(errno) << daemon_log();

    Memory* datagram = client.memory(id, 64, IBV_ACCESS_LOCAL_WRITE, 72);
    ASSERT_TRUE(datagram);
    ibv_sge sge = datagram->sge(0, 64);
    ibv_send_wr wr{};
    wr.wr_id = 8;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud = {ah, established.qp_num, established.qkey};
    ASSERT_EQ(post_send(id->qp, wr), 0);
    const std::vector<ibv_wc> sent = poll_cq(id->send_cq, 1);
    ASSERT_EQ(sent.size(), 1u) << daemon_log();
    EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent[0].status);
    const std::vector<ibv_wc> received = poll_cq(request.id->recv_cq, 1);
    ASSERT_EQ(received.size(), 1u) << "the datagram did not arrive" << daemon_log();
    EXPECT_EQ(received[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(received[0].status);
    EXPECT_EQ(received[0].wr_id, 7u);
    EXPECT_EQ(received[0].byte_len, kGrh + 64);
    EXPECT_EQ(received[0].src_qp, id->qp->qp_num);
    EXPECT_TRUE(same_bytes(std::span(inbox->bytes).subspan(kGrh), datagram->bytes));
}

// The active side's RTU is lost: the passive side, still waiting with its
// REP sent, sends the REP again once the IB CM's response timeout passes
// (the REQ's local CM response timeout, 20: about 4 s), and the active side,
// established, answers the duplicate with another RTU (cm.c's
// cm_dup_rep_handler). Nothing stretches that timeout: the kernel's rdma_cm
// sends no MRA for the REP at once (CMA_CM_MRA_SETTING carries
// IB_CM_MRA_FLAG_DELAY, an MRA only answers a duplicate).
TEST_F(RdmaCmTest, LostRtuIsRecoveredByTheRepSentAgain) {
    constexpr uint16_t kPort = 7489;
    Side server("server");
    Side client("client");
    rdma_conn_param param = conn_param({});
    rdma_cm_id* id = request_connection(server, client, kPort, param);
    ASSERT_TRUE(id);
    const Event request = server.expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(request);
    server.adopt(request.id);
    ASSERT_TRUE(server.create_qp(request.id, IBV_QPT_RC));
    ASSERT_EQ(rdma_accept(request.id, &param), 0) << strerror(errno) << daemon_log();
    // The REP has come (CONNECT_RESPONSE waits); the RTU librdmacm sends
    // as it hands the event on is lost.
    pollfd ready{client.channel->fd, POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 5000), 1) << "no REP came" << daemon_log();
    const uint64_t retried = counter("uroce1", "cm_mads_retried");
    {
        FaultGuard loss({"uroce0"}, 1.0);
        ASSERT_TRUE(client.expect(RDMA_CM_EVENT_ESTABLISHED));
    }
    const auto lost = Clock::now();
    ASSERT_TRUE(server.expect(RDMA_CM_EVENT_ESTABLISHED, 15s));
    EXPECT_LT(Clock::now() - lost, 10s);
    EXPECT_GT(counter("uroce1", "cm_mads_retried"), retried) << "the REP was not sent again";
}

// A third of the MADs both devices send are lost: connections still
// establish, the IB CM sending again what went unanswered, and the
// devices count it. (A connection whose three MADs all got through needs
// no retry, about one in three: up to eight are made until one did. At
// that loss a REP and its RTU both cross one time in two, so 15 REPs
// fail together about once in 20,000 runs; at half loss, one in four,
// and the 60 s a test can wait ran out once in 50.)
TEST_F(RdmaCmTest, ConnectsThroughMadLoss) {
    auto retried = [] {
        return counter("uroce0", "cm_mads_retried") + counter("uroce1", "cm_mads_retried");
    };
    const uint64_t before = retried();
    for (int attempt = 0; attempt < 8 && retried() == before; ++attempt) {
        SCOPED_TRACE("connection " + std::to_string(attempt + 1));
        const uint16_t port = static_cast<uint16_t>(7500 + attempt);
        Side server("server");
        Side client("client");
        ASSERT_TRUE(listen_on(server, port));
        {
            FaultGuard loss({"uroce0", "uroce1"}, 0.3);
            ConnectOptions options;
            options.timeout = kLossyTimeout;
            ASSERT_TRUE(connect_pair(server, client, port, options).ok);
        }
        ASSERT_NO_FATAL_FAILURE(disconnect_pair(client, server));
    }
    EXPECT_GT(retried(), before) << daemon_log();
}

// `uroce status` lists the IDs of a connection while it is up: each side's
// with its state, the IB CM's, and the server's address and port; the
// listener too. Once they are destroyed, none.
TEST_F(RdmaCmTest, StatusListsConnectedIds) {
    constexpr uint16_t kPort = 7495;
    const std::string server_address = std::string(kServerIp) + ":" + std::to_string(kPort);
    {
        Side server("server");
        Side client("client");
        ASSERT_TRUE(listen_on(server, kPort));
        ASSERT_TRUE(connect_pair(server, client, kPort).ok);
        const std::vector<std::string> lines = cm_id_lines(test_daemon().status());
        int connected = 0;
        int listening = 0;
        for (const std::string& line : lines) {
            if (line.find(server_address) == std::string::npos) {
                continue;
            }
            connected += line.find(" connect ") != std::string::npos &&
                         line.find(" cm established ") != std::string::npos;
            listening += line.find(" listen ") != std::string::npos;
        }
        std::ostringstream report;
        for (const std::string& line : lines) {
            report << line << "\n";
        }
        EXPECT_EQ(connected, 2) << "both ends of the connection, in:\n" << report.str();
        EXPECT_EQ(listening, 1) << "the listener, in:\n" << report.str();
    }
    for (const std::string& line : cm_id_lines(test_daemon().status())) {
        EXPECT_EQ(line.find(server_address), std::string::npos) << "left behind: " << line;
    }
}

// ---- the commands of librdmacm v55+ (rdma_resolve_addrinfo, rdma_write_cm_event)
//
// Written raw, as librdmacm writes them, so that the test runs whatever
// librdmacm is installed: <rdma/rdma_user_cm.h>, which declares them from
// v55 on, clashes with <rdma/rdma_cma.h>.
namespace ucma {
enum : uint32_t {
    kCreateId = 0,
    kDestroyId = 1,
    kBindIp = 2,
    kGetEvent = 12,
    kResolveIbService = 23,
    kWriteCmEvent = 24
};
enum : uint32_t { kEventUser = 18, kEventInternal = 19 };
struct Header {
    uint32_t cmd;
    uint16_t in, out;
};
struct CreateId {
    uint64_t uid, response;
    uint16_t ps;
    uint8_t qp_type, reserved[5];
};
struct DestroyId {
    uint64_t response;
    uint32_t id, reserved;
};
struct BindIp {
    uint64_t response;
    sockaddr_in6 addr;  // a sockaddr_in fits
    uint32_t id;
};
struct ResolveIbService {
    uint32_t id, reserved;
    uint64_t service_id;
    uint8_t service_name[64];
    uint32_t flags, reserved2;
};
struct WriteCmEvent {
    uint32_t id, reserved, event, status;
    uint64_t arg;
    uint8_t rest_of_param[176];  // the union holds a UD parameter of 184 bytes
};
struct GetEvent {
    uint64_t response;
};
struct EventResponse {  // rdma_ucm_event_resp
    uint64_t uid;
    uint32_t id, event, status;
    uint32_t arg32[2];
    uint8_t rest[336 - 28];
};

// 0, or the errno of the write.
template <class Body>
int write_command(int fd, uint32_t cmd, const Body& body, uint16_t out = 0) {
    uint8_t buffer[sizeof(Header) + sizeof(Body)];
    const Header header{cmd, static_cast<uint16_t>(sizeof(Body)), out};
    memcpy(buffer, &header, sizeof(header));
    memcpy(buffer + sizeof(header), &body, sizeof(body));
    return write(fd, buffer, sizeof(buffer)) == static_cast<ssize_t>(sizeof(buffer)) ? 0 : errno;
}
}  // namespace ucma

// rdma_write_cm_event puts an event on the program's own channel: GET_EVENT
// hands it back with the ID's context, the status and the argument, as the
// kernel's ucma_write_cm_event; events other than USER and INTERNAL, and
// IDs the channel does not hold, are refused. RESOLVE_IB_SERVICE (an
// rdma_resolve_addrinfo with RAI_SA) wants a bound ID, and then finds no
// subnet administrator on RoCE: EOPNOTSUPP.
TEST_F(RdmaCmTest, WriteCmEventAndResolveIbServiceAsTheKernel) {
    rdma_event_channel* channel = nonblocking_channel();
    ASSERT_TRUE(channel) << strerror(errno);
    const int fd = channel->fd;
    uint32_t id = 0;
    ASSERT_EQ(ucma::write_command(fd, ucma::kCreateId,
                                  ucma::CreateId{.uid = 77,
                                                 .response = reinterpret_cast<uintptr_t>(&id),
                                                 .ps = RDMA_PS_TCP,
                                                 .qp_type = IBV_QPT_RC},
                                  sizeof(id)),
              0)
        << daemon_log();

    ucma::ResolveIbService service{};
    service.id = id;
    service.flags = 1;  // by service ID
    EXPECT_EQ(ucma::write_command(fd, ucma::kResolveIbService, service), EINVAL)
        << "an unbound ID" << daemon_log();
    ucma::BindIp bind{};
    bind.id = id;
    const sockaddr_in source = ipv4(kClientIp, 0);
    memcpy(&bind.addr, &source, sizeof(source));
    ASSERT_EQ(ucma::write_command(fd, ucma::kBindIp, bind), 0) << daemon_log();
    EXPECT_EQ(ucma::write_command(fd, ucma::kResolveIbService, service), EOPNOTSUPP)
        << daemon_log();

    ucma::WriteCmEvent written{};
    written.id = id;
    written.event = ucma::kEventUser;
    written.status = 5;
    written.arg = 0x1122334455667788;
    ASSERT_EQ(ucma::write_command(fd, ucma::kWriteCmEvent, written), 0) << daemon_log();
    ucma::WriteCmEvent wrong = written;
    wrong.event = RDMA_CM_EVENT_ESTABLISHED;
    EXPECT_EQ(ucma::write_command(fd, ucma::kWriteCmEvent, wrong), EINVAL) << daemon_log();
    wrong = written;
    wrong.id = id + 1000;
    EXPECT_NE(ucma::write_command(fd, ucma::kWriteCmEvent, wrong), 0) << daemon_log();

    pollfd ready{fd, POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 5000), 1) << "the written event makes the channel readable";
    ucma::EventResponse event{};
    ASSERT_EQ(
        ucma::write_command(fd, ucma::kGetEvent,
                            ucma::GetEvent{reinterpret_cast<uintptr_t>(&event)}, sizeof(event)),
        0)
        << daemon_log();
    EXPECT_EQ(event.uid, 77u);
    EXPECT_EQ(event.id, id);
    EXPECT_EQ(event.event, ucma::kEventUser);
    EXPECT_EQ(event.status, 5u);
    uint64_t arg;
    memcpy(&arg, event.arg32, sizeof(arg));
    EXPECT_EQ(arg, written.arg);
    expect_no_event(channel, 100ms, "one event written, one taken");

    uint32_t events_reported = 0;
    EXPECT_EQ(
        ucma::write_command(fd, ucma::kDestroyId,
                            ucma::DestroyId{reinterpret_cast<uintptr_t>(&events_reported), id},
                            sizeof(events_reported)),
        0);
    EXPECT_EQ(events_reported, 1u);
    rdma_destroy_event_channel(channel);
}

}  // namespace
}  // namespace uroce::test
