// The RDMA connection manager: what the kernel's rdma_cm (cma.c) and IB CM
// (cm.c) do for a device, for programs that use librdmacm through the
// bridge. It keeps the rdma_cm IDs of every event channel, resolves
// addresses to devices, and connects them with the InfiniBand CM protocol:
// REQ/REP/RTU/REJ/MRA/DREQ/DREP (and SIDR for UD) as MADs on QP1, which
// between two devices of this daemon take the same packet path as to
// another host.
#pragma once

#include <rdma/rdma_user_cm.h>
#include <stdint.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cm/address.h"
#include "cm/id_table.h"
#include "cm/mad.h"
#include "device/device.h"
#include "util/case_tag.h"
#include "util/client_pipe.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce::cm {

struct Id;

// The event numbers of rdma_ucm_event_resp (the kernel's enum
// rdma_cm_event_type, which librdmacm's rdma_cma.h repeats).
enum rdma_cm_event_type : uint32_t {
    RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_ADDR_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED,
    RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST,
    RDMA_CM_EVENT_CONNECT_RESPONSE,
    RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_UNREACHABLE,
    RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_DISCONNECTED,
    RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_MULTICAST_JOIN,
    RDMA_CM_EVENT_MULTICAST_ERROR,
    RDMA_CM_EVENT_ADDR_CHANGE,
    RDMA_CM_EVENT_TIMEWAIT_EXIT,
};

// One open of /dev/infiniband/rdma_cm. Its IDs' events wait here for
// GET_EVENT; the program's descriptor (a pipe's read end) is readable while
// any do.
struct Channel {
    static constexpr size_t kMaxEvents = 4096;

    struct Event {
        uint32_t owner;   // the ID whose event it is (DESTROY_ID takes its events back)
        uint32_t new_id;  // CONNECT_REQUEST: the ID it brings, until the program takes it
        rdma_ucm_event_resp resp;
        uint32_t multicast = 0;  // MULTICAST_JOIN: the join it reports on
    };

    uint64_t token = 0;    // random: whoever knows it may attach to the channel
    int connections = 1;   // the opener's and those of forked children that attached
    pid_t pid = 0;         // the process that opened it
    uid_t uid = 0;         // ports below 1024 are root's, as for sockets
    ClientPipe readiness;  // holds one byte exactly while events wait
    std::deque<Event> events;
    CaseRef case_tag = no_case();  // the opener's UROCE_CASE: its IDs' log lines and coverage
};

// rdma_cm's states of an ID (cma_priv.h's enum rdma_cm_state).
enum class IdState {
    kIdle,
    kAddrQuery,
    kAddrResolved,
    kRouteQuery,
    kRouteResolved,
    kConnect,
    kDisconnect,
    kAddrBound,
    kListen,
    kDeviceRemoval,  // its device was removed: only destroying it is left
};
const char* name(IdState state);

// The IB CM's states of a connection (IBA 12.9.7, cm.c's ib_cm_state).
enum class CmState {
    kIdle,
    kReqSent,
    kReqRcvd,
    kMraReqSent,
    kRepSent,
    kRepRcvd,
    kMraRepSent,
    kEstablished,
    kDreqSent,
    kDreqRcvd,
    kTimewait,
    kSidrReqSent,
    kSidrReqRcvd,
};
const char* name(CmState state);

// What CONNECT and ACCEPT carry (rdma_ucm_conn_param, checked).
struct ConnParam {
    uint32_t qp_num = 0;
    uint32_t qkey = 0;  // used by the kernel for AF_IB destinations only
    std::vector<uint8_t> private_data;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t flow_control = 0;
    uint8_t retry_count = 0;
    uint8_t rnr_retry_count = 0;
    uint8_t srq = 0;
};

// A multicast group an ID joined (rdma_join_multicast). Its handle is what
// LEAVE_MCAST names, from a space of its own, as ucma's.
struct Multicast {
    uint32_t handle = 0;
    uint32_t id = 0;
    pid_t pid = 0;  // the client it counts against
    uint64_t uid = 0;
    Address address{};
    uint16_t join_flags = 0;
    uint32_t events_reported = 0;
};

