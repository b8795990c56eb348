// One emulated RDMA device: identity, capabilities, its port and GID table,
// and the device-wide namespaces (QP numbers, memory keys, SRQ numbers).
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/gid_table.h"
#include "device/id_allocator.h"
#include "device/registry.h"
#include "device/stats.h"
#include "net/fault_injector.h"
#include "net/interfaces.h"
#include "net/pcap_writer.h"
#include "net/step_gate.h"
#include "objects/unpolled_cqs.h"
#include "queues/doorbell.h"
#include "util/ownership.h"
#include "util/result.h"
#include "wire/ip_address.h"

namespace uroce {

struct XrcdDomain;
struct Qp;
struct Mr;
struct Mw;
struct Srq;
struct Wq;
struct Flow;
struct Cq;

// Objects of each kind alive on a device, across all clients or of one.
struct ObjectCounts {
    int pd = 0, mr = 0, mw = 0, cq = 0, qp = 0, srq = 0, wq = 0, rwq_ind_table = 0, ah = 0,
        xrcd = 0, comp_channel = 0, dm = 0;
    uint64_t dm_bytes = 0;  // device memory allocated
    bool operator==(const ObjectCounts&) const = default;
};

// The kinds of objects a device counts and bounds (Device::admit).
enum class ObjectKind : uint8_t {
    kPd,
    kMr,
    kMw,
    kCq,
    kQp,
    kSrq,
    kWq,
    kRwqIndTable,
    kAh,
    kXrcd,
    kCompChannel,
    kDm
};

// A memory key's index names an MR or a window.
struct KeyOwner {
    Mr* mr = nullptr;
    Mw* mw = nullptr;
};

// The largest IB MTU of at most `payload` bytes; IB_MTU_256 at the least.
ibv_mtu ib_mtu_fitting(int payload);
// The largest IB MTU whose RoCEv2 packet fits an interface MTU of
// `link_mtu` bytes, as rxe_set_mtu computes it: the MTU less rxe's 80 bytes
// of headers, IB_MTU_256 at the least and IB_MTU_4096 at the most.
ibv_mtu ib_mtu_for_link(unsigned link_mtu);

// What changed when a port followed its interface (Device::follow_link).
struct PortChange {
    bool state = false;  // went ACTIVE or DOWN
    bool mtu = false;    // active_mtu changed
};

struct DeviceConfig {
    std::string name;         // "uroce0"
    wire::IpAddress address;  // IPv4 or IPv6; GID 0 (::ffff:a.b.c.d for IPv4)
    std::string netdev = "lo";
    // Made on an interface (`--device NAME=IFACE`, rdma link add): its GID
    // table follows the interface's addresses. One made on an address
    // keeps that address (and a made link-local GID) alone.
    bool follows_interface = false;
    GidLayout gid_layout = GidLayout::kUroce;  // how programs see its GID table
};

class Device {
  public:
    static constexpr uint8_t kPortCount = 1;
    // Bounds of tables ibv_query_device has no field for.
    static constexpr int kMaxCompChannels = 8192;
    static constexpr int kMaxXrcds = 8192;

    Device(const DeviceConfig& config, uint32_t index);

    const std::string& name() const { return config_.name; }
    const DeviceConfig& config() const { return config_; }
    uint32_t index() const { return index_; }
    std::string uverbs_name() const { return "uverbs-" + config_.name; }
    uint64_t node_guid() const { return node_guid_; }

    const ibv_device_attr_ex& attr() const { return attr_; }
    const ibv_port_attr& port_attr() const { return port_attr_; }
    // The port takes its interface's link: ACTIVE with carrier, else DOWN;
    // active_mtu from its MTU (ib_mtu_for_link). A QP's path MTU is capped
    // by active_mtu when it is set, so a change reaches new QPs only.
    PortChange follow_link(const Link& link);
    const Link& link() const { return link_; }
    const std::vector<ibv_gid>& gids() const { return gid_table_.gids(); }
    const GidTable& gid_table() const { return gid_table_; }
    // The GID table as programs see it (sysfs, the verbs' GID indexes).
    std::vector<GidTable::Shown> shown_gids() const { return gid_table_.shown(config_.gid_layout); }
    // The index programs see for slot `slot` (its RoCE v2 entry).
    uint8_t shown_gid_index(size_t slot) const {
        return static_cast<uint8_t>(GidTable::shown_index(config_.gid_layout, slot));
    }
    // An address vector's source GID, an index as programs see the table:
    // EINVAL beyond the table or for a RoCE v1 entry, ENODATA for an empty
    // one (an address gone), as the kernel's rdma_get_gid_attr. Sets `slot`
    // to the table's slot it stands for.
    Result check_source_gid(uint32_t index, uint8_t& slot) const;
    // The table takes the interface's addresses (GidTable::follow), when
    // the device follows its interface.
    GidTable::Change follow_addresses(const std::vector<wire::IpAddress>& addresses);
    // The socket each GID's address sends and receives on (set by the
    // engine; kNoSocket for none, such as the made link-local GID's).
    static constexpr size_t kNoSocket = SIZE_MAX;
    size_t gid_socket(size_t index) const {
        return index < gid_sockets_.size() ? gid_sockets_[index] : kNoSocket;
    }
    void set_gid_socket(size_t index, size_t socket) { gid_sockets_.at(index) = socket; }

