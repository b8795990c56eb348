#include "cm/connection_manager.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "util/log.h"
#include "wire/byte_order.h"
#include "wire/headers.h"
#include "wire/ipv4_gid.h"

namespace uroce::cm {
namespace {

using std::chrono::milliseconds;

// Starting PSNs, transaction IDs and ephemeral ports: not to be guessed
// from what another connection showed.
uint32_t random32() {
    uint32_t value = 0;
    while (getrandom(&value, sizeof(value), 0) != sizeof(value)) {
    }
    return value;
}

// The kernel's rdma_cm settings for RoCE (cma.c), so that a uroce host
// times and retries as a kernel peer expects.
constexpr uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT: 4.096 µs * 2^20
constexpr uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t kPacketLifeTime = 16;     // CMA_IBOE_PACKET_LIFETIME
constexpr uint8_t kAckTimeout = kPacketLifeTime + 1;
constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING
constexpr uint8_t kHopLimit = 64;
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint16_t kDefaultPkey = 0xffff;
constexpr uint16_t kFirstEphemeralPort = 32768;  // Linux's ip_local_port_range
constexpr uint16_t kLastEphemeralPort = 60999;
constexpr size_t kUserPrivateOffset = kIpCmHeaderSize;

// An IBA time exponent (4.096 µs * 2^t) in milliseconds, as cm.c rounds it.
milliseconds iba_time(uint8_t exponent) {
    return milliseconds(exponent > 8 ? 1ull << (exponent - 8) : 1);
}

// iboe_get_mtu: the largest IB MTU whose RoCE packet fits the netdev's MTU.
uint8_t path_mtu_of(const Device& device) {
    int mtu = 1500;
    std::ifstream("/sys/class/net/" + device.config().netdev + "/mtu") >> mtu;
    const int payload = mtu - (40 + 8 + 12 + 4 + 28 + 4);  // GRH/IP, UDP, BTH, XRC, atomic, ICRC
    uint8_t ib_mtu = IBV_MTU_256;
    for (uint8_t code = IBV_MTU_4096; code >= IBV_MTU_256; --code) {
        if (payload >= (128 << code)) {
            ib_mtu = code;
            break;
        }
    }
    return std::min<uint8_t>(ib_mtu, device.port_attr().active_mtu);
}

Gid gid_of(uint32_t ipv4) {
    return wire::ipv4_mapped_gid(ipv4);
}

uint32_t ipv4_or_zero(const Address& address) {
    uint32_t ipv4 = 0;
    ipv4_of(address, ipv4);
    return ipv4;
}

// An address's GID: an AF_IB address carries it, an IP address's is its
// IPv4-mapped form.
Gid gid_of(const Address& address) {
    if (address.ss_family == AF_IB) {
        Gid gid;
        memcpy(gid.data(), gid_of_ib(address), gid.size());
        return gid;
    }
    return gid_of(ipv4_or_zero(address));
}

bool is_ud(const Id& id) {
    return id.qp_type == IBV_QPT_UD;
}

PortSpace port_space(uint16_t ps) {
    return static_cast<PortSpace>(ps);
}

template <size_t N>
std::array<uint8_t, N> private_data(std::span<const uint8_t> user, size_t offset = 0) {
    std::array<uint8_t, N> out{};
    std::copy_n(user.begin(), std::min(user.size(), N - offset), out.begin() + offset);
    return out;
}

void copy_conn_private(rdma_ucm_conn_param& conn, std::span<const uint8_t> data) {
    const size_t n = std::min(data.size(), sizeof(conn.private_data));
    memcpy(conn.private_data, data.data(), n);
    conn.private_data_len = static_cast<uint8_t>(n);
}

// cm_format_rej: the message a REJ answers follows from the state it leaves.
Rej rej_of(const Id& id, RejectReason reason) {
    Rej rej;
    rej.local_comm_id = id.local_comm_id;
    rej.remote_comm_id = id.remote_comm_id;
    switch (id.cm) {
        case CmState::kReqRcvd:
        case CmState::kMraReqSent:
            rej.message_rejected = Answered::kReq;
            break;
        case CmState::kRepRcvd:
        case CmState::kMraRepSent:
            rej.message_rejected = Answered::kRep;
            break;
        default:
            rej.message_rejected = Answered::kOther;
            break;
    }
    rej.reason = reason;
    return rej;
}

}  // namespace

const char* name(IdState state) {
    static const char* const names[] = {
        "idle",    "addr-query", "addr-resolved", "route-query", "route-resolved",
        "connect", "disconnect", "addr-bound",    "listen",      "device-removal"};
    return names[static_cast<int>(state)];
}

const char* name(CmState state) {
    static const char* const names[] = {
        "idle",     "req-sent",      "req-rcvd",     "mra-req-sent", "rep-sent",
        "rep-rcvd", "mra-rep-sent",  "established",  "dreq-sent",    "dreq-rcvd",
        "timewait", "sidr-req-sent", "sidr-req-rcvd"};
    return names[static_cast<int>(state)];
}

ConnectionManager::ConnectionManager(boost::asio::io_context& io,
                                     std::vector<std::unique_ptr<Device>>& devices, MadSender send)
    : io_(io), devices_(devices), send_mad_(std::move(send)) {}

ConnectionManager::~ConnectionManager() = default;

// ---- channels and IDs ----------------------------------------------------

Channel& ConnectionManager::open_channel(pid_t pid, uid_t uid, ClientPipe readiness) {
    auto channel = std::make_unique<Channel>();
    while (getrandom(&channel->token, sizeof(channel->token), 0) != sizeof(channel->token) ||
           channel->token == 0 || channels_.count(channel->token)) {
    }
    channel->pid = pid;
    channel->uid = uid;
    channel->readiness = std::move(readiness);
    Channel& ref = *channel;
    channels_.emplace(ref.token, std::move(channel));
    return ref;
}

void ConnectionManager::close_channel(Channel& channel) {
    if (--channel.connections > 0) {
        return;
    }
    for (uint32_t handle : ids_.of_channel(channel)) {
        if (Id* id = ids_.find(handle)) {
            abandon_connection(*id);
            erase(*id);
        }
    }
    channels_.erase(channel.token);
}

bool ConnectionManager::remove_devices() {
    for (auto& [handle, id] : ids_.all()) {
        if (id->device) {
            report(*id, RDMA_CM_EVENT_DEVICE_REMOVAL);
        }
    }
    return events_waiting();
}

void ConnectionManager::remove_device(const Device& device) {
    for (auto& [handle, id] : ids_.all()) {
        if (id->device != &device) {
            continue;
        }
        abandon_connection(*id);  // the peer hears the connection end
        stop_retransmitting(*id);
        ids_.forget_connection(*id);
        id->cm = CmState::kIdle;
        id->has_cm = false;
        report(*id, RDMA_CM_EVENT_DEVICE_REMOVAL);
        id->state = IdState::kDeviceRemoval;
        id->device = nullptr;
    }
}

bool ConnectionManager::events_waiting() const {
    return std::any_of(channels_.begin(), channels_.end(),
                       [](const auto& entry) { return !entry.second->events.empty(); });
}

Channel* ConnectionManager::find_channel(uint64_t token) {
    auto it = channels_.find(token);
    return it == channels_.end() ? nullptr : it->second.get();
}

Result ConnectionManager::find_any(Channel& channel, uint32_t handle, Id*& id) {
    id = ids_.find(handle);
    if (!id) {
        return fail(ENOENT, "no rdma_cm ID %u", handle);
    }
    if (id->channel != &channel) {
        id = nullptr;
        return fail(EINVAL, "rdma_cm ID %u belongs to another event channel", handle);
    }
    return ok();
}

Result ConnectionManager::find(Channel& channel, uint32_t handle, Id*& id) {
    if (Result r = find_any(channel, handle, id); !r) {
        return r;
    }
    if (id->state == IdState::kDeviceRemoval) {
        id = nullptr;
        return fail(ENODEV, "the device of rdma_cm ID %u was removed", handle);
    }
    return ok();
}

Id& ConnectionManager::new_id(Channel& channel, uint64_t uid, uint16_t ps, uint8_t qp_type) {
    auto id = std::make_unique<Id>();
    id->channel = &channel;
    id->uid = uid;
    id->ps = ps;
    id->qp_type = qp_type;
    id->seq_num = random32() & wire::kQpnMask;
    id->transaction_id = uint64_t(random32()) << 32;
    return ids_.add(std::move(id));
}

void ConnectionManager::erase(Id& id) {
    for (uint32_t handle : id.multicasts) {
        forget_multicast(handle);
    }
    stop_retransmitting(id);
    release_port(id);
    ids_.remove(id);
}

Result ConnectionManager::create_id(Channel& channel, uint64_t uid, uint16_t ps, uint8_t qp_type,
                                    uint32_t& handle) {
    uint8_t type;
    switch (ps) {
        case RDMA_PS_TCP:
            type = IBV_QPT_RC;
            break;
        case RDMA_PS_UDP:
        case RDMA_PS_IPOIB:
            type = IBV_QPT_UD;
            break;
        case RDMA_PS_IB:
            type = qp_type;
            break;
        default:
            return fail(EINVAL, "CREATE_ID: port space 0x%x is not one of rdma_cm's", ps);
    }
    if (ids_.held_by(channel.pid) >= kMaxIdsPerClient) {
        return fail(ENOMEM, "CREATE_ID: pid %d holds %zu rdma_cm IDs, the most one client may",
                    channel.pid, ids_.held_by(channel.pid));
    }
    if (ids_.size() >= kMaxIds) {
        return fail(ENOMEM, "CREATE_ID: uroced holds %zu rdma_cm IDs, its most", ids_.size());
    }
    handle = new_id(channel, uid, ps, type).handle;
    return ok();
}

Result ConnectionManager::destroy_id(Channel& channel, uint32_t handle, uint32_t& events_reported) {
    Id* id;
    if (Result r = find_any(channel, handle, id); !r) {
        return r;
    }
    // Its events nobody took go with it; connection requests that waited on
    // a listener are refused.
    std::vector<uint32_t> waiting;
    std::erase_if(channel.events, [&](const Channel::Event& event) {
        if (event.owner != handle) {
            return false;
        }
        if (event.new_id) {
            waiting.push_back(event.new_id);
        }
        return true;
    });
    update_readiness(channel);
    for (uint32_t new_handle : waiting) {
        if (Id* request = ids_.find(new_handle)) {
            abandon_connection(*request);
            erase(*request);
        }
    }
    abandon_connection(*id);
    events_reported = id->events_reported;
    erase(*id);
    return ok();
}

// ---- events --------------------------------------------------------------

namespace {

// An event of `id` as GET_EVENT hands it out, its parameters still zero.
Channel::Event event_of(const Id& id, uint32_t event, uint32_t status) {
    Channel::Event entry{id.handle, 0, {}};
    entry.resp.uid = id.uid;
    entry.resp.id = id.handle;
    entry.resp.event = event;
    entry.resp.status = status;
    return entry;
}

}  // namespace

bool ConnectionManager::queue(Channel& channel, const Channel::Event& event) {
    if (channel.events.size() >= Channel::kMaxEvents) {
        log_warn("rdma_cm channel of pid %d holds %zu events nobody took: event %u lost",
                 channel.pid, channel.events.size(), event.resp.event);
        return false;
    }
    channel.events.push_back(event);
    update_readiness(channel);
    return true;
}

bool ConnectionManager::report(Id& id, rdma_cm_event_type event, int32_t status,
                               const std::function<void(rdma_ucm_event_resp&)>& fill) {
    if (!id.reporting) {
        return false;  // a connection request's ID before ACCEPT (ucma drops these)
    }
    Channel::Event entry = event_of(id, event, static_cast<uint32_t>(status));
    if (fill) {
        fill(entry.resp);
    }
    return queue(*id.channel, entry);
}

// The program's descriptor is readable exactly while events wait: the pipe
// holds one byte then, none otherwise. What the pipe holds is asked each
// time, so a program that took the byte itself is put right at the next
// change, and the daemon never waits on the pipe.
void ConnectionManager::update_readiness(Channel& channel) {
    const bool waiting = !channel.events.empty();
    const bool shown = channel.readiness.queued() > 0;
    if (waiting && !shown) {
        const uint8_t byte = 1;
        channel.readiness.write_record(&byte, 1);
    } else if (!waiting && shown) {
        channel.readiness.drain();
    }
}

Result ConnectionManager::get_event(Channel& channel, rdma_ucm_event_resp& resp) {
    if (channel.events.empty()) {
        update_readiness(channel);
        return fail(EAGAIN, "no rdma_cm event waits");
    }
    const Channel::Event event = channel.events.front();
    channel.events.pop_front();
    update_readiness(channel);
    resp = event.resp;
    if (Id* owner = ids_.find(event.owner)) {
        ++owner->events_reported;
        if (event.new_id) {
            ++owner->backlog;  // the request is the program's now
        }
    }
    if (auto it = multicasts_.find(event.multicast); event.multicast && it != multicasts_.end()) {
        ++it->second.events_reported;
    }
    return ok();
}

Result ConnectionManager::join_multicast(Id& id, uint64_t uid, const Address& group,
                                         uint16_t join_flags, uint32_t& handle) {
    if (join_flags > RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
        return fail(EINVAL, "JOIN_MCAST: join flags %u", join_flags);
    }
    if (!id.device || (id.state != IdState::kAddrBound && id.state != IdState::kAddrResolved)) {
        return fail(EINVAL, "JOIN_MCAST on an ID in state %s%s", name(id.state),
                    id.device ? "" : " without a device");
    }
    if (!is_ud(id)) {
        return fail(EINVAL, "JOIN_MCAST on an ID whose QPs are not UD");
    }
    uint32_t ipv4 = 0;
    if (is_any(group)) {
        return fail(EINVAL, "JOIN_MCAST of the any address");
    }
    if (!ipv4_of(group, ipv4) || !IN_MULTICAST(ntohl(ipv4))) {
        // RoCE v2 multicast is IPv4's (cma_iboe_join_multicast: ENOTSUPP for IPv6).
        return fail(EOPNOTSUPP, "JOIN_MCAST of %s: uroce joins IPv4 multicast groups",
                    to_string(group).c_str());
    }
    const pid_t client = id.channel->pid;
    if (multicasts_of_[client] >= kMaxMulticastsPerClient) {
        return fail(ENOMEM, "JOIN_MCAST: pid %d holds %zu multicast joins, the most one client may",
                    client, multicasts_of_[client]);
    }
    if (multicasts_.size() >= kMaxMulticasts) {
        return fail(ENOMEM, "JOIN_MCAST: uroced holds %zu multicast joins, its most",
                    multicasts_.size());
    }
    while (next_multicast_ == 0 || multicasts_.count(next_multicast_)) {
        ++next_multicast_;
    }
    Multicast& mc = multicasts_[next_multicast_];
    mc.handle = next_multicast_++;
    mc.id = id.handle;
    mc.pid = client;
    ++multicasts_of_[client];
    id.multicasts.push_back(mc.handle);
    mc.uid = uid;
    mc.address = group;
    mc.join_flags = join_flags;
    handle = mc.handle;
    // Joined at once: the group's address is its GID, as the kernel's RoCE join.
    Channel::Event event{id.handle, 0, {}, mc.handle};
    event.resp.uid = uid;
    event.resp.id = mc.handle;
    event.resp.event = RDMA_CM_EVENT_MULTICAST_JOIN;
    rdma_ucm_ud_param& ud = event.resp.param.ud;
    const Gid mgid = gid_of(ipv4);
    memcpy(ud.ah_attr.grh.dgid, mgid.data(), sizeof(ud.ah_attr.grh.dgid));
    ud.ah_attr.grh.sgid_index = 0;
    ud.ah_attr.grh.hop_limit = kHopLimit;
    ud.ah_attr.grh.traffic_class = id.tos;
    ud.ah_attr.is_global = 1;
    ud.ah_attr.port_num = 1;
    ud.qp_num = wire::kMulticastQpn;
    ud.qkey = id.qkey ? id.qkey : kUdpQkey;
    queue(*id.channel, event);
    return ok();
}

Result ConnectionManager::leave_multicast(Channel& channel, uint32_t handle,
                                          uint32_t& events_reported) {
    auto it = multicasts_.find(handle);
    if (it == multicasts_.end()) {
        return fail(ENOENT, "no multicast join %u", handle);
    }
    Id* id = ids_.find(it->second.id);
    if (!id || id->channel != &channel) {
        return fail(EINVAL, "multicast join %u belongs to another event channel", handle);
    }
    std::erase_if(channel.events,
                  [&](const Channel::Event& event) { return event.multicast == handle; });
    update_readiness(channel);
    events_reported = it->second.events_reported;
    std::erase(id->multicasts, handle);
    forget_multicast(handle);
    return ok();
}

void ConnectionManager::forget_multicast(uint32_t handle) {
    auto it = multicasts_.find(handle);
    if (it == multicasts_.end()) {
        return;
    }
    if (auto held = multicasts_of_.find(it->second.pid);
        held != multicasts_of_.end() && --held->second == 0) {
        multicasts_of_.erase(held);
    }
    multicasts_.erase(it);
}

Result ConnectionManager::migrate(Id& id, Channel& to, uint32_t& events_reported) {
    Channel& from = *id.channel;
    if (&from != &to) {
        std::deque<Channel::Event> moving;
        std::erase_if(from.events, [&](const Channel::Event& event) {
            if (event.owner == id.handle) {
                moving.push_back(event);
                return true;
            }
            return false;
        });
        if (to.events.size() + moving.size() > Channel::kMaxEvents) {
            from.events.insert(from.events.end(), moving.begin(), moving.end());
            return fail(ENOMEM, "MIGRATE_ID: the destination channel has no room for the events");
        }
        to.events.insert(to.events.end(), moving.begin(), moving.end());
        ids_.move_to_channel(id, to);
        update_readiness(from);
        update_readiness(to);
    }
    events_reported = id.events_reported;
    return ok();
}

// ---- addresses -------------------------------------------------------------

namespace {

// cma_select_ib_ps: the port space an AF_IB service ID names, if the ID's
// own port space allows it; the service ID then carries it exactly.
uint16_t ib_port_space(const Id& id, Address& address) {
    constexpr uint64_t kIpPsMask = 0xffffffffffff0000ull;  // RDMA_IB_IP_PS_MASK
    auto& ib = reinterpret_cast<sockaddr_ib&>(address);
    const uint64_t mask = be64toh(ib.sib_sid_mask) & kIpPsMask;
    const uint64_t sid = be64toh(ib.sib_sid) & mask;
    const auto names = [&](uint16_t ps) { return sid == (service_id(port_space(ps), 0) & mask); };
    uint16_t ps = 0;
    if (id.ps == RDMA_PS_IB && names(RDMA_PS_IB)) {
        ps = RDMA_PS_IB;
    } else if ((id.ps == RDMA_PS_IB || id.ps == RDMA_PS_TCP) && names(RDMA_PS_TCP)) {
        ps = RDMA_PS_TCP;
    } else if ((id.ps == RDMA_PS_IB || id.ps == RDMA_PS_UDP) && names(RDMA_PS_UDP)) {
        ps = RDMA_PS_UDP;
    }
    if (ps) {
        ib.sib_sid = htobe64(service_id(port_space(ps), port_of(address)));
        ib.sib_sid_mask = htobe64(kIpPsMask | be64toh(ib.sib_sid_mask));
    }
    return ps;
}

}  // namespace

Result ConnectionManager::bind(Id& id, const Address& address) {
    if (address.ss_family != AF_INET && address.ss_family != AF_INET6 &&
        address.ss_family != AF_IB) {
        return fail(EAFNOSUPPORT, "rdma_cm address family %u is not supported by uroce",
                    address.ss_family);
    }
    if (id.state != IdState::kIdle) {
        return fail(EINVAL, "BIND on an ID in state %s", name(id.state));
    }
    Address bound = address;
    uint16_t ps = id.ps;
    Device* device = nullptr;
    if (address.ss_family == AF_IB) {
        if (!(ps = ib_port_space(id, bound))) {
            return fail(EPROTONOSUPPORT,
                        "BIND: the AF_IB service ID names no port space this ID may use");
        }
        if (!is_any(bound)) {
            for (const auto& candidate : devices_) {
                if (memcmp(candidate->gids().front().raw, gid_of_ib(bound), 16) == 0) {
                    device = candidate.get();
                }
            }
            if (!device) {
                return fail(ENODEV, "%s is the GID of no uroce device", to_string(bound).c_str());
            }
        }
    } else if (!is_any(address)) {
        uint32_t ipv4 = 0;
        const bool v4 = ipv4_of(address, ipv4);
        device = v4 ? device_at(devices_, ipv4) : nullptr;
        if (!device) {
            const bool local = (v4 && is_host_address(ipv4)) || is_loopback(address);
            return fail(local ? ENODEV : EADDRNOTAVAIL, "%s is %s", to_string(address).c_str(),
                        local ? "an address of this host that no uroce device has"
                              : "not an address of this host");
        }
    }
    id.src = bound;
    id.bound_ps = ps;
    id.device = device;
    if (!id.afonly_set) {
        // An AF_INET6 ID takes IPv4 too, as net.ipv6.bindv6only=0 says.
        id.afonly = address.ss_family == AF_INET;
    }
    id.dst = Address{};
    id.dst.ss_family = address.ss_family;
    if (Result r = take_port(id); !r) {
        id.src = Address{};
        id.dst = Address{};
        id.device = nullptr;
        return r;
    }
    id.state = IdState::kAddrBound;
    return ok();
}

bool ConnectionManager::conflicts(const Id& id, const Id& other, bool listening) const {
    const bool reuse = listening ? false : id.reuseaddr;
    if (reuse && other.reuseaddr) {
        return false;
    }
    if (id.afonly && other.afonly && id.src.ss_family != other.src.ss_family) {
        return false;
    }
    return is_any(id.src) || is_any(other.src) || same_host(id.src, other.src);
}

Result ConnectionManager::take_port(Id& id) {
    uint16_t port = port_of(id.src);
    if (port == 0) {
        const uint32_t range = kLastEphemeralPort - kFirstEphemeralPort + 1;
        const uint32_t start = random32() % range;
        for (uint32_t i = 0; i < range && port == 0; ++i) {
            const uint16_t candidate = kFirstEphemeralPort + (start + i) % range;
            if (!ports_.count({id.bound_ps, candidate})) {
                port = candidate;
            }
        }
        if (port == 0) {
            return fail(EADDRNOTAVAIL, "every ephemeral port of the port space is taken");
        }
        set_port(id.src, port);
    } else {
        if (port < 1024 && id.channel->uid != 0) {
            return fail(EACCES, "port %u is below 1024 and the caller is not root", port);
        }
        if (auto it = ports_.find({id.bound_ps, port}); it != ports_.end()) {
            for (uint32_t handle : it->second) {
                const Id* other = ids_.find(handle);
                if (conflicts(id, *other, false)) {
                    const bool any = is_any(id.src) || is_any(other->src);
                    return fail(any ? EADDRNOTAVAIL : EADDRINUSE, "%s is taken by rdma_cm ID %u",
                                to_string(id.src).c_str(), other->handle);
                }
            }
        }
    }
    ports_[{id.bound_ps, port}].push_back(id.handle);
    id.bound = true;
    return ok();
}

void ConnectionManager::release_port(Id& id) {
    if (!id.bound) {
        return;
    }
    auto it = ports_.find({id.bound_ps, port_of(id.src)});
    if (it != ports_.end()) {
        std::erase(it->second, id.handle);
        if (it->second.empty()) {
            ports_.erase(it);
        }
    }
    id.bound = false;
}

namespace {

// cma_resolve_ib_dev: the device with the destination GID itself, else the
// first with a GID in its subnet; the source GID is that GID.
Device* device_for_gid(const std::vector<std::unique_ptr<Device>>& devices, const uint8_t* dgid,
                       const ibv_gid*& sgid) {
    Device* found = nullptr;
    for (const auto& device : devices) {
        for (const ibv_gid& gid : device->gids()) {
            if (memcmp(gid.raw, dgid, 16) == 0) {
                sgid = &gid;
                return device.get();
            }
            if (!found && memcmp(gid.raw, dgid, 8) == 0) {
                found = device.get();
                sgid = &gid;
            }
        }
    }
    return found;
}

}  // namespace

Result ConnectionManager::resolve_addr(Id& id, const Address* src, const Address& dst) {
    if (dst.ss_family != AF_INET && dst.ss_family != AF_INET6 && dst.ss_family != AF_IB) {
        return fail(EAFNOSUPPORT, "rdma_cm address family %u is not supported by uroce",
                    dst.ss_family);
    }
    if (id.state == IdState::kIdle) {
        Address any{};
        any.ss_family = dst.ss_family;
        if (dst.ss_family == AF_IB) {  // cma_bind_addr takes the destination's P_Key
            reinterpret_cast<sockaddr_ib&>(any).sib_pkey =
                reinterpret_cast<const sockaddr_ib&>(dst).sib_pkey;
        }
        if (Result r = bind(id, src && !is_any(*src) ? *src : any); !r) {
            return r;
        }
    }
    if (id.src.ss_family != dst.ss_family) {
        return fail(EINVAL, "RESOLVE_ADDR: destination family %u, bound family %u", dst.ss_family,
                    id.src.ss_family);
    }
    if (id.state != IdState::kAddrBound) {
        return fail(EINVAL, "RESOLVE_ADDR on an ID in state %s", name(id.state));
    }
    if (dst.ss_family == AF_IB) {
        return resolve_ib_addr(id, dst);
    }
    uint32_t destination = 0;
    Device* device = id.device;
    if (is_any(dst)) {
        // rdma_cm's loopback: the bound device, else the first.
        device = device ? device : devices_.front().get();
        destination = device->config().address.s_addr;
    } else if (!ipv4_of(dst, destination)) {
        return fail(ENETUNREACH, "%s: uroce devices reach IPv4 addresses only",
                    to_string(dst).c_str());
    } else if (!device) {
        if (Result r = route(devices_, destination, device); !r && r.error == ENETUNREACH) {
            return r;  // no route at all: the command fails, as rdma_resolve_ip's does
        } else if (!r) {
            id.dst = dst;
            id.state = IdState::kAddrBound;
            log_info("rdma_cm ID %u: address resolution failed: %s", id.handle, r.message.c_str());
            report(id, RDMA_CM_EVENT_ADDR_ERROR, -r.error);
            return ok();
        }
    }
    id.dst = is_any(dst) ? make_address(dst.ss_family, destination, port_of(dst)) : dst;
    id.device = device;
    if (is_any(id.src)) {
        const uint16_t port = port_of(id.src);
        id.src = make_address(id.src.ss_family, device->config().address.s_addr, port);
    }
    id.peer_ipv4 = destination;
    id.path_mtu = path_mtu_of(*device);
    id.state = IdState::kAddrResolved;
    report(id, RDMA_CM_EVENT_ADDR_RESOLVED);
    return ok();
}

// cma_resolve_ib_addr: the destination GID names the device (unless the
// ID is bound to one already), and the source GID is the device's.
Result ConnectionManager::resolve_ib_addr(Id& id, const Address& dst) {
    const ibv_gid* sgid = nullptr;
    Device* device = id.device;
    if (!device) {
        device = device_for_gid(devices_, gid_of_ib(dst), sgid);
        if (!device) {
            return fail(ENODEV, "RESOLVE_ADDR: no uroce device has a GID in the subnet of %s",
                        to_string(dst).c_str());
        }
        memcpy(reinterpret_cast<sockaddr_ib&>(id.src).sib_addr.sib_raw, sgid->raw, 16);
    }
    id.device = device;
    id.dst = dst;
    id.path_mtu = path_mtu_of(*device);
    id.state = IdState::kAddrResolved;
    report(id, RDMA_CM_EVENT_ADDR_RESOLVED);
    return ok();
}

Result ConnectionManager::resolve_route(Id& id) {
    if (id.state != IdState::kAddrResolved) {
        return fail(EINVAL, "RESOLVE_ROUTE on an ID in state %s", name(id.state));
    }
    if (id.dst.ss_family == AF_IB) {
        // A RoCE path needs the network device an IP address names; an
        // AF_IB address names none (cma_resolve_iboe_route: -ENODEV).
        return fail(ENODEV, "RESOLVE_ROUTE: AF_IB destination %s names no network device",
                    to_string(id.dst).c_str());
    }
    id.state = IdState::kRouteResolved;
    report(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return ok();
}

void ConnectionManager::fill_route(const Id& id, rdma_ucm_query_route_resp& resp) const {
    // Into sockaddr_in6-sized fields: as ucma_query_route, an AF_IB address
    // is cut to their size.
    memcpy(&resp.src_addr, &id.src, std::min(address_size(id.src), sizeof(resp.src_addr)));
    memcpy(&resp.dst_addr, &id.dst, std::min(address_size(id.dst), sizeof(resp.dst_addr)));
    if (!id.device) {
        return;
    }
    resp.node_guid = htobe64(id.device->node_guid());
    resp.port_num = 1;
    resp.ibdev_index = id.device->index();
    ib_user_path_rec& path = resp.ib_route[0];
    memcpy(path.sgid, gid_of(id.src).data(), sizeof(path.sgid));
    memcpy(path.dgid, gid_of(id.dst).data(), sizeof(path.dgid));
    path.pkey = htobe16(kDefaultPkey);
    const bool routed = id.state == IdState::kRouteResolved || id.state == IdState::kConnect ||
                        id.state == IdState::kDisconnect;
    if (!routed) {
        return;
    }
    resp.num_paths = 1;
    path.reversible = 1;
    path.mtu = id.path_mtu;
    path.mtu_selector = 2;  // exactly
    path.hop_limit = kHopLimit;
    path.traffic_class = id.tos;
    path.numb_path = 1;
    path.rate_selector = 2;
    path.packet_life_time_selector = 2;
    path.packet_life_time = kPacketLifeTime;
}

void ConnectionManager::fill_addr(const Id& id, rdma_ucm_query_addr_resp& resp) const {
    resp.src_size = static_cast<uint16_t>(address_size(id.src));
    resp.dst_size = static_cast<uint16_t>(address_size(id.dst));
    memcpy(&resp.src_addr, &id.src, resp.src_size);
    memcpy(&resp.dst_addr, &id.dst, resp.dst_size);
    resp.ibdev_index = id.device ? id.device->index() : 0;
    if (id.device) {
        resp.node_guid = htobe64(id.device->node_guid());
        resp.port_num = 1;
        resp.pkey = htobe16(kDefaultPkey);
    }
}

void ConnectionManager::fill_gid(const Id& id, rdma_ucm_query_addr_resp& resp) const {
    fill_addr(id, resp);
    // rdma_read_gids and rdma_get_service_id: an IP address's GID is its
    // IPv4-mapped form, its service ID the port space and port.
    auto as_ib = [&](const Address& address, __kernel_sockaddr_storage& out) {
        if (address.ss_family == AF_IB) {
            memcpy(&out, &address, sizeof(sockaddr_ib));
            return;
        }
        sockaddr_ib ib{};
        ib.sib_family = AF_IB;
        ib.sib_pkey = resp.pkey;
        if (id.device) {
            memcpy(ib.sib_addr.sib_raw, gid_of(address).data(), sizeof(ib.sib_addr.sib_raw));
        }
        ib.sib_sid = htobe64((uint64_t(id.ps) << 16) + port_of(address));
        memcpy(&out, &ib, sizeof(ib));
    };
    memset(&resp.src_addr, 0, sizeof(resp.src_addr));
    memset(&resp.dst_addr, 0, sizeof(resp.dst_addr));
    as_ib(id.src, resp.src_addr);
    as_ib(id.dst, resp.dst_addr);
    resp.src_size = resp.dst_size = sizeof(sockaddr_ib);
}

size_t ConnectionManager::fill_path(const Id& id, rdma_ucm_query_path_resp& resp,
                                    ib_path_rec_data* paths, size_t room) const {
    rdma_ucm_query_route_resp route{};
    fill_route(id, route);
    resp.num_paths = route.num_paths;
    if (route.num_paths == 0 || room == 0) {
        return 0;
    }
    // The SA PathRecord (IBA 15.2.5.16) as ib_sa_pack_path lays it out.
    const ib_user_path_rec& rec = route.ib_route[0];
    uint8_t* p = reinterpret_cast<uint8_t*>(paths[0].path_rec);
    memset(p, 0, sizeof(paths[0].path_rec));
    const uint64_t sid = htobe64((uint64_t(id.ps) << 16) + port_of(id.dst));
    memcpy(p, &sid, 8);
    memcpy(p + 8, rec.dgid, 16);
    memcpy(p + 24, rec.sgid, 16);
    const uint32_t flow_hop = htobe32(rec.hop_limit);
    memcpy(p + 44, &flow_hop, 4);
    p[48] = rec.traffic_class;
    p[49] = static_cast<uint8_t>(rec.reversible << 7 | rec.numb_path);
    memcpy(p + 50, &rec.pkey, 2);
    p[54] = static_cast<uint8_t>(rec.mtu_selector << 6 | rec.mtu);
    p[55] = static_cast<uint8_t>(rec.rate_selector << 6 | rec.rate);
    p[56] = static_cast<uint8_t>(rec.packet_life_time_selector << 6 | rec.packet_life_time);
    paths[0].flags = IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL;
    return 1;
}

Result ConnectionManager::set_option(Id& id, uint32_t level, uint32_t option,
                                     std::span<const uint8_t> value) {
    auto as_int = [&](int& out) {
        if (value.size() != sizeof(int)) {
            return false;
        }
        memcpy(&out, value.data(), sizeof(int));
        return true;
    };
    if (level == RDMA_OPTION_ID) {
        int flag = 0;
        switch (option) {
            case RDMA_OPTION_ID_TOS:
                if (value.size() != 1) {
                    return fail(EINVAL, "RDMA_OPTION_ID_TOS takes one byte, not %zu", value.size());
                }
                id.tos = value[0];
                return ok();
            case RDMA_OPTION_ID_REUSEADDR:
                if (!as_int(flag)) {
                    return fail(EINVAL, "RDMA_OPTION_ID_REUSEADDR takes an int");
                }
                if (id.state != IdState::kIdle && !(flag && id.state == IdState::kAddrBound)) {
                    return fail(EINVAL, "REUSEADDR on an ID in state %s", name(id.state));
                }
                id.reuseaddr = flag != 0;
                return ok();
            case RDMA_OPTION_ID_AFONLY:
                if (!as_int(flag)) {
                    return fail(EINVAL, "RDMA_OPTION_ID_AFONLY takes an int");
                }
                if (id.state != IdState::kIdle && id.state != IdState::kAddrBound) {
                    return fail(EINVAL, "AFONLY on an ID in state %s", name(id.state));
                }
                id.afonly = flag != 0;
                id.afonly_set = true;
                return ok();
            case RDMA_OPTION_ID_ACK_TIMEOUT:
                if (value.size() != 1) {
                    return fail(EINVAL, "RDMA_OPTION_ID_ACK_TIMEOUT takes one byte");
                }
                if (id.qp_type != IBV_QPT_RC && id.qp_type != IBV_QPT_XRC_SEND) {
                    return fail(EINVAL, "an ACK timeout is for RC and XRC IDs");
                }
                id.ack_timeout = std::min<uint8_t>(value[0], 31);
                return ok();
            default:
                return fail(ENOSYS, "rdma_cm option %u of level ID is unknown", option);
        }
    }
    if (level == RDMA_OPTION_IB && option == RDMA_OPTION_IB_PATH) {
        // A path record the program got elsewhere stands for route resolution.
        constexpr size_t kRecord = sizeof(ib_path_rec_data);
        constexpr uint32_t kPrimary = IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL;
        if (value.empty() || value.size() % kRecord) {
            return fail(EINVAL, "RDMA_OPTION_IB_PATH takes whole path records");
        }
        bool primary = false;
        for (size_t at = 0; at < value.size(); at += kRecord) {
            ib_path_rec_data record;
            memcpy(&record, value.data() + at, kRecord);
            primary |= record.flags == kPrimary;
        }
        if (!primary) {
            return fail(EINVAL, "RDMA_OPTION_IB_PATH: no primary bidirectional record");
        }
        if (id.state != IdState::kAddrResolved) {
            return fail(EINVAL, "RDMA_OPTION_IB_PATH on an ID in state %s", name(id.state));
        }
        id.state = IdState::kRouteResolved;
        report(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
        return ok();
    }
    return fail(ENOSYS, "rdma_cm option level %u name %u is unknown", level, option);
}

// ---- connections -----------------------------------------------------------

Result ConnectionManager::listen(Id& id, uint32_t backlog) {
    if (id.state == IdState::kIdle) {
        Address any{};
        any.ss_family = AF_INET;
        if (Result r = bind(id, any); !r) {
            return r;
        }
    }
    if (id.state != IdState::kAddrBound) {
        return fail(EINVAL, "LISTEN on an ID in state %s", name(id.state));
    }
    if (id.reuseaddr) {
        // Sharing a port to bind is not sharing it to listen.
        for (uint32_t handle : ports_[{id.bound_ps, port_of(id.src)}]) {
            const Id& other = *ids_.find(handle);
            if (&other != &id && conflicts(id, other, true)) {
                return fail(is_any(id.src) || is_any(other.src) ? EADDRNOTAVAIL : EADDRINUSE,
                            "%s is taken by rdma_cm ID %u", to_string(id.src).c_str(),
                            other.handle);
            }
        }
    }
    // A listener's port is its own from now on (rdma_listen clears reuseaddr).
    id.reuseaddr = false;
    id.backlog = backlog;
    id.state = IdState::kListen;
    ids_.index_listener(id);
    return ok();
}

Result ConnectionManager::connect(Id& id, const ConnParam& param) {
    if (id.state != IdState::kRouteResolved) {
        return fail(EINVAL, "CONNECT on an ID in state %s", name(id.state));
    }
    const uint32_t src_ipv4 = ipv4_or_zero(id.src);
    IpCmHeader header;
    header.ip_version = 4;
    header.src_port = port_of(id.src);
    header.src_ip = ipv4_address(src_ipv4);
    header.dst_ip = ipv4_address(id.peer_ipv4);
    const auto ip_header = encode_ip_cm_header(header);
    const uint64_t service = service_id(port_space(id.ps), port_of(id.dst));
    ids_.assign_comm_id(id);
    id.transaction_id = (id.transaction_id & ~0xffffffffull) | id.local_comm_id;
    if (is_ud(id)) {
        if (param.private_data.size() > SidrReq{}.private_data.size() - kUserPrivateOffset) {
            return fail(EINVAL, "UD CONNECT private data of %zu bytes (at most %zu)",
                        param.private_data.size(),
                        SidrReq{}.private_data.size() - kUserPrivateOffset);
        }
        SidrReq req;
        req.request_id = id.local_comm_id;
        req.pkey = kDefaultPkey;
        req.service_id = service;
        req.private_data = private_data<216>(param.private_data, kUserPrivateOffset);
        std::copy(ip_header.begin(), ip_header.end(), req.private_data.begin());
        id.cm = CmState::kSidrReqSent;
        id.state = IdState::kConnect;
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, req, true);
        return ok();
    }
    if (param.private_data.size() > Req{}.private_data.size() - kUserPrivateOffset) {
        return fail(EINVAL, "CONNECT private data of %zu bytes (at most %zu)",
                    param.private_data.size(), Req{}.private_data.size() - kUserPrivateOffset);
    }
    id.qp_num = param.qp_num & wire::kQpnMask;
    id.responder_resources = param.responder_resources;
    id.initiator_depth = param.initiator_depth;
    id.retry_count = std::min<uint8_t>(param.retry_count, 7);
    id.rnr_retry_count = std::min<uint8_t>(param.rnr_retry_count, 7);
    Req req;
    req.local_comm_id = id.local_comm_id;
    req.service_id = service;
    req.local_ca_guid = id.device->node_guid();
    req.local_qpn = id.qp_num;
    req.responder_resources = id.responder_resources;
    req.initiator_depth = id.initiator_depth;
    req.remote_cm_response_timeout = kCmResponseTimeout;
    req.transport_service =
        id.qp_type == IBV_QPT_UC ? TransportService::kUc : TransportService::kRc;
    req.end_to_end_flow_control = param.flow_control;
    req.starting_psn = id.seq_num;
    req.local_cm_response_timeout = kCmResponseTimeout;
    req.retry_count = id.retry_count;
    req.pkey = kDefaultPkey;
    req.path_mtu = id.path_mtu;
    req.rnr_retry_count = id.rnr_retry_count;
    req.max_cm_retries = kMaxCmRetries;
    req.srq = param.srq;
    req.primary.local_lid = 0xffff;  // permissive: RoCE routes by GID
    req.primary.remote_lid = 0xffff;
    req.primary.local_gid = gid_of(src_ipv4);
    req.primary.remote_gid = gid_of(id.peer_ipv4);
    req.primary.traffic_class = id.tos;
    req.primary.hop_limit = kHopLimit;
    req.primary.local_ack_timeout = kAckTimeout;
    req.private_data = private_data<92>(param.private_data, kUserPrivateOffset);
    std::copy(ip_header.begin(), ip_header.end(), req.private_data.begin());
    id.has_cm = true;
    id.cm = CmState::kReqSent;
    id.state = IdState::kConnect;
    // cm.c: twice the packet lifetime and the peer's CM response time.
    id.retry_interval = 2 * iba_time(kPacketLifeTime) + iba_time(kCmResponseTimeout);
    send(id, req, true);
    return ok();
}

Result ConnectionManager::accept(Id& id, uint64_t uid, const ConnParam* param) {
    if (id.state != IdState::kConnect) {
        return fail(EINVAL, "ACCEPT on an ID in state %s", name(id.state));
    }
    if (id.cm == CmState::kSidrReqRcvd) {
        if (!param) {
            return fail(EINVAL, "ACCEPT of a UD request needs connection parameters");
        }
        if (param->private_data.size() > SidrRep{}.private_data.size()) {
            return fail(EINVAL, "ACCEPT private data of %zu bytes (at most %zu)",
                        param->private_data.size(), SidrRep{}.private_data.size());
        }
        SidrRep rep;
        rep.request_id = id.remote_comm_id;
        rep.status = SidrStatus::kSuccess;
        rep.qpn = param->qp_num & wire::kQpnMask;
        rep.service_id = service_id(port_space(id.ps), port_of(id.src));
        rep.qkey = kUdpQkey;
        rep.private_data = private_data<136>(param->private_data);
        id.uid = uid;
        id.reporting = true;
        id.cm = CmState::kIdle;
        send(id, rep, false);
        return ok();
    }
    if (id.cm == CmState::kReqRcvd || id.cm == CmState::kMraReqSent) {
        if (!param) {
            return fail(EINVAL, "ACCEPT of a connection request needs connection parameters");
        }
        if (param->private_data.size() > Rep{}.private_data.size()) {
            return fail(EINVAL, "ACCEPT private data of %zu bytes (at most %zu)",
                        param->private_data.size(), Rep{}.private_data.size());
        }
        id.qp_num = param->qp_num & wire::kQpnMask;
        id.responder_resources = param->responder_resources;
        id.initiator_depth = param->initiator_depth;
        Rep rep;
        rep.local_comm_id = id.local_comm_id;
        rep.remote_comm_id = id.remote_comm_id;
        rep.local_qpn = id.qp_num;
        rep.starting_psn = id.seq_num;
        rep.responder_resources = id.responder_resources;
        rep.initiator_depth = id.initiator_depth;
        rep.end_to_end_flow_control = param->flow_control;
        // The REP tells the active side its RNR retries; this side keeps
        // the REQ's (ib_send_cm_rep).
        rep.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
        rep.srq = param->srq;
        rep.local_ca_guid = id.device->node_guid();
        rep.private_data = private_data<196>(param->private_data);
        id.uid = uid;
        id.reporting = true;
        id.cm = CmState::kRepSent;
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, rep, true);
        return ok();
    }
    if (id.cm == CmState::kRepRcvd || id.cm == CmState::kMraRepSent) {
        // The active side's ACCEPT after CONNECT_RESPONSE: the RTU.
        Rtu rtu;
        rtu.local_comm_id = id.local_comm_id;
        rtu.remote_comm_id = id.remote_comm_id;
        id.cm = CmState::kEstablished;
        send(id, rtu, false);
        return ok();
    }
    return fail(EINVAL, "ACCEPT while the connection is %s", name(id.cm));
}

Result ConnectionManager::reject(Id& id, std::span<const uint8_t> data, uint8_t reason) {
    const RejectReason why =
        reason ? static_cast<RejectReason>(reason) : RejectReason::kConsumerDefined;
    if (why != RejectReason::kConsumerDefined && why != RejectReason::kVendorOptionNotSupported) {
        return fail(EINVAL, "REJECT reason %u: a program may give 28 or 35", reason);
    }
    if (id.cm == CmState::kSidrReqRcvd) {
        if (data.size() > SidrRep{}.private_data.size()) {
            return fail(EINVAL, "REJECT private data of %zu bytes (at most %zu)", data.size(),
                        SidrRep{}.private_data.size());
        }
        SidrRep rep;
        rep.request_id = id.remote_comm_id;
        rep.status = SidrStatus::kReject;
        rep.service_id = service_id(port_space(id.ps), port_of(id.src));
        rep.private_data = private_data<136>(data);
        id.cm = CmState::kIdle;
        send(id, rep, false);
        return ok();
    }
    const bool answering = id.cm == CmState::kReqRcvd || id.cm == CmState::kMraReqSent ||
                           id.cm == CmState::kRepRcvd || id.cm == CmState::kMraRepSent;
    if (!answering) {
        return fail(EINVAL, "REJECT while the connection is %s", name(id.cm));
    }
    if (data.size() > Rej{}.private_data.size()) {
        return fail(EINVAL, "REJECT private data of %zu bytes (at most %zu)", data.size(),
                    Rej{}.private_data.size());
    }
    Rej rej = rej_of(id, why);
    rej.private_data = private_data<148>(data);
    id.cm = CmState::kIdle;
    id.has_cm = false;
    send(id, rej, false);
    return ok();
}

Result ConnectionManager::disconnect(Id& id) {
    if (!id.has_cm) {
        return fail(EINVAL, "DISCONNECT on an ID without a connection");
    }
    if (id.cm == CmState::kEstablished) {
        Dreq dreq;
        dreq.local_comm_id = id.local_comm_id;
        dreq.remote_comm_id = id.remote_comm_id;
        dreq.remote_qpn_eecn = id.remote_qpn;
        id.cm = CmState::kDreqSent;
        id.retry_interval = iba_time(kCmResponseTimeout);
        send(id, dreq, true);
    } else if (id.cm == CmState::kDreqRcvd) {
        Drep drep;
        drep.local_comm_id = id.local_comm_id;
        drep.remote_comm_id = id.remote_comm_id;
        send(id, drep, false);
        enter_timewait(id);
    }
    // Anything else: neither a DREQ nor a DREP may go; rdma_disconnect still succeeds.
    return ok();
}

Result ConnectionManager::notify(Id& id, uint32_t event) {
    if (!id.has_cm) {
        return fail(EINVAL, "NOTIFY on an ID without a connection");
    }
    if (event == IBV_EVENT_COMM_EST) {
        if (id.cm == CmState::kEstablished) {
            return fail(EISCONN, "the connection is established already");
        }
        if (id.cm != CmState::kRepSent) {
            return fail(EINVAL, "COMM_EST while the connection is %s", name(id.cm));
        }
        on_rtu(id);  // the first packet on the QP stands for the RTU
        return ok();
    }
    if (event == IBV_EVENT_PATH_MIG) {
        return ok();
    }
    return fail(EINVAL, "NOTIFY of event %u", event);
}

Result ConnectionManager::resolve_ib_service(Id& id) {
    if (id.state != IdState::kAddrBound || !id.device) {
        return fail(EINVAL, "RESOLVE_IB_SERVICE on an ID in state %s: it must be bound to a device",
                    name(id.state));
    }
    return fail(EOPNOTSUPP, "RESOLVE_IB_SERVICE: RoCE has no subnet administrator to ask");
}

Result ConnectionManager::write_event(Id& id, uint32_t event, uint32_t status, uint64_t arg) {
    Channel::Event entry = event_of(id, event, status);
    memcpy(&entry.resp.param, &arg, sizeof(arg));  // param.arg32[2] in newer headers
    if (!queue(*id.channel, entry)) {
        return fail(ENOMEM, "WRITE_CM_EVENT: the channel holds %zu events nobody took",
                    id.channel->events.size());
    }
    return ok();
}

// ---- INIT_QP_ATTR ------------------------------------------------------------

Result ConnectionManager::init_qp_attr(Id& id, uint32_t qp_state, ib_uverbs_qp_attr& attr) {
    if (!id.device) {
        return fail(EINVAL, "INIT_QP_ATTR on an ID with no device yet");
    }
    attr.qp_state = qp_state;
    if (!id.has_cm || is_ud(id)) {
        // cma_ib_init_qp_attr: what INIT needs, whatever the state asked.
        attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        attr.pkey_index = 0;
        attr.port_num = 1;
        if (is_ud(id)) {
            attr.qkey = id.qkey ? id.qkey : kUdpQkey;
            attr.qp_attr_mask |= IBV_QP_QKEY;
        } else {
            attr.qp_access_flags = 0;
            attr.qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
        }
    } else {
        const bool answered = id.cm != CmState::kIdle && id.cm != CmState::kReqSent &&
                              id.cm != CmState::kDreqSent && id.cm != CmState::kDreqRcvd &&
                              id.cm != CmState::kTimewait;
        switch (qp_state) {
            case IBV_QPS_INIT:
                if (id.cm == CmState::kIdle || id.cm == CmState::kTimewait) {
                    return fail(EINVAL, "INIT_QP_ATTR(INIT) while the connection is %s",
                                name(id.cm));
                }
                attr.qp_attr_mask =
                    IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
                attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                if (id.responder_resources) {
                    attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                }
                attr.pkey_index = 0;
                attr.port_num = 1;
                break;
            case IBV_QPS_RTR: {
                if (!answered) {
                    return fail(EINVAL, "INIT_QP_ATTR(RTR) while the connection is %s",
                                name(id.cm));
                }
                attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER;
                const Gid dgid = gid_of(id.peer_ipv4);
                memcpy(attr.ah_attr.grh.dgid, dgid.data(), sizeof(attr.ah_attr.grh.dgid));
                attr.ah_attr.grh.sgid_index = 0;
                attr.ah_attr.grh.hop_limit = kHopLimit;
                attr.ah_attr.grh.traffic_class = id.tos;
                attr.ah_attr.is_global = 1;
                attr.ah_attr.port_num = 1;
                attr.path_mtu = id.path_mtu;
                attr.dest_qp_num = id.remote_qpn;
                attr.max_dest_rd_atomic = id.responder_resources;
                attr.min_rnr_timer = 0;
                break;
            }
            case IBV_QPS_RTS:
                if (!answered) {
                    return fail(EINVAL, "INIT_QP_ATTR(RTS) while the connection is %s",
                                name(id.cm));
                }
                attr.qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT;
                attr.sq_psn = id.sq_psn;
                attr.retry_cnt = id.retry_count;
                attr.rnr_retry = id.rnr_retry_count;
                attr.max_rd_atomic = id.initiator_depth;
                attr.timeout = kAckTimeout;
                break;
            default:
                return fail(EINVAL, "INIT_QP_ATTR for QP state %u of a connection", qp_state);
        }
    }
    if (qp_state == IBV_QPS_RTR) {
        attr.rq_psn = id.seq_num;  // rdma_init_qp_attr: this side's own starting PSN
    }
    if ((attr.qp_attr_mask & IBV_QP_TIMEOUT) && id.ack_timeout) {
        attr.timeout = *id.ack_timeout;
    }
    return ok();
}

// ---- the wire ----------------------------------------------------------------

void ConnectionManager::send(Id& id, const Message& message, bool retransmit) {
    const auto mad = encode(id.transaction_id, message);
    ++id.device->stats().cm_mads_sent;
    send_mad_(*id.device, id.peer_ipv4, mad);
    if (retransmit) {
        id.pending_mad = std::make_unique<std::array<std::byte, kMadSize>>(mad);
        id.retries_left = kMaxCmRetries;
        arm_retry(id);
    } else {
        stop_retransmitting(id);
    }
}

void ConnectionManager::send_mra(Id& id, Answered answered) {
    Mra mra;
    mra.local_comm_id = id.local_comm_id;
    mra.remote_comm_id = id.remote_comm_id;
    mra.message_mraed = answered;
    mra.service_timeout = kMraServiceTimeout;
    send(id, mra, false);
}

// The listener's backlog, and the ID tables (the daemon's and the listener's
// client's share), have room for one more request's ID.
bool ConnectionManager::room_for_request(const Id& listener) const {
    return listener.backlog > 0 && ids_.size() < kMaxIds &&
           ids_.held_by(listener.channel->pid) < kMaxIdsPerClient;
}

Id& ConnectionManager::requested_id(const Id& listener, Device& to, const IpCmHeader& header) {
    Id& id = new_id(*listener.channel, 0, listener.ps, listener.qp_type);
    const sa_family_t family = listener.src.ss_family;
    id.reporting = false;
    id.state = IdState::kConnect;
    id.device = &to;
    id.src = make_address(family, to.config().address.s_addr, port_of(listener.src));
    id.dst = make_address(family, ipv4_of(header.src_ip), header.src_port);
    id.listener = listener.handle;
    return id;
}

void ConnectionManager::send_reply(Device& from, uint32_t dest_ipv4, uint64_t transaction_id,
                                   const Message& message) {
    ++from.stats().cm_mads_sent;
    send_mad_(from, dest_ipv4, encode(transaction_id, message));
}

void ConnectionManager::arm_retry(Id& id) {
    start_timer(id, id.retry_interval);
}

// An ID's timer exists only once it retransmits or waits in timewait, so
// that an idle ID costs little memory.
void ConnectionManager::start_timer(Id& id, std::chrono::milliseconds after) {
    if (!id.timer) {
        id.timer = std::make_unique<boost::asio::steady_timer>(io_);
    }
    id.timer->expires_after(after);
    id.timer->async_wait([this, handle = id.handle](const boost::system::error_code& error) {
        if (!error) {
            on_retry_timer(handle);
        }
    });
}

void ConnectionManager::stop_retransmitting(Id& id) {
    id.pending_mad.reset();
    if (id.timer) {
        id.timer->cancel();
    }
}

void ConnectionManager::on_retry_timer(uint32_t handle) {
    Id* id = ids_.find(handle);
    if (!id) {
        return;
    }
    if (id->cm == CmState::kTimewait) {
        id->cm = CmState::kIdle;
        ids_.forget_connection(*id);
        report(*id, RDMA_CM_EVENT_TIMEWAIT_EXIT);
        return;
    }
    if (!id->pending_mad) {
        return;
    }
    if (id->retries_left > 0) {
        --id->retries_left;
        ++id->device->stats().cm_mads_sent;
        ++id->device->stats().cm_mads_retried;
        send_mad_(*id->device, id->peer_ipv4, *id->pending_mad);
        arm_retry(*id);
        return;
    }
    // Out of retries: what cm.c reports for each message that went unanswered.
    id->pending_mad.reset();
    log_info("rdma_cm ID %u: no answer from %s after %d retries (%s)", id->handle,
             to_string(id->dst).c_str(), kMaxCmRetries, name(id->cm));
    switch (id->cm) {
        case CmState::kReqSent:
        case CmState::kRepSent:
        case CmState::kSidrReqSent:
            id->cm = CmState::kIdle;
            id->has_cm = false;
            report(*id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
            break;
        case CmState::kDreqSent:
            report(*id, RDMA_CM_EVENT_DISCONNECTED);
            id->state = IdState::kDisconnect;
            enter_timewait(*id);
            break;
        default:
            break;
    }
}

void ConnectionManager::enter_timewait(Id& id) {
    id.cm = CmState::kTimewait;
    id.pending_mad.reset();
    start_timer(id, iba_time(kAckTimeout));
}

void ConnectionManager::abandon_connection(Id& id) {
    if (!id.device) {
        return;
    }
    auto rej = [&](RejectReason reason) {
        Rej message = rej_of(id, reason);
        if (reason == RejectReason::kTimeout) {
            // cm_destroy_id: the peer finds the connection by our CA GUID.
            const uint64_t guid = htobe64(id.device->node_guid());
            memcpy(message.ari.data(), &guid, sizeof(guid));
            message.reject_info_length = sizeof(guid);
        }
        send(id, message, false);
    };
    switch (id.cm) {
        case CmState::kReqSent:
            rej(RejectReason::kTimeout);
            break;
        case CmState::kReqRcvd:
        case CmState::kMraReqSent:
        case CmState::kRepSent:
        case CmState::kRepRcvd:
        case CmState::kMraRepSent:
            rej(RejectReason::kConsumerDefined);
            break;
        case CmState::kEstablished: {
            Dreq dreq;
            dreq.local_comm_id = id.local_comm_id;
            dreq.remote_comm_id = id.remote_comm_id;
            dreq.remote_qpn_eecn = id.remote_qpn;
            send(id, dreq, false);
            break;
        }
        case CmState::kDreqRcvd: {
            Drep drep;
            drep.local_comm_id = id.local_comm_id;
            drep.remote_comm_id = id.remote_comm_id;
            send(id, drep, false);
            break;
        }
        case CmState::kSidrReqRcvd: {
            SidrRep rep;
            rep.request_id = id.remote_comm_id;
            rep.status = SidrStatus::kReject;
            rep.service_id = service_id(port_space(id.ps), port_of(id.src));
            send(id, rep, false);
            break;
        }
        default:
            break;
    }
    id.cm = CmState::kIdle;
}

void ConnectionManager::receive_mad(Device& to, uint32_t src_ipv4, std::span<const uint8_t> bytes) {
    ++to.stats().cm_mads_rcvd;
    Mad mad;
    if (decode(std::as_bytes(bytes), mad) != DecodeError::kOk) {
        ++to.stats().cm_mads_dropped;
        return;
    }
    handle(to, src_ipv4, mad);
}

Id* ConnectionManager::by_comm_id(uint32_t local_comm_id, uint32_t src_ipv4) {
    Id* id = ids_.by_comm_id(local_comm_id);
    // Only the peer the connection was made with speaks for it.
    return id && id->peer_ipv4 == src_ipv4 ? id : nullptr;
}

void ConnectionManager::handle(Device& to, uint32_t src_ipv4, const Mad& mad) {
    const uint64_t tid = mad.header.transaction_id;
    if (const auto* req = std::get_if<Req>(&mad.message)) {
        on_req(to, src_ipv4, tid, *req);
        return;
    }
    if (const auto* req = std::get_if<SidrReq>(&mad.message)) {
        on_sidr_req(to, src_ipv4, tid, *req);
        return;
    }
    // Every other message names our side's communication ID and, as the
    // kernel's cm.c matches them, the peer's too once it is known: anything
    // else is stale or forged, and changes nothing.
    auto ours = [&](uint32_t local) -> Id* {
        Id* id = by_comm_id(local, src_ipv4);
        return id && id->device == &to ? id : nullptr;
    };
    auto both = [&](uint32_t local, uint32_t remote) -> Id* {
        Id* id = ours(local);
        return id && id->remote_comm_id == remote ? id : nullptr;
    };
    // REP and MRA before the peer's ID is known (cm_rep_handler,
    // cm_mra_handler), both once it is (cm_dup_rep_handler).
    auto ours_then_both = [&](uint32_t local, uint32_t remote) -> Id* {
        Id* id = ours(local);
        return id && (!id->remote_comm_id || id->remote_comm_id == remote) ? id : nullptr;
    };
    Id* id = nullptr;
    std::visit(
        [&](const auto& message) {
            using T = std::decay_t<decltype(message)>;
            if constexpr (std::is_same_v<T, Rep>) {
                if ((id = ours_then_both(message.remote_comm_id, message.local_comm_id))) {
                    on_rep(*id, message);
                }
            } else if constexpr (std::is_same_v<T, Rtu>) {
                if ((id = both(message.remote_comm_id, message.local_comm_id))) {
                    on_rtu(*id);
                }
            } else if constexpr (std::is_same_v<T, Rej>) {
                // cm_acquire_rejected_id: a REJ for a timeout names the peer's
                // side alone; any other, ours (and theirs once known).
                id = message.reason == RejectReason::kTimeout
                         ? gave_up(to, src_ipv4, message)
                         : ours_then_both(message.remote_comm_id, message.local_comm_id);
                if (id) {
                    on_rej(*id, message);
                }
            } else if constexpr (std::is_same_v<T, Mra>) {
                if ((id = ours_then_both(message.remote_comm_id, message.local_comm_id))) {
                    on_mra(*id, message);
                }
            } else if constexpr (std::is_same_v<T, Dreq>) {
                if ((id = both(message.remote_comm_id, message.local_comm_id))) {
                    on_dreq(*id, message);
                } else if (by_comm_id(message.remote_comm_id, src_ipv4) ||
                           !ids_.by_comm_id(message.remote_comm_id)) {
                    // cm_issue_drep: a DREQ for no connection is answered, so
                    // that a peer whose DREP was lost stops asking. (One that
                    // names a connection from another address is dropped.)
                    Drep drep;
                    drep.local_comm_id = message.remote_comm_id;
                    drep.remote_comm_id = message.local_comm_id;
                    send_reply(to, src_ipv4, tid, drep);
                }
            } else if constexpr (std::is_same_v<T, Drep>) {
                if ((id = both(message.remote_comm_id, message.local_comm_id))) {
                    on_drep(*id);
                }
            } else if constexpr (std::is_same_v<T, SidrRep>) {
                if ((id = ours(message.request_id))) {
                    on_sidr_rep(*id, message);
                }
            }
        },
        mad.message);
    if (!id) {
        ++to.stats().cm_mads_dropped;
    }
}

// An active side that gave up before it knew our communication ID (its
// REJ for a timeout, cm_destroy_id) names its own, with its CA GUID in the
// ARI: both must be those of the connection's peer.
Id* ConnectionManager::gave_up(Device& to, uint32_t src_ipv4, const Rej& rej) {
    Id* id = ids_.by_peer(&to, src_ipv4, rej.local_comm_id);
    const bool guid =
        id && rej.reject_info_length >= sizeof(uint64_t) &&
        wire::load_be64(reinterpret_cast<const uint8_t*>(rej.ari.data())) == id->remote_ca_guid;
    return guid ? id : nullptr;
}

Id* ConnectionManager::find_listener(Device& to, uint16_t ps, uint16_t port, uint32_t dest_ipv4) {
    Id* wildcard = nullptr;
    for (Id* id : ids_.listeners(ps, port)) {
        if (id->state != IdState::kListen) {
            continue;
        }
        if (is_any(id->src)) {
            // An IPv6-only wildcard does not hear IPv4.
            if (!(id->src.ss_family == AF_INET6 && id->afonly)) {
                wildcard = wildcard ? wildcard : id;
            }
            continue;
        }
        uint32_t ipv4;
        if (ipv4_of(id->src, ipv4) && ipv4 == dest_ipv4 && (!id->device || id->device == &to)) {
            return id;
        }
    }
    return wildcard;
}

void ConnectionManager::on_req(Device& to, uint32_t src_ipv4, uint64_t tid, const Req& req) {
    // A REQ again (cm_dup_req_handler): while the program decides, an MRA
    // says so; in timewait the connection is stale; otherwise nothing.
    if (Id* id = ids_.by_peer(&to, src_ipv4, req.local_comm_id)) {
        if (id->cm == CmState::kMraReqSent) {
            send_mra(*id, Answered::kReq);
        } else if (id->cm == CmState::kTimewait) {
            send_reply(to, src_ipv4, tid, rej_of(*id, RejectReason::kStaleConnection));
        } else {
            ++to.stats().cm_mads_dropped;
        }
        return;
    }
    const auto header = decode_ip_cm_header(req.private_data);
    const PortSpace ps = port_space_of(req.service_id);
    auto refuse = [&](RejectReason reason) {
        Rej rej;
        rej.remote_comm_id = req.local_comm_id;
        rej.message_rejected = Answered::kReq;
        rej.reason = reason;
        send_reply(to, src_ipv4, tid, rej);
    };
    if (!header || header->ip_version != 4 ||
        ipv4_of(header->dst_ip) != to.config().address.s_addr ||
        (ps != PortSpace::kTcp && ps != PortSpace::kIb)) {
        refuse(RejectReason::kInvalidServiceId);
        return;
    }
    Id* listener = find_listener(to, static_cast<uint16_t>(ps), cm::port_of(req.service_id),
                                 ipv4_of(header->dst_ip));
    if (!listener || listener->qp_type == IBV_QPT_UD) {
        refuse(RejectReason::kInvalidServiceId);
        return;
    }
    if (req.path_mtu < IBV_MTU_256 || req.path_mtu > IBV_MTU_4096) {
        refuse(RejectReason::kInvalidMtu);  // rdma_accept could not use it
        return;
    }
    if (!room_for_request(*listener)) {
        // Not refused: the peer sends its REQ again, and by then the program
        // may have taken a request (cm.c resets to idle "to allow future
        // retries").
        log_info("rdma_cm: a connection request to %s waits: its listener's backlog is full",
                 to_string(listener->src).c_str());
        return;
    }
    Id& id = requested_id(*listener, to, *header);
    id.has_cm = true;
    id.cm = CmState::kReqRcvd;
    ids_.assign_comm_id(id);
    id.transaction_id |= id.local_comm_id;
    id.remote_comm_id = req.local_comm_id;
    id.remote_ca_guid = req.local_ca_guid;
    id.peer_ipv4 = src_ipv4;
    ids_.index_peer(id);
    id.remote_qpn = req.local_qpn;
    id.sq_psn = req.starting_psn;
    id.path_mtu = std::min<uint8_t>(req.path_mtu, path_mtu_of(to));
    id.responder_resources = req.initiator_depth;
    id.initiator_depth = req.responder_resources;
    id.retry_count = req.retry_count;
    id.rnr_retry_count = req.rnr_retry_count;
    id.tos = req.primary.traffic_class;

    Channel::Event event{listener->handle, id.handle, {}};
    event.resp.uid = listener->uid;
    event.resp.id = id.handle;
    event.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    rdma_ucm_conn_param& conn = event.resp.param.conn;
    copy_conn_private(conn, std::span(req.private_data).subspan(kUserPrivateOffset));
    conn.responder_resources = id.responder_resources;
    conn.initiator_depth = id.initiator_depth;
    conn.flow_control = req.end_to_end_flow_control;
    conn.retry_count = req.retry_count;
    conn.rnr_retry_count = req.rnr_retry_count;
    conn.srq = req.srq;
    conn.qp_num = req.local_qpn;
    if (!queue(*listener->channel, event)) {
        abandon_connection(id);
        erase(id);
        return;
    }
    --listener->backlog;
    // rdma_cm's MRA waits (IB_CM_MRA_FLAG_DELAY): it goes only in answer to
    // the REQ sent again while the program still decides.
    id.cm = CmState::kMraReqSent;
}

void ConnectionManager::on_sidr_req(Device& to, uint32_t src_ipv4, uint64_t tid,
                                    const SidrReq& req) {
    if (ids_.sidr_request(&to, src_ipv4, req.request_id)) {
        return;  // the program has not answered the first one yet
    }
    auto refuse = [&](SidrStatus status) {
        SidrRep rep;
        rep.request_id = req.request_id;
        rep.status = status;
        rep.service_id = req.service_id;
        send_reply(to, src_ipv4, tid, rep);
    };
    const auto header = decode_ip_cm_header(req.private_data);
    const PortSpace ps = port_space_of(req.service_id);
    if (!header || header->ip_version != 4 ||
        ipv4_of(header->dst_ip) != to.config().address.s_addr) {
        refuse(SidrStatus::kUnsupported);
        return;
    }
    Id* listener = find_listener(to, static_cast<uint16_t>(ps), cm::port_of(req.service_id),
                                 ipv4_of(header->dst_ip));
    if (!listener || listener->qp_type != IBV_QPT_UD) {
        refuse(SidrStatus::kUnsupported);
        return;
    }
    if (!room_for_request(*listener)) {
        refuse(SidrStatus::kReject);
        return;
    }
    Id& id = requested_id(*listener, to, *header);
    id.cm = CmState::kSidrReqRcvd;
    id.remote_comm_id = req.request_id;
    id.peer_ipv4 = src_ipv4;
    ids_.index_sidr_request(id);
    id.transaction_id = tid;
    id.path_mtu = path_mtu_of(to);

    Channel::Event event{listener->handle, id.handle, {}};
    event.resp.uid = listener->uid;
    event.resp.id = id.handle;
    event.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    rdma_ucm_ud_param& ud = event.resp.param.ud;
    const auto user = std::span(req.private_data).subspan(kUserPrivateOffset);
    memcpy(ud.private_data, user.data(), user.size());
    ud.private_data_len = static_cast<uint8_t>(user.size());
    if (!queue(*listener->channel, event)) {
        erase(id);
        refuse(SidrStatus::kReject);
        return;
    }
    --listener->backlog;
}

void ConnectionManager::fill_ud_param(const Id& id, rdma_ucm_ud_param& ud) const {
    const Gid dgid = gid_of(id.peer_ipv4);
    memcpy(ud.ah_attr.grh.dgid, dgid.data(), sizeof(ud.ah_attr.grh.dgid));
    ud.ah_attr.grh.sgid_index = 0;
    ud.ah_attr.grh.hop_limit = kHopLimit;
    ud.ah_attr.grh.traffic_class = id.tos;
    ud.ah_attr.is_global = 1;
    ud.ah_attr.port_num = 1;
}

void ConnectionManager::on_rep(Id& id, const Rep& rep) {
    if (id.cm == CmState::kEstablished) {
        // Our RTU was lost: say it again.
        Rtu rtu;
        rtu.local_comm_id = id.local_comm_id;
        rtu.remote_comm_id = id.remote_comm_id;
        send(id, rtu, false);
        return;
    }
    if (id.cm == CmState::kMraRepSent) {
        // The REP again while the program has not accepted: ask for time.
        send_mra(id, Answered::kRep);
        return;
    }
    if (id.cm != CmState::kReqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    id.remote_comm_id = rep.local_comm_id;
    id.remote_ca_guid = rep.local_ca_guid;
    ids_.index_peer(id);
    id.remote_qpn = rep.local_qpn;
    id.sq_psn = rep.starting_psn;
    id.initiator_depth = rep.responder_resources;
    id.responder_resources = rep.initiator_depth;
    id.rnr_retry_count = rep.rnr_retry_count;
    stop_retransmitting(id);
    // The program answers with ACCEPT; an MRA goes only if the REP comes again.
    id.cm = CmState::kMraRepSent;
    report(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, [&](rdma_ucm_event_resp& resp) {
        rdma_ucm_conn_param& conn = resp.param.conn;
        copy_conn_private(conn, rep.private_data);
        conn.responder_resources = rep.initiator_depth;
        conn.initiator_depth = rep.responder_resources;
        conn.flow_control = rep.end_to_end_flow_control;
        conn.rnr_retry_count = rep.rnr_retry_count;
        conn.srq = rep.srq;
        conn.qp_num = rep.local_qpn;
    });
}

void ConnectionManager::on_rtu(Id& id) {
    if (id.cm != CmState::kRepSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    stop_retransmitting(id);
    id.cm = CmState::kEstablished;
    report(id, RDMA_CM_EVENT_ESTABLISHED);
}

// cm_rej_handler: a REJ ends the connection in any state but the quiet
// ones; a stale connection, or one that got as far as a REP, goes through
// timewait.
void ConnectionManager::on_rej(Id& id, const Rej& rej) {
    switch (id.cm) {
        case CmState::kReqSent:
        case CmState::kRepSent:
        case CmState::kReqRcvd:
        case CmState::kMraReqSent:
            stop_retransmitting(id);
            if (rej.reason == RejectReason::kStaleConnection) {
                enter_timewait(id);
            } else {
                id.cm = CmState::kIdle;
                id.has_cm = false;
            }
            break;
        case CmState::kDreqSent:
        case CmState::kRepRcvd:
        case CmState::kMraRepSent:
        case CmState::kEstablished:
            enter_timewait(id);
            break;
        default:
            ++id.device->stats().cm_mads_dropped;
            return;
    }
    report(
        id, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(rej.reason),
        [&](rdma_ucm_event_resp& resp) { copy_conn_private(resp.param.conn, rej.private_data); });
}

void ConnectionManager::on_mra(Id& id, const Mra& mra) {
    const bool ours = (id.cm == CmState::kReqSent && mra.message_mraed == Answered::kReq) ||
                      (id.cm == CmState::kRepSent && mra.message_mraed == Answered::kRep);
    if (!ours || !id.pending_mad) {
        return;  // an MRA for what we no longer wait on
    }
    // The peer asks for time: wait that long before sending again.
    id.retry_interval = iba_time(mra.service_timeout) + iba_time(kAckTimeout);
    arm_retry(id);
}

void ConnectionManager::on_dreq(Id& id, const Dreq& dreq) {
    if (dreq.remote_qpn_eecn != id.qp_num) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    Drep drep;
    drep.local_comm_id = id.local_comm_id;
    drep.remote_comm_id = id.remote_comm_id;
    switch (id.cm) {
        case CmState::kEstablished:
        case CmState::kRepSent:
        case CmState::kDreqSent:
            // cm_dreq_handler; both sides disconnecting at once included: the
            // DREP goes when this side's program disconnects or goes.
            stop_retransmitting(id);
            id.cm = CmState::kDreqRcvd;
            id.state = IdState::kDisconnect;
            report(id, RDMA_CM_EVENT_DISCONNECTED);
            break;
        case CmState::kTimewait:
            send_reply(*id.device, id.peer_ipv4, id.transaction_id, drep);  // ours was lost
            break;
        default:
            ++id.device->stats().cm_mads_dropped;
            break;
    }
}

void ConnectionManager::on_drep(Id& id) {
    if (id.cm != CmState::kDreqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    id.state = IdState::kDisconnect;
    report(id, RDMA_CM_EVENT_DISCONNECTED);
    enter_timewait(id);
}

void ConnectionManager::on_sidr_rep(Id& id, const SidrRep& rep) {
    if (id.cm != CmState::kSidrReqSent) {
        ++id.device->stats().cm_mads_dropped;
        return;
    }
    stop_retransmitting(id);
    id.cm = CmState::kIdle;
    if (rep.status != SidrStatus::kSuccess) {
        report(id, RDMA_CM_EVENT_UNREACHABLE, static_cast<int32_t>(rep.status),
               [&](rdma_ucm_event_resp& resp) {
                   memcpy(resp.param.ud.private_data, rep.private_data.data(),
                          rep.private_data.size());
                   resp.param.ud.private_data_len = rep.private_data.size();
               });
        return;
    }
    id.remote_qpn = rep.qpn;
    id.qkey = rep.qkey;
    report(id, RDMA_CM_EVENT_ESTABLISHED, 0, [&](rdma_ucm_event_resp& resp) {
        rdma_ucm_ud_param& ud = resp.param.ud;
        fill_ud_param(id, ud);
        ud.qp_num = rep.qpn;
        ud.qkey = rep.qkey;
        memcpy(ud.private_data, rep.private_data.data(), rep.private_data.size());
        ud.private_data_len = rep.private_data.size();
    });
}

// ---- status ------------------------------------------------------------------

std::string ConnectionManager::status_text() const {
    std::string text;
    char line[400];
    for (const auto& [pid, held] : ids_.clients()) {
        snprintf(line, sizeof(line), "  cm client pid %d holds %zu IDs\n", pid, held);
        text += line;
    }
    std::unordered_map<pid_t, size_t> shown;  // lines per client
    std::unordered_map<pid_t, size_t> hidden;
    for (const auto& [handle, id] : ids_.all()) {
        size_t& lines = shown[id->channel->pid];
        if (lines >= kStatusLinesPerClient) {
            ++hidden[id->channel->pid];
            continue;
        }
        lines += 1 + id->multicasts.size();
        const char* ps = id->ps == RDMA_PS_TCP   ? "tcp"
                         : id->ps == RDMA_PS_UDP ? "udp"
                         : id->ps == RDMA_PS_IB  ? "ib"
                                                 : "ipoib";
        snprintf(line, sizeof(line), "  cm id %u pid %d %s %s%s%s %s -> %s%s%s qp %u\n", handle,
                 id->channel->pid, ps, name(id->state),
                 id->has_cm || id->cm != CmState::kIdle ? " cm " : "",
                 id->has_cm || id->cm != CmState::kIdle ? name(id->cm) : "",
                 to_string(id->src).c_str(), to_string(id->dst).c_str(), id->device ? " on " : "",
                 id->device ? id->device->name().c_str() : "", id->qp_num);
        text += line;
        for (uint32_t mc_handle : id->multicasts) {
            const Multicast& mc = multicasts_.at(mc_handle);
            snprintf(line, sizeof(line), "    multicast %s join %u%s\n",
                     to_string(mc.address).c_str(), mc_handle,
                     mc.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER ? " send-only" : "");
            text += line;
        }
    }
    for (const auto& [pid, more] : hidden) {
        snprintf(line, sizeof(line),
                 "  ... %zu more IDs of pid %d not shown (rdma res show cm_id lists them)\n", more,
                 pid);
        text += line;
    }
    return text;
}

}  // namespace uroce::cm