struct Id {
    uint32_t handle = 0;
    Channel* channel = nullptr;
    uint64_t uid = 0;
    // A connection request's ID reports nothing until ACCEPT names its
    // context, as the kernel's ucma.
    bool reporting = true;
    uint16_t ps = 0;
    uint8_t qp_type = 0;
    IdState state = IdState::kIdle;
    Address src{};
    Address dst{};
    Device* device = nullptr;
    bool bound = false;     // holds its port in the port space
    uint16_t bound_ps = 0;  // that port space (an AF_IB service ID may name another)
    bool reuseaddr = false;
    bool afonly = false;
    bool afonly_set = false;
    uint8_t tos = 0;
    std::optional<uint8_t> ack_timeout;
    uint32_t backlog = 0;   // LISTEN: connection requests that may still wait
    uint32_t listener = 0;  // a connection request's ID: the listener it came to
    uint32_t events_reported = 0;
    uint32_t seq_num = 0;  // this side's starting PSN: what its QP receives first

    // The connection, as the IB CM keeps it.
    CmState cm = CmState::kIdle;
    bool has_cm = false;          // connected through the IB CM (INIT_QP_ATTR asks it)
    uint32_t local_comm_id = 0;   // random, indexed in IdTable
    uint32_t remote_comm_id = 0;  // the peer's, once its REQ or REP came
    uint64_t remote_ca_guid = 0;  // the peer's, from its REQ or REP (a REJ timeout names it)
    wire::IpAddress peer_ip;
    uint32_t qp_num = 0;
    uint32_t remote_qpn = 0;
    uint32_t qkey = 0;
    uint32_t sq_psn = 0;  // the peer's starting PSN: what this side sends first
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t retry_count = 7;
    uint8_t rnr_retry_count = 7;
    uint8_t path_mtu = IBV_MTU_1024;
    uint64_t transaction_id = 0;
    // The MAD that is retransmitted until answered, and how often still
    // (allocated only meanwhile, as the timer: most IDs never need them).
    std::unique_ptr<std::array<std::byte, kMadSize>> pending_mad;
    int retries_left = 0;
    std::chrono::milliseconds retry_interval{};
    std::unique_ptr<boost::asio::steady_timer> timer;
    std::vector<uint32_t> multicasts;  // the joins it holds, by handle
};

class ConnectionManager {
  public:
    // Bounds of the whole daemon, and of each client (the process that
    // opened the channel): IDs (the programs' and those incoming requests
    // make) and multicast joins. At a bound a program's call fails with
    // ENOMEM and an incoming request waits for the peer's retry; a client's
    // share is a quarter, so that one program at its limits leaves the
    // others room.
    static constexpr size_t kMaxIds = 131072;
    static constexpr size_t kMaxIdsPerClient = kMaxIds / 4;
    static constexpr size_t kMaxMulticasts = 4096;
    static constexpr size_t kMaxMulticastsPerClient = kMaxMulticasts / 4;

    // Sends one MAD from `from`'s QP1, from the address of its GID `sgid`,
    // to QP1 of `dest_ip`.
    using MadSender = std::function<void(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                                         std::span<const std::byte> mad)>;

    ConnectionManager(boost::asio::io_context& io, std::vector<std::unique_ptr<Device>>& devices,
                      MadSender send);
    ~ConnectionManager();

    Channel& open_channel(pid_t pid, uid_t uid, ClientPipe readiness, CaseRef case_tag = no_case());
    // Another connection to `channel` (a forked child's).
    void attach_channel(Channel& channel) { ++channel.connections; }
    // A connection to the channel ended (close or death). With the last,
    // the channel ends: its IDs go, their peers hear it.
    void close_channel(Channel& channel);
    // Every ID by handle, for RDMA netlink's resource dumps.
    const std::map<uint32_t, std::unique_ptr<Id>>& ids() const { return ids_.all(); }
    Channel* find_channel(uint64_t token);