    // Every QP of the device by number, for the packets addressed to it.
    Registry<Qp*>& qps() { return owned(qps_); }
    const Registry<Qp*>& qps() const { return owned(qps_); }
    // Every receive WQ by number, for the engine to flush those in ERR.
    Registry<Wq*>& wqs() { return owned(wqs_); }
    // Every SRQ by number, for the XRC requests that name one.
    Registry<std::weak_ptr<Srq>>& srqs() { return owned(srqs_); }
    // Memory regions and windows by key index (a key's upper 24 bits).
    Registry<KeyOwner>& keys() { return owned(keys_); }
    Mr* find_mr(uint32_t key_index) const { return owned(keys_).find(key_index).mr; }
    Mw* find_mw(uint32_t key_index) const { return owned(keys_).find(key_index).mw; }
    // Indirection tables have numbers only.
    IdAllocator& ind_table_nums() { return owned(ind_table_nums_); }
    // The flow rules of the device's QPs, oldest first.
    std::vector<const Flow*>& flows() { return owned(flows_); }
    const std::vector<const Flow*>& flows() const { return owned(flows_); }
    // The IP multicast groups its UD QPs joined (their MGIDs), with how many
    // attachments each. The first join and the last leave reach the
    // listener: the engine, which joins the group on the device's interface.
    using GroupListener = std::function<void(const wire::IpAddress& group, bool joined)>;
    void set_group_listener(GroupListener listener) { group_listener_ = std::move(listener); }
    void join_group(const wire::IpAddress& group);
    void leave_group(const wire::IpAddress& group);
    bool in_group(const wire::IpAddress& group) const { return owned(groups_).contains(group); }
    const std::map<wire::IpAddress, int>& groups() const { return owned(groups_); }
    // Whether its interface refused it a packet socket (said once in the log).
    bool frames_refused() const { return frames_refused_; }
    void set_frames_refused() { frames_refused_ = true; }
    // CQs whose moderated completion event waits for its period to end.
    std::set<Cq*>& due_cq_events() { return owned(due_cq_events_); }
    // CQs holding completions their program has not taken yet.
    UnpolledCqs& unpolled_cqs() { return owned(unpolled_cqs_); }
    // The daemon's doorbell, where each QP gets its slot (set by the engine
    // that carries the device; null without one).
    Doorbell* doorbell() const { return doorbell_; }
    void set_doorbell(Doorbell* doorbell) { doorbell_ = doorbell; }
    // The engine thread that runs the device's data path (engine/engines.h).
    uint32_t engine() const { return engine_; }
    void set_engine(uint32_t engine) { engine_ = engine; }
    FaultInjector& faults() { return owned(faults_); }
    PcapWriter& trace() { return owned(trace_); }
    // Whether the device records its packets: any engine may ask.
    bool traced() const { return trace_.is_open(); }
    StepGate& step_gate() { return owned(step_gate_); }
    const StepGate& step_gate() const { return owned(step_gate_); }
    // A received packet broke a key check: counted, and in the port's
    // counters as rxe's check_keys counts it (ibv_query_port).
    void note_bad_pkey();
    void note_bad_qkey();
    DeviceStats& stats() { return owned(stats_); }
    const DeviceStats& stats() const { return owned(stats_); }
    ObjectCounts& counts() { return owned(counts_); }
    const ObjectCounts& counts() const { return owned(counts_); }
    // A client (the process that opened the contexts) may hold a quarter of
    // each of the device's tables, so that one program at its limits leaves
    // the others room. Whether one more object of `kind` fits the table
    // (limit(kind) of them) and the client's share (ENOMEM, as the verbs'
    // man pages, when not); then counting it in and out.
    static constexpr int kClientShares = 4;
    int limit(ObjectKind kind) const;
    Result admit(pid_t client, ObjectKind kind) const;
    void count(pid_t client, ObjectKind kind, int delta);
    ObjectCounts client_counts(pid_t client) const;
    // XRC domains opened through a file, by (st_dev, st_ino).
    std::map<std::pair<dev_t, ino_t>, std::weak_ptr<XrcdDomain>>& xrcd_files() {
        return owned(xrcd_files_);
    }

  private:
    // A member of the device's mutable state, for the thread allowed to
    // touch it (util/ownership.h: a control turn pauses the owner first).
    template <class Member>
    Member& owned(Member& member) const {
        ownership::touch(engine_);
        return member;
    }

    DeviceConfig config_;
    uint32_t index_;
    uint64_t node_guid_;
    ibv_device_attr_ex attr_{};
    ibv_port_attr port_attr_{};
    Link link_{65536, true};  // lo's until the daemon reads the interface
    GidTable gid_table_;
    std::array<size_t, GidTable::kLength> gid_sockets_;
    Registry<Qp*> qps_;
    Registry<Wq*> wqs_;
    Registry<std::weak_ptr<Srq>> srqs_;
    Registry<KeyOwner> keys_;
    IdAllocator ind_table_nums_;
    ObjectCounts counts_;
    std::unordered_map<pid_t, ObjectCounts> per_client_;
    DeviceStats stats_;
    FaultInjector faults_;
    PcapWriter trace_;
    StepGate step_gate_;
    std::vector<const Flow*> flows_;
    std::set<Cq*> due_cq_events_;
    std::map<wire::IpAddress, int> groups_;
    GroupListener group_listener_;
    bool frames_refused_ = false;
    UnpolledCqs unpolled_cqs_;
    Doorbell* doorbell_ = nullptr;
    uint32_t engine_ = 0;
    std::map<std::pair<dev_t, ino_t>, std::weak_ptr<XrcdDomain>> xrcd_files_;
};

// Memory keys are an index in the upper 24 bits and a variant byte below it,
// as on Soft-RoCE; the variant changes when an MR is re-registered or a
// window is bound.
inline uint32_t make_key(uint32_t index, uint8_t variant) {
    return index << 8 | variant;
}

}  // namespace uroce
