// The rdma_cm: its event channels and IDs, and the status lines of both.
// The rest of the ConnectionManager is in events.cpp, multicast.cpp,
// id_addresses.cpp, connections.cpp and ib_cm.cpp.
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "cm/connection_manager.h"
#include "cm/internal.h"
#include "util/log.h"
#include "wire/byte_order.h"
#include "wire/headers.h"

namespace uroce::cm {

using namespace internal;

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

Channel& ConnectionManager::open_channel(pid_t pid, uid_t uid, ClientPipe readiness,
                                         CaseRef case_tag) {
    auto channel = std::make_unique<Channel>();
    while (getrandom(&channel->token, sizeof(channel->token), 0) != sizeof(channel->token) ||
           channel->token == 0 || channels_.count(channel->token)) {
    }
    channel->pid = pid;
    channel->uid = uid;
    channel->readiness = std::move(readiness);
    channel->case_tag = std::move(case_tag);
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
        set_cm(*id, CmState::kIdle);
        id->has_cm = false;
        report(*id, RDMA_CM_EVENT_DEVICE_REMOVAL);
        set_state(*id, IdState::kDeviceRemoval);
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