    // The daemon stops: every ID on a device hears DEVICE_REMOVAL. Returns
    // whether any channel has events waiting (see events_waiting).
    bool remove_devices();
    // rdma link delete: every ID on `device` ends its connection, reports
    // DEVICE_REMOVAL and refuses everything but its destruction.
    void remove_device(const Device& device);
    bool events_waiting() const;

    // A MAD that arrived at QP1 of `to`, at its address `dest_ip`.
    void receive_mad(Device& to, const wire::IpAddress& src_ip, const wire::IpAddress& dest_ip,
                     std::span<const uint8_t> bytes);

    // The ucma commands (cm/ucma.cpp decodes them). Each validates
    // everything and either fails changing nothing or acts.
    Result create_id(Channel& channel, uint64_t uid, uint16_t ps, uint8_t qp_type,
                     uint32_t& handle);
    Result destroy_id(Channel& channel, uint32_t handle, uint32_t& events_reported);
    // An ID of the channel, even one whose device was removed (destroy_id).
    Result find_any(Channel& channel, uint32_t handle, Id*& id);
    Result find(Channel& channel, uint32_t handle, Id*& id);
    Result bind(Id& id, const Address& address);
    Result resolve_addr(Id& id, const Address* src, const Address& dst);
    Result resolve_route(Id& id);
    Result listen(Id& id, uint32_t backlog);
    Result connect(Id& id, const ConnParam& param);
    Result accept(Id& id, uint64_t uid, const ConnParam* param);
    Result reject(Id& id, std::span<const uint8_t> private_data, uint8_t reason);
    Result disconnect(Id& id);
    Result init_qp_attr(Id& id, uint32_t qp_state, ib_uverbs_qp_attr& attr);
    Result notify(Id& id, uint32_t event);
    // rdma_resolve_addrinfo with RAI_SA: a service lookup at the subnet
    // administrator, which RoCE has not (EOPNOTSUPP, as the kernel).
    Result resolve_ib_service(Id& id);
    // rdma_write_cm_event: an event the program puts on its own channel.
    Result write_event(Id& id, uint32_t event, uint32_t status, uint64_t arg);
    Result set_option(Id& id, uint32_t level, uint32_t name, std::span<const uint8_t> value);
    Result migrate(Id& id, Channel& to, uint32_t& events_reported);
    Result join_multicast(Id& id, uint64_t uid, const Address& group, uint16_t join_flags,
                          uint32_t& handle);
    Result leave_multicast(Channel& channel, uint32_t handle, uint32_t& events_reported);
    // What one client holds, for status.
    size_t ids_held_by(pid_t pid) const { return ids_.held_by(pid); }
    // GET_EVENT: the oldest event, EAGAIN when none waits.
    Result get_event(Channel& channel, rdma_ucm_event_resp& resp);

    // What QUERY_ROUTE and QUERY(ADDR) answer about an ID (its addresses,
    // device and path).
    void fill_route(const Id& id, rdma_ucm_query_route_resp& resp) const;
    void fill_addr(const Id& id, rdma_ucm_query_addr_resp& resp) const;
    // QUERY(GID): the addresses as AF_IB (GIDs and service IDs).
    void fill_gid(const Id& id, rdma_ucm_query_addr_resp& resp) const;
    // QUERY(PATH): the path records, at most `room` of them; returns how many.
    size_t fill_path(const Id& id, rdma_ucm_query_path_resp& resp, ib_path_rec_data* paths,
                     size_t room) const;

    // How many IDs each client holds, then one line per ID (and per join),
    // for `uroce status`: about kStatusLinesPerClient of each client's, so
    // that the report stays cheap and one program's thousands of IDs hide
    // nobody else's.
    static constexpr size_t kStatusLinesPerClient = 256;
    std::string status_text() const;

