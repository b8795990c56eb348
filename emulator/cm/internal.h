// What the ConnectionManager's files share: the kernel's rdma_cm settings
// for RoCE and the small conversions every part of the CM makes. Included
// by emulator/cm/ only.
#pragma once

#include <string.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <span>

#include "cm/connection_manager.h"
#include "util/coverage.h"

namespace uroce::cm::internal {

using std::chrono::milliseconds;

// Every change of an ID's rdma_cm state and of its IB CM state goes through
// these, so the coverage map sees each transition.
static_assert(static_cast<uint32_t>(IdState::kDeviceRemoval) + 1 == coverage::kCmIdStates);
static_assert(static_cast<uint32_t>(CmState::kSidrReqRcvd) + 1 == coverage::kCmStates);
inline void set_state(Id& id, IdState state) {
    coverage::cm_id_state(static_cast<uint32_t>(id.state), static_cast<uint32_t>(state));
    id.state = state;
}
inline void set_cm(Id& id, CmState state) {
    coverage::cm_state(static_cast<uint32_t>(id.cm), static_cast<uint32_t>(state));
    id.cm = state;
}

// Starting PSNs, transaction IDs and ephemeral ports: not to be guessed
// from what another connection showed.
inline uint32_t random32() {
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
inline milliseconds iba_time(uint8_t exponent) {
    return milliseconds(exponent > 8 ? 1ull << (exponent - 8) : 1);
}

// iboe_get_mtu: the largest IB MTU whose RoCE packet fits the netdev's MTU
// (the kernel's rdma_cm allows for other headers than rxe's port does).
inline uint8_t path_mtu_of(const Device& device) {
    const int mtu = static_cast<int>(device.link().mtu);
    const int payload = mtu - (40 + 8 + 12 + 4 + 28 + 4);  // GRH/IP, UDP, BTH, XRC, atomic, ICRC
    return std::min<uint8_t>(ib_mtu_fitting(payload), device.port_attr().active_mtu);
}

// An IP address's host part; 0.0.0.0 for any other.
inline wire::IpAddress ip_or_any(const Address& address) {
    return ip_of(address).value_or(wire::IpAddress::v4(0));
}

// The GID of `device` whose address is `address`; 0 where none is (MADs
// then leave from the device's own address).
inline uint8_t gid_index_at(const Device& device, const wire::IpAddress& address) {
    return static_cast<uint8_t>(device.gid_table().index_of(address).value_or(0));
}

// An ID's source GID: the one of the address it is bound to, whose address
// its QP's packets and its MADs leave from (as the kernel's cma takes the
// GID of the bound address's netdev entry).
inline uint8_t source_gid(const Id& id) {
    return id.device ? gid_index_at(*id.device, ip_or_any(id.src)) : 0;
}

// The same as the program names it (in the attributes rdma_init_qp_attr
// and the UD parameters give it): the index of the GID table it sees.
inline uint8_t shown_source_gid(const Id& id) {
    return id.device ? id.device->shown_gid_index(source_gid(id)) : 0;
}

// An address's GID: an AF_IB address carries it, an IP address's is its
// address (IPv4-mapped for IPv4).
inline Gid gid_of(const Address& address) {
    if (address.ss_family == AF_IB) {
        Gid gid;
        memcpy(gid.data(), gid_of_ib(address), gid.size());
        return gid;
    }
    return ip_or_any(address).bytes();
}

inline bool is_ud(const Id& id) {
    return id.qp_type == IBV_QPT_UD;
}

inline PortSpace port_space(uint16_t ps) {
    return static_cast<PortSpace>(ps);
}

template <size_t N>
std::array<uint8_t, N> private_data(std::span<const uint8_t> user, size_t offset = 0) {
    std::array<uint8_t, N> out{};
    std::copy_n(user.begin(), std::min(user.size(), N - offset), out.begin() + offset);
    return out;
}

inline void copy_conn_private(rdma_ucm_conn_param& conn, std::span<const uint8_t> data) {
    const size_t n = std::min(data.size(), sizeof(conn.private_data));
    memcpy(conn.private_data, data.data(), n);
    conn.private_data_len = static_cast<uint8_t>(n);
}

// cm_format_rej: the message a REJ answers follows from the state it leaves.
inline Rej rej_of(const Id& id, RejectReason reason) {
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

// An event of `id` as GET_EVENT hands it out, its parameters still zero.
inline Channel::Event event_of(const Id& id, uint32_t event, uint32_t status) {
    Channel::Event entry{id.handle, 0, {}};
    entry.resp.uid = id.uid;
    entry.resp.id = id.handle;
    entry.resp.event = event;
    entry.resp.status = status;
    return entry;
}

}  // namespace uroce::cm::internal
