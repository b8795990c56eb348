// rdma_cm multicast joins: JOIN_MCAST and LEAVE_MCAST on the device's
// multicast groups.
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
    if (is_any(group)) {
        return fail(EINVAL, "JOIN_MCAST of the any address");
    }
    const auto ip = ip_of(group);
    if (!ip || !ip->is_v4() || !ip->multicast()) {
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
    const Gid mgid = ip->bytes();
    memcpy(ud.ah_attr.grh.dgid, mgid.data(), sizeof(ud.ah_attr.grh.dgid));
    ud.ah_attr.grh.sgid_index = shown_source_gid(id);
    ud.ah_attr.grh.hop_limit = kHopLimit;
    ud.ah_attr.grh.traffic_class = id.tos;
    ud.ah_attr.is_global = 1;
    ud.ah_attr.port_num = 1;
    ud.qp_num = wire::kMulticastQpn;
    ud.qkey = id.qkey ? id.qkey : kUdpQkey;
    queue_event(*id.channel, event);
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

}  // namespace uroce::cm