  private:
    Id& new_id(Channel& channel, uint64_t uid, uint16_t ps, uint8_t qp_type);
    void erase(Id& id);
    // Queues an event for the ID's program; false when its channel is full
    // (the event is lost, and logged).
    bool report(Id& id, rdma_cm_event_type event, int32_t status = 0,
                const std::function<void(rdma_ucm_event_resp&)>& fill = {});
    bool queue_event(Channel& channel, const Channel::Event& event);
    void update_readiness(Channel& channel);
    void forget_multicast(uint32_t handle);

    // RESOLVE_ADDR of an AF_IB destination (a GID).
    Result resolve_ib_addr(Id& id, const Address& dst);

    // Port spaces (cma.c's cma_get_port / cma_check_port).
    Result take_port(Id& id);
    void release_port(Id& id);
    bool conflicts(const Id& id, const Id& other, bool listening) const;

    // The wire.
    void send(Id& id, const Message& message, bool retransmit);
    // An answer to a MAD that came to `from`'s GID `sgid` from `dest_ip`.
    void send_reply(Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
                    uint64_t transaction_id, const Message& message);
    // An MRA for the REQ or REP the peer sent again.
    void send_mra(Id& id, Answered answered);
    // The ID a REQ or SIDR_REQ to `listener` brings, on the listener's
    // channel, reporting nothing until ACCEPT.
    Id& requested_id(const Id& listener, Device& to, const IpCmHeader& header);
    bool room_for_request(const Id& listener) const;
    void arm_retry(Id& id);
    void start_timer(Id& id, std::chrono::milliseconds after);
    void stop_retransmitting(Id& id);
    void on_retry_timer(uint32_t handle);
    // `at`: the index of the GID the MAD came to; answers leave from it.
    void handle(Device& to, const wire::IpAddress& src_ip, uint8_t at, const Mad& mad);
    // The ID a MAD other than a request is about, if any.
    Id* addressed(Device& to, const wire::IpAddress& src_ip, const Mad& mad);
    void on_req(Device& to, const wire::IpAddress& src_ip, uint8_t at, uint64_t tid,
                const Req& req);
    void on_repeated_req(Id& id, Device& to, const wire::IpAddress& src_ip, uint64_t tid);
    void on_rep(Id& id, const Rep& rep);
    void on_rtu(Id& id);
    void on_rej(Id& id, const Rej& rej);
    void on_mra(Id& id, const Mra& mra);
    void on_dreq(Id& id, const Dreq& dreq);
    void on_drep(Id& id);
    void on_sidr_req(Device& to, const wire::IpAddress& src_ip, uint8_t at, uint64_t tid,
                     const SidrReq& req);
    void on_sidr_rep(Id& id, const SidrRep& rep);
    // The connection a MAD names by our communication ID, if it comes from
    // that connection's peer.
    Id* by_comm_id(uint32_t local_comm_id, const wire::IpAddress& src_ip);
    Id* gave_up(Device& to, const wire::IpAddress& src_ip, const Rej& rej);
    Id* find_listener(Device& to, uint16_t ps, uint16_t port, const wire::IpAddress& dest_ip);
    void enter_timewait(Id& id);
    // The ID goes away with its connection: the peer is told.
    void abandon_connection(Id& id);
    void fill_ud_param(const Id& id, rdma_ucm_ud_param& ud) const;

    boost::asio::io_context& io_;
    std::vector<std::unique_ptr<Device>>& devices_;
    MadSender send_mad_;
    std::map<uint64_t, std::unique_ptr<Channel>> channels_;  // by token
    IdTable ids_;
    std::map<uint32_t, Multicast> multicasts_;         // by handle
    std::unordered_map<pid_t, size_t> multicasts_of_;  // joins per client
    uint32_t next_multicast_ = 1;
    // (port space, port) -> the IDs bound to it
    std::map<std::pair<uint16_t, uint16_t>, std::vector<uint32_t>> ports_;
};

}  // namespace uroce::cm
