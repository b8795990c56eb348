// An rdma_cm ID's addresses: binding and ports, address and route
// resolution, the queries that report them, and options.
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
        const auto ip = ip_of(address);
        device = ip ? device_at(devices_, *ip) : nullptr;
        if (!device) {
            const bool local = (ip && is_host_address(*ip)) || is_loopback(address);
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
    set_state(id, IdState::kAddrBound);
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
    wire::IpAddress destination;
    Device* device = id.device;
    if (is_any(dst)) {
        // rdma_cm's loopback: the bound device, else the first.
        device = device ? device : devices_.front().get();
        destination = device->config().address;
    } else if (const auto ip = ip_of(dst)) {
        destination = *ip;
    } else {
        return fail(EAFNOSUPPORT, "%s: uroce devices reach IP addresses only",
                    to_string(dst).c_str());
    }
    // Where the ID's packets leave from: its bound address, or the one the
    // kernel's routing table picks (any GID's of the device).
    wire::IpAddress source = is_any(id.src) ? wire::IpAddress() : ip_or_any(id.src);
    if (!device) {
        if (Result r = route(devices_, destination, device, source); !r && r.error == ENETUNREACH) {
            return r;  // no route at all: the command fails, as rdma_resolve_ip's does
        } else if (!r) {
            id.dst = dst;
            set_state(id, IdState::kAddrBound);
            log_info("rdma_cm ID %u: address resolution failed: %s", id.handle, r.message.c_str());
            report(id, RDMA_CM_EVENT_ADDR_ERROR, -r.error);
            return ok();
        }
    }
    if (source.unspecified()) {
        source = device->config().address;
    }
    if (source.is_v4() != destination.is_v4()) {
        return fail(ENETUNREACH, "%s cannot be reached from %s, of the other IP family",
                    destination.text().c_str(), source.text().c_str());
    }
    id.dst = is_any(dst) ? make_address(dst.ss_family, destination, port_of(dst)) : dst;
    id.device = device;
    if (is_any(id.src)) {
        id.src = make_address(id.src.ss_family, source, port_of(id.src));
    }
    id.peer_ip = destination;
    id.path_mtu = path_mtu_of(*device);
    set_state(id, IdState::kAddrResolved);
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
    set_state(id, IdState::kAddrResolved);
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
    set_state(id, IdState::kRouteResolved);
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
        set_state(id, IdState::kRouteResolved);
        report(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
        return ok();
    }
    return fail(ENOSYS, "rdma_cm option level %u name %u is unknown", level, option);
}

}  // namespace uroce::cm
