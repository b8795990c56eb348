#include "device/device.h"

#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

#include <limits>

#include "protocol/queues.h"

namespace uroce {
namespace {

// Limits of every emulated device. Resource counts are enforced per device;
// capability flags name only what the daemon implements.
constexpr int kMaxQp = 65536;  // rxe allows more still; a CI job may connect thousands
constexpr int kMaxQpWr = 16384;
constexpr int kMaxSge = 32;
constexpr int kMaxCq = 8192;
// ofi_rxm sizes its CQs for 256 peers by default (65536 entries): room for that
// and more; rings are memfds whose pages exist only where entries were written.
constexpr int kMaxCqe = (1 << 20) - 1;
constexpr int kMaxMr = 65536;
constexpr int kMaxPd = 8192;
constexpr int kMaxRdAtom = 128;
constexpr int kMaxMw = 8192;
constexpr int kMaxAh = 32768;
constexpr int kMaxSrq = 4096;
constexpr int kMaxSrqWr = 16384;
constexpr int kMaxMcastGroups = 8192;
constexpr int kMaxMcastQpAttach = 56;
constexpr uint32_t kMaxWq = 4096;
constexpr uint32_t kMaxRwqIndTableSize = 256;
constexpr uint16_t kMaxCqPeriodUs = 4095;    // as mlx5
constexpr uint64_t kMaxDmSize = 256 * 1024;  // as the on-chip memory of a ConnectX NIC
// The first QP number handed to applications: 0 and 1 are the special QPs.
constexpr uint32_t kFirstQpn = 0x11;
// rxe's headers allowance (RXE_MAX_HDR_LENGTH) in an interface MTU:
// Ethernet, IP, UDP, BTH and the largest extension headers.
constexpr unsigned kRoceHeadersBytes = 80;
// ibv_port_attr.phys_state (IB_PORT_PHYS_STATE_*), as rxe reports them.
constexpr uint8_t kPhysDisabled = 3;
constexpr uint8_t kPhysLinkUp = 5;

// EUI-64 from the locally administered MAC 02:00:a:b:c:d that stands for the
// device's address (its last four bytes): deterministic, unique per address.
uint64_t guid_from_address(const wire::IpAddress& address) {
    uint32_t last;
    memcpy(&last, address.bytes().data() + 12, sizeof(last));
    const uint32_t ip = ntohl(last);
    return uint64_t{0x00} << 56 | uint64_t{0x00} << 48 | uint64_t{(ip >> 24) & 0xff} << 40 |
           uint64_t{0xff} << 32 | uint64_t{0xfe} << 24 | (ip & 0xffffff);
}

// What ibv_query_device_ex reports.
ibv_device_attr_ex device_attributes(uint64_t node_guid) {
    ibv_device_attr_ex attr{};
    ibv_device_attr& a = attr.orig_attr;
    snprintf(a.fw_ver, sizeof(a.fw_ver), "0.1.0");
    a.node_guid = htobe64(node_guid);
    a.sys_image_guid = htobe64(node_guid);
    a.max_mr_size = UINT64_MAX;
    a.page_size_cap = 0xfffff000;
    a.vendor_id = 0xffffff;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = kMaxQp;
    a.max_qp_wr = kMaxQpWr;
    a.device_cap_flags = IBV_DEVICE_RESIZE_MAX_WR | IBV_DEVICE_SRQ_RESIZE |
                         IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                         IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW |
                         IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a.max_sge = kMaxSge;
    a.max_sge_rd = kMaxSge;
    a.max_cq = kMaxCq;
    a.max_cqe = kMaxCqe;
    a.max_mr = kMaxMr;
    a.max_pd = kMaxPd;
    a.max_qp_rd_atom = kMaxRdAtom;
    a.max_res_rd_atom = kMaxRdAtom * kMaxQp;
    a.max_qp_init_rd_atom = kMaxRdAtom;
    a.atomic_cap = IBV_ATOMIC_HCA;  // one engine thread serialises every atomic of the device
    a.max_mw = kMaxMw;
    a.max_mcast_grp = kMaxMcastGroups;
    a.max_mcast_qp_attach = kMaxMcastQpAttach;
    a.max_total_mcast_qp_attach = kMaxMcastGroups * kMaxMcastQpAttach;
    a.max_ah = kMaxAh;
    a.max_srq = kMaxSrq;
    a.max_srq_wr = kMaxSrqWr;
    a.max_srq_sge = kMaxSge;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = Device::kPortCount;
    // Registration never pins memory: the daemon reaches application memory
    // only when an operation touches it, so every MR is on-demand, for every
    // operation of every transport, and one MR may cover the whole address
    // space (implicit ODP).
    attr.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    constexpr uint32_t kSendRecv = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
    constexpr uint32_t kRdmaAtomic =
        IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
    attr.odp_caps.per_transport_caps.rc_odp_caps =
        kSendRecv | kRdmaAtomic | IBV_ODP_SUPPORT_SRQ_RECV;
    attr.odp_caps.per_transport_caps.uc_odp_caps = kSendRecv | IBV_ODP_SUPPORT_WRITE;
    attr.odp_caps.per_transport_caps.ud_odp_caps = kSendRecv | IBV_ODP_SUPPORT_SRQ_RECV;
    attr.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | kRdmaAtomic | IBV_ODP_SUPPORT_SRQ_RECV;
    attr.max_wq_type_rq = kMaxWq;
    attr.rss_caps.max_rwq_indirection_tables = kMaxWq;
    attr.rss_caps.max_rwq_indirection_table_size = kMaxRwqIndTableSize;
    attr.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
    attr.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    attr.rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
                                        IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 |
                                        IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                        IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
    attr.phys_port_cnt_ex = Device::kPortCount;
    attr.completion_timestamp_mask = UINT64_MAX;
    attr.hca_core_clock = queues::kDeviceClockKhz;
    attr.max_dm_size = kMaxDmSize;
    attr.cq_mod_caps = {UINT16_MAX, kMaxCqPeriodUs};
    return attr;
}

// What ibv_query_port reports of port 1.
ibv_port_attr port_attributes() {
    ibv_port_attr port{};
    port.state = IBV_PORT_ACTIVE;
    port.max_mtu = IBV_MTU_4096;
    port.active_mtu = IBV_MTU_4096;
    port.port_cap_flags = IBV_PORT_CM_SUP;
    port.max_msg_sz = 1u << 31;
    port.pkey_tbl_len = 1;
    port.max_vl_num = 1;
    port.active_width = 1;   // 1X
    port.active_speed = 32;  // 25 Gb/s (EDR lane)
    port.phys_state = kPhysLinkUp;
    port.link_layer = IBV_LINK_LAYER_ETHERNET;
    // A kernel's GID table has a fixed length with empty slots (rxe's has
    // 1024); querying an empty one is ENODATA.
    port.gid_tbl_len = GidTable::kLength;
    return port;
}

// The GIDs the port starts with.

}  // namespace

ibv_mtu ib_mtu_fitting(int payload) {
    ibv_mtu mtu = IBV_MTU_256;
    for (ibv_mtu larger : {IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096}) {
        if (payload >= (128 << larger)) {
            mtu = larger;
        }
    }
    return mtu;
}

ibv_mtu ib_mtu_for_link(unsigned link_mtu) {
    return ib_mtu_fitting(static_cast<int>(link_mtu) - static_cast<int>(kRoceHeadersBytes));
}

void Device::join_group(const wire::IpAddress& group) {
    ownership::touch(engine_);
    if (++groups_[group] == 1 && group_listener_) {
        group_listener_(group, true);
    }
}

void Device::leave_group(const wire::IpAddress& group) {
    ownership::touch(engine_);
    auto it = groups_.find(group);
    if (it != groups_.end() && --it->second == 0) {
        groups_.erase(it);
        if (group_listener_) {
            group_listener_(group, false);
        }
    }
}

PortChange Device::follow_link(const Link& link) {
    const ibv_port_state state = link.up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    const ibv_mtu mtu = ib_mtu_for_link(link.mtu);
    const PortChange change{state != port_attr_.state, mtu != port_attr_.active_mtu};
    port_attr_.state = state;
    port_attr_.phys_state = link.up ? kPhysLinkUp : kPhysDisabled;
    port_attr_.active_mtu = mtu;
    link_ = link;
    return change;
}

Result Device::check_source_gid(uint32_t index, uint8_t& slot) const {
    if (index >= GidTable::kLength) {
        return fail(EINVAL, "source GID index %u is beyond the GID table (%zu entries)", index,
                    GidTable::kLength);
    }
    const std::vector<GidTable::Shown> shown = shown_gids();
    if (index >= shown.size() ||
        !gid_table_.address(shown[index].slot.value_or(GidTable::kLength))) {
        if (index < shown.size() && shown[index].type == IBV_GID_TYPE_ROCE_V1) {
            return fail(EINVAL,
                        "source GID index %u is a RoCE v1 entry (GID layout %s), and uroce "
                        "carries RoCE v2 alone: use index %u, the same address's RoCE v2 entry",
                        index, gid_layout_name(config_.gid_layout), index + 1);
        }
        return fail(ENODATA, "source GID index %u is an empty entry of the GID table", index);
    }
    slot = static_cast<uint8_t>(*shown[index].slot);
    return ok();
}

GidTable::Change Device::follow_addresses(const std::vector<wire::IpAddress>& addresses) {
    if (!config_.follows_interface) {
        return {};
    }
    return gid_table_.follow(addresses);
}

Device::Device(const DeviceConfig& config, uint32_t index)
    : config_(config),
      index_(index),
      node_guid_(guid_from_address(config.address)),
      gid_table_(config.address, node_guid_),
      qps_(kFirstQpn, (1u << 24) - 1),
      wqs_(1, (1u << 24) - 1),
      srqs_(1, (1u << 24) - 1),
      keys_(1, (1u << 24) - 1),
      ind_table_nums_(1, (1u << 24) - 1) {
    gid_sockets_.fill(kNoSocket);
    attr_ = device_attributes(node_guid_);
    port_attr_ = port_attributes();
}

namespace {

// Each kind's count in an ObjectCounts, its name in messages and its
// limit, by ObjectKind.
struct KindInfo {
    int ObjectCounts::*count;
    const char* name;
    int (*limit)(const ibv_device_attr_ex& attr);
};
using Attr = const ibv_device_attr_ex&;
constexpr KindInfo kKinds[] = {
    {&ObjectCounts::pd, "PDs", [](Attr a) { return a.orig_attr.max_pd; }},
    {&ObjectCounts::mr, "MRs", [](Attr a) { return a.orig_attr.max_mr; }},
    {&ObjectCounts::mw, "MWs", [](Attr a) { return a.orig_attr.max_mw; }},
    {&ObjectCounts::cq, "CQs", [](Attr a) { return a.orig_attr.max_cq; }},
    {&ObjectCounts::qp, "QPs", [](Attr a) { return a.orig_attr.max_qp; }},
    {&ObjectCounts::srq, "SRQs", [](Attr a) { return a.orig_attr.max_srq; }},
    {&ObjectCounts::wq, "WQs", [](Attr a) { return static_cast<int>(a.max_wq_type_rq); }},
    {&ObjectCounts::rwq_ind_table, "indirection tables",
     [](Attr a) { return static_cast<int>(a.rss_caps.max_rwq_indirection_tables); }},
    {&ObjectCounts::ah, "AHs", [](Attr a) { return a.orig_attr.max_ah; }},
    {&ObjectCounts::xrcd, "XRC domains", [](Attr) { return Device::kMaxXrcds; }},
    {&ObjectCounts::comp_channel, "completion channels",
     [](Attr) { return Device::kMaxCompChannels; }},
    // Bounded by bytes (max_dm_size), not by count.
    {&ObjectCounts::dm, "device memory allocations",
     [](Attr) { return std::numeric_limits<int>::max(); }},
};

const KindInfo& kind_info(ObjectKind kind) {
    return kKinds[static_cast<size_t>(kind)];
}

}  // namespace

int Device::limit(ObjectKind kind) const {
    return kind_info(kind).limit(attr_);
}

Result Device::admit(pid_t client, ObjectKind k) const {
    ownership::touch(engine_);
    int ObjectCounts::*const kind = kind_info(k).count;
    const char* what = kind_info(k).name;
    const int max = limit(k);
    if (counts_.*kind >= max) {
        return fail(ENOMEM, "device %s has its maximum of %d %s", name().c_str(), max, what);
    }
    const int share = std::max(1, max / kClientShares);
    auto it = per_client_.find(client);
    if (it != per_client_.end() && it->second.*kind >= share) {
        return fail(ENOMEM,
                    "pid %d holds %d %s on %s, the most one client may (a quarter of the "
                    "device's %d)",
                    client, it->second.*kind, what, name().c_str(), max);
    }
    return ok();
}

void Device::count(pid_t client, ObjectKind k, int delta) {
    ownership::touch(engine_);
    int ObjectCounts::*const kind = kind_info(k).count;
    counts_.*kind += delta;
    ObjectCounts& mine = per_client_[client];
    mine.*kind += delta;
    if (mine == ObjectCounts{}) {
        per_client_.erase(client);
    }
}

ObjectCounts Device::client_counts(pid_t client) const {
    ownership::touch(engine_);
    auto it = per_client_.find(client);
    return it == per_client_.end() ? ObjectCounts{} : it->second;
}

void Device::note_bad_pkey() {
    ownership::touch(engine_);
    ++stats_.rcvd_pkey_err;
    if (port_attr_.bad_pkey_cntr < UINT16_MAX) {
        ++port_attr_.bad_pkey_cntr;
    }
}

void Device::note_bad_qkey() {
    ownership::touch(engine_);
    ++stats_.rcvd_qkey_err;
    if (port_attr_.qkey_viol_cntr < UINT16_MAX) {
        ++port_attr_.qkey_viol_cntr;
    }
}

}  // namespace uroce
