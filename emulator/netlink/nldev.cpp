#include "netlink/nldev.h"

#include <net/if.h>
#include <rdma/rdma_netlink.h>
#include <rdma/rdma_user_cm.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <optional>
#include <string>

#include "cm/connection_manager.h"
#include "device/device.h"
#include "protocol/bridge_abi.h"
#include "verbs/context.h"

namespace uroce::netlink {
namespace {

constexpr uint16_t kFirstPort = 1;

struct Answering {
    const NldevView& view;
    const Request& request;
    uint32_t port;
    std::vector<Bytes>& out;

    uint16_t type(uint16_t op) const { return RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op); }
    uint16_t op() const { return RDMA_NL_GET_OP(request.header.nlmsg_type); }
    MessageWriter message(uint16_t op, bool dump) const {
        return MessageWriter(type(op), dump ? NLM_F_MULTI : 0, request.header.nlmsg_seq, port);
    }
};

// The device DEV_INDEX names; null when absent or unknown (EINVAL, as
// ib_device_get_by_index failing).
const Device* named_device(const Answering& a) {
    uint32_t index;
    if (!a.request.u32(RDMA_NLDEV_ATTR_DEV_INDEX, index)) {
        return nullptr;
    }
    for (const Device* device : a.view.devices) {
        if (device->index() == index) {
            return device;
        }
    }
    return nullptr;
}

// The port PORT_INDEX names: 0 when absent, -1 when not a port of the device.
int named_port(const Answering& a) {
    uint32_t port;
    if (!a.request.u32(RDMA_NLDEV_ATTR_PORT_INDEX, port)) {
        return a.request.has(RDMA_NLDEV_ATTR_PORT_INDEX) ? -1 : 0;
    }
    return port >= kFirstPort && port < kFirstPort + Device::kPortCount ? int(port) : -1;
}

void put_handle(AttrWriter& m, const Device& device) {
    m.put_u32(RDMA_NLDEV_ATTR_DEV_INDEX, device.index());
    m.put_string(RDMA_NLDEV_ATTR_DEV_NAME, device.name());
}

// fill_dev_info.
void put_device(AttrWriter& m, const Device& device) {
    put_handle(m, device);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, Device::kPortCount);
    m.put_u64(RDMA_NLDEV_ATTR_CAP_FLAGS, device.attr().orig_attr.device_cap_flags);
    if (device.attr().orig_attr.fw_ver[0]) {
        m.put_string(RDMA_NLDEV_ATTR_FW_VERSION, device.attr().orig_attr.fw_ver);
    }
    m.put_u64(RDMA_NLDEV_ATTR_NODE_GUID, device.node_guid());
    m.put_u64(RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, device.node_guid());
    m.put_u8(RDMA_NLDEV_ATTR_DEV_NODE_TYPE, 1);  // RDMA_NODE_IB_CA
    m.put_u8(RDMA_NLDEV_ATTR_DEV_DIM, 0);
    m.put_string(RDMA_NLDEV_ATTR_DEV_PROTOCOL, "roce");
}

// fill_port_info of a RoCE port: no capability mask, LIDs or subnet prefix.
void put_port(AttrWriter& m, const Device& device, uint32_t port) {
    put_handle(m, device);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    m.put_u8(RDMA_NLDEV_ATTR_PORT_STATE, device.port_attr().state);
    m.put_u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE, device.port_attr().phys_state);
    const std::string& netdev = device.config().netdev;
    if (const unsigned ifindex = if_nametoindex(netdev.c_str())) {
        m.put_u32(RDMA_NLDEV_ATTR_NDEV_INDEX, ifindex);
        m.put_string(RDMA_NLDEV_ATTR_NDEV_NAME, netdev);
    }
}

Result no_device(const Answering& a) {
    uint32_t index = 0;
    return a.request.u32(RDMA_NLDEV_ATTR_DEV_INDEX, index)
               ? fail(EINVAL, "no device has index %u", index)
               : fail(EINVAL, "the request names no device (DEV_INDEX)");
}

Result get_doit(const Answering& a) {
    const Device* device = named_device(a);
    if (!device) {
        return no_device(a);
    }
    MessageWriter m = a.message(RDMA_NLDEV_CMD_GET, false);
    put_device(m, *device);
    a.out.push_back(m.finish());
    return ok();
}

// One device per message, as ib_enum_all_devs stops at each.
Result get_dump(const Answering& a) {
    for (const Device* device : a.view.devices) {
        MessageWriter m = a.message(RDMA_NLDEV_CMD_GET, true);
        put_device(m, *device);
        a.out.push_back(m.finish());
    }
    return ok();
}

Result port_get_doit(const Answering& a) {
    const Device* device = named_device(a);
    const int port = named_port(a);
    if (!device) {
        return no_device(a);
    }
    if (port <= 0) {
        return fail(EINVAL, "%s has only port 1", device->name().c_str());
    }
    MessageWriter m = a.message(RDMA_NLDEV_CMD_GET, false);  // the kernel's type for this reply
    put_port(m, *device, port);
    a.out.push_back(m.finish());
    return ok();
}

Result port_get_dump(const Answering& a) {
    const Device* device = named_device(a);
    if (!device) {
        return no_device(a);
    }
    for (uint32_t port = kFirstPort; port < kFirstPort + Device::kPortCount; ++port) {
        MessageWriter m = a.message(RDMA_NLDEV_CMD_PORT_GET, true);
        put_port(m, *device, port);
        a.out.push_back(m.finish());
    }
    return ok();
}

Result sys_get_doit(const Answering& a) {
    MessageWriter m = a.message(RDMA_NLDEV_CMD_SYS_GET, false);
    m.put_u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1);    // shared
    m.put_u8(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, 1);  // nothing is pinned: a child sees its own copy
    a.out.push_back(m.finish());
    return ok();
}

// huge_encode_dev: the 64-bit dev_t encoding libibverbs and librdmacm decode.
uint64_t encode_dev(dev_t dev) {
    const uint64_t maj = major(dev), min = minor(dev);
    return (min & 0xff) | (maj << 8) | ((min & ~uint64_t(0xff)) << 12);
}

// uverbs of a device, whose node is the bridge's stand-in /dev/null; and
// rdma_cm, the misc device the bridge answers.
Result get_chardev(const Answering& a) {
    std::string type;
    if (!a.request.string(RDMA_NLDEV_ATTR_CHARDEV_TYPE, type, 31)) {
        return fail(EINVAL, "the request names no character device type (CHARDEV_TYPE)");
    }
    const Device* device = named_device(a);
    if (a.request.has(RDMA_NLDEV_ATTR_DEV_INDEX) && !device) {
        return no_device(a);
    }
    if (a.request.has(RDMA_NLDEV_ATTR_PORT_INDEX) && (!device || named_port(a) <= 0)) {
        return fail(EINVAL, "PORT_INDEX names no port of a device");
    }
    MessageWriter m = a.message(RDMA_NLDEV_CMD_GET_CHARDEV, false);
    if (type == "uverbs") {
        if (!device || a.request.has(RDMA_NLDEV_ATTR_PORT_INDEX)) {
            return fail(EINVAL, "uverbs is a device's, not a port's: name a device and no port");
        }
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV, encode_dev(makedev(1, 3)));
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV_ABI, UROCE_UVERBS_ABI_VERSION);
        m.put_string(RDMA_NLDEV_ATTR_CHARDEV_NAME, device->uverbs_name());
    } else if (type == "rdma_cm") {
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV, encode_dev(makedev(10, 58)));
        m.put_u64(RDMA_NLDEV_ATTR_CHARDEV_ABI, RDMA_USER_CM_ABI_VERSION);
        m.put_string(RDMA_NLDEV_ATTR_CHARDEV_NAME, "rdma_cm");
    } else {
        return fail(EOPNOTSUPP, "no %s character device: uroce has uverbs and rdma_cm",
                    type.c_str());  // no umad or issm: MADs stay in the daemon
    }
    a.out.push_back(m.finish());
    return ok();
}

// --- resources ---------------------------------------------------------

// A client's objects and its pid, for one device.
struct Client {
    pid_t pid;
    uint32_t ctxn;  // the context's number among the device's
    const Context* context;
};

std::vector<Client> clients_of(const Answering& a, const Device& device) {
    std::vector<Client> clients;
    for (const auto& [pid, context] : a.view.contexts) {
        if (&context->device() == &device) {
            clients.push_back({pid, context->id(), context});
        }
    }
    return clients;
}

std::vector<const cm::Id*> cm_ids_of(const Answering& a, const Device& device) {
    std::vector<const cm::Id*> ids;
    for (const auto& [handle, id] : a.view.cm->ids()) {
        if (id->device == &device) {
            ids.push_back(id.get());
        }
    }
    return ids;
}

void put_pid(AttrWriter& m, pid_t pid) {
    if (pid > 0) {
        m.put_u32(RDMA_NLDEV_ATTR_RES_PID, pid);
    }
}

// fill_res_info's summary, in restrack order.
Result res_get(const Answering& a, const Device& device, bool dump) {
    ObjectCounts counts = device.counts();
    const std::vector<Client> clients = clients_of(a, device);
    const std::pair<const char*, uint64_t> entries[] = {
        {"pd", uint64_t(counts.pd)},  {"cq", uint64_t(counts.cq)},
        {"qp", uint64_t(counts.qp)},  {"cm_id", cm_ids_of(a, device).size()},
        {"mr", uint64_t(counts.mr)},  {"ctx", clients.size()},
        {"srq", uint64_t(counts.srq)}};
    MessageWriter m = a.message(RDMA_NLDEV_CMD_RES_GET, dump);
    put_handle(m, device);
    const size_t table = m.begin_nest(RDMA_NLDEV_ATTR_RES_SUMMARY);
    for (const auto& [name, curr] : entries) {
        const size_t entry = m.begin_nest(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY);
        m.put_string(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME, name);
        m.put_u64(RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR, curr);
        m.end_nest(entry);
    }
    m.end_nest(table);
    a.out.push_back(m.finish());
    return ok();
}

Result res_get_doit(const Answering& a) {
    const Device* device = named_device(a);
    return device ? res_get(a, *device, false) : no_device(a);
}

Result res_get_dump(const Answering& a) {
    for (const Device* device : a.view.devices) {
        if (Result r = res_get(a, *device, true); !r) {
            return r;
        }
    }
    return ok();
}

// One entry of a resource table, encoded on its own so that a dump can start
// a new message when the next entry would not fit.
struct Entry {
    uint32_t id;    // what the doit form names it by
    uint32_t port;  // 0: no port (or not filtered by one)
    Bytes attrs;    // the fill function's attributes, not nested
};

void put_psns(AttrWriter& m, const Qp& qp) {
    const ibv_qp_attr& attr = qp.attr;
    const bool connected = qp.type == IBV_QPT_RC || qp.type == IBV_QPT_UC;
    if (connected) {
        m.put_u32(RDMA_NLDEV_ATTR_RES_RQPN, attr.dest_qp_num);
        // What the responder expects next, once it receives (as rxe's resp.psn).
        m.put_u32(RDMA_NLDEV_ATTR_RES_RQ_PSN,
                  attr.qp_state >= IBV_QPS_RTR ? qp.responder.expected_psn : attr.rq_psn);
    }
    // What the requester sends next, once it sends (as rxe's req.psn).
    m.put_u32(RDMA_NLDEV_ATTR_RES_SQ_PSN,
              attr.qp_state >= IBV_QPS_RTS ? qp.requester.next_psn : attr.sq_psn);
    if (connected || qp.type == IBV_QPT_XRC_SEND || qp.type == IBV_QPT_XRC_RECV) {
        m.put_u8(RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE, attr.path_mig_state);
    }
    m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, qp.type);
    m.put_u8(RDMA_NLDEV_ATTR_RES_STATE, attr.qp_state);
}

using EntryId = std::optional<std::pair<uint32_t, uint32_t>>;  // id, port

// An entry for each object in a table of each client on the device, filled
// by `fill(m, client, handle, object)`, which returns the entry's id and
// port, or nothing to leave the object out.
template <class T, class Fill>
std::vector<Entry> object_entries(const Answering& a, const Device& device,
                                  const HandleTable<T>& (Context::*table)() const, Fill fill) {
    std::vector<Entry> entries;
    for (const Client& client : clients_of(a, device)) {
        for (const auto& [handle, object] : (client.context->*table)().all()) {
            AttrWriter m;
            if (const EntryId id = fill(m, client, handle, *object)) {
                entries.push_back({id->first, id->second, m.bytes()});
            }
        }
    }
    return entries;
}

std::vector<Entry> qp_entries(const Answering& a, const Device& device) {
    if (a.view.take_posted_work) {
        a.view.take_posted_work(device);
    }
    return object_entries(
        a, device, &Context::qps,
        [](AttrWriter& m, const Client& client, uint32_t handle, const Qp& qp) -> EntryId {
            if (qp.handle != handle) {
                return {};  // another handle of a QP listed under its first
            }
            if (qp.attr.port_num) {
                m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, qp.attr.port_num);
            }
            m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, qp.qpn);
            if (qp.pd) {
                m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, qp.pd->handle);
            }
            put_pid(m, client.pid);
            put_psns(m, qp);
            return std::pair{qp.qpn, uint32_t(qp.attr.port_num)};
        });
}

std::vector<Entry> cq_entries(const Answering& a, const Device& device) {
    return object_entries(
        a, device, &Context::cqs,
        [](AttrWriter& m, const Client& client, uint32_t handle, const Cq& cq) -> EntryId {
            m.put_u32(RDMA_NLDEV_ATTR_RES_CQE, cq.cqe);
            m.put_u64(RDMA_NLDEV_ATTR_RES_USECNT, cq.users);
            m.put_u8(RDMA_NLDEV_ATTR_DEV_DIM, 0);
            m.put_u32(RDMA_NLDEV_ATTR_RES_CQN, handle);
            m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, client.ctxn);
            put_pid(m, client.pid);
            return std::pair{handle, 0u};
        });
}

// Keys are shown: the daemon answers only its own user, the device's owner.
std::vector<Entry> mr_entries(const Answering& a, const Device& device) {
    return object_entries(
        a, device, &Context::mrs,
        [](AttrWriter& m, const Client& client, uint32_t handle, const Mr& mr) -> EntryId {
            m.put_u32(RDMA_NLDEV_ATTR_RES_RKEY, mr.rkey);
            m.put_u32(RDMA_NLDEV_ATTR_RES_LKEY, mr.lkey);
            m.put_u64(RDMA_NLDEV_ATTR_RES_MRLEN, mr.length);
            m.put_u32(RDMA_NLDEV_ATTR_RES_MRN, handle);
            if (mr.pd) {
                m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, mr.pd->handle);
            }
            put_pid(m, client.pid);
            return std::pair{handle, 0u};
        });
}

std::vector<Entry> pd_entries(const Answering& a, const Device& device) {
    return object_entries(
        a, device, &Context::pds,
        [](AttrWriter& m, const Client& client, uint32_t handle, const Pd& pd) -> EntryId {
            m.put_u64(RDMA_NLDEV_ATTR_RES_USECNT, pd.users);
            m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, handle);
            m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, client.ctxn);
            put_pid(m, client.pid);
            return std::pair{handle, 0u};
        });
}

std::vector<Entry> ctx_entries(const Answering& a, const Device& device) {
    std::vector<Entry> entries;
    for (const Client& client : clients_of(a, device)) {
        AttrWriter m;
        m.put_u32(RDMA_NLDEV_ATTR_RES_CTXN, client.ctxn);
        put_pid(m, client.pid);
        entries.push_back({client.ctxn, 0, m.bytes()});
    }
    return entries;
}

// The QPs that receive through an SRQ, as fill_res_srq_qps lists them:
// consecutive numbers as ranges.
void put_srq_qps(AttrWriter& m, const Client& client, const Srq& srq) {
    std::vector<uint32_t> qpns;
    for (const auto& [handle, qp] : client.context->qps().all()) {
        if (qp->srq.get() == &srq) {
            qpns.push_back(qp->qpn);
        }
    }
    std::sort(qpns.begin(), qpns.end());
    const size_t table = m.begin_nest(RDMA_NLDEV_ATTR_RES_QP, true);
    for (size_t i = 0; i < qpns.size();) {
        size_t j = i;
        while (j + 1 < qpns.size() && qpns[j + 1] == qpns[j] + 1) {
            ++j;
        }
        const size_t entry = m.begin_nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY, true);
        if (j == i) {
            m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, qpns[i]);
        } else {
            m.put_u32(RDMA_NLDEV_ATTR_MIN_RANGE, qpns[i]);
            m.put_u32(RDMA_NLDEV_ATTR_MAX_RANGE, qpns[j]);
        }
        m.end_nest(entry);
        i = j + 1;
    }
    m.end_nest(table);
}

std::vector<Entry> srq_entries(const Answering& a, const Device& device) {
    return object_entries(
        a, device, &Context::srqs,
        [](AttrWriter& m, const Client& client, uint32_t, const Srq& srq) -> EntryId {
            m.put_u32(RDMA_NLDEV_ATTR_RES_SRQN, srq.srq_num);
            m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, srq.type);
            if (srq.pd) {
                m.put_u32(RDMA_NLDEV_ATTR_RES_PDN, srq.pd->handle);
            }
            if (srq.cq) {
                m.put_u32(RDMA_NLDEV_ATTR_RES_CQN, srq.cq->handle);
            }
            put_srq_qps(m, client, srq);
            put_pid(m, client.pid);
            return std::pair{srq.srq_num, 0u};
        });
}

// A cm id's address as the kernel's __kernel_sockaddr_storage; none for an
// address never set (a listener's destination), whose family the kernel leaves 0.
void put_address(AttrWriter& m, uint16_t type, const sockaddr_storage& address) {
    static const sockaddr_storage kUnset = [] {
        sockaddr_storage unset{};
        unset.ss_family = AF_INET;
        return unset;
    }();
    if (address.ss_family && memcmp(&address, &kUnset, sizeof(sockaddr_in)) != 0) {
        m.put_raw(type, std::as_bytes(std::span(&address, 1)));
    }
}

std::vector<Entry> cm_id_entries(const Answering& a, const Device& device) {
    std::vector<Entry> entries;
    for (const cm::Id* id : cm_ids_of(a, device)) {
        AttrWriter m;
        m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, kFirstPort);
        if (id->qp_num) {
            m.put_u32(RDMA_NLDEV_ATTR_RES_LQPN, id->qp_num);
            m.put_u8(RDMA_NLDEV_ATTR_RES_TYPE, id->qp_type);
        }
        m.put_u32(RDMA_NLDEV_ATTR_RES_PS, id->ps);
        m.put_u8(RDMA_NLDEV_ATTR_RES_STATE, static_cast<uint8_t>(id->state));
        put_address(m, RDMA_NLDEV_ATTR_RES_SRC_ADDR, id->src);
        put_address(m, RDMA_NLDEV_ATTR_RES_DST_ADDR, id->dst);
        m.put_u32(RDMA_NLDEV_ATTR_RES_CM_IDN, id->handle);
        put_pid(m, id->channel->pid);
        entries.push_back({id->handle, kFirstPort, m.bytes()});
    }
    return entries;
}

struct Table {
    uint16_t op;
    uint16_t table;
    uint16_t entry;
    uint16_t id;    // the attribute the doit form names an entry by
    bool per_port;  // QP and cm_id: a PORT_INDEX filters (and the doit needs one)
    std::vector<Entry> (*entries)(const Answering&, const Device&);
};

constexpr Table kTables[] = {
    {RDMA_NLDEV_CMD_RES_QP_GET, RDMA_NLDEV_ATTR_RES_QP, RDMA_NLDEV_ATTR_RES_QP_ENTRY,
     RDMA_NLDEV_ATTR_RES_LQPN, true, qp_entries},
    {RDMA_NLDEV_CMD_RES_CM_ID_GET, RDMA_NLDEV_ATTR_RES_CM_ID, RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY,
     RDMA_NLDEV_ATTR_RES_CM_IDN, true, cm_id_entries},
    {RDMA_NLDEV_CMD_RES_CQ_GET, RDMA_NLDEV_ATTR_RES_CQ, RDMA_NLDEV_ATTR_RES_CQ_ENTRY,
     RDMA_NLDEV_ATTR_RES_CQN, false, cq_entries},
    {RDMA_NLDEV_CMD_RES_MR_GET, RDMA_NLDEV_ATTR_RES_MR, RDMA_NLDEV_ATTR_RES_MR_ENTRY,
     RDMA_NLDEV_ATTR_RES_MRN, false, mr_entries},
    {RDMA_NLDEV_CMD_RES_PD_GET, RDMA_NLDEV_ATTR_RES_PD, RDMA_NLDEV_ATTR_RES_PD_ENTRY,
     RDMA_NLDEV_ATTR_RES_PDN, false, pd_entries},
    {RDMA_NLDEV_CMD_RES_CTX_GET, RDMA_NLDEV_ATTR_RES_CTX, RDMA_NLDEV_ATTR_RES_CTX_ENTRY,
     RDMA_NLDEV_ATTR_RES_CTXN, false, ctx_entries},
    {RDMA_NLDEV_CMD_RES_SRQ_GET, RDMA_NLDEV_ATTR_RES_SRQ, RDMA_NLDEV_ATTR_RES_SRQ_ENTRY,
     RDMA_NLDEV_ATTR_RES_SRQN, false, srq_entries},
};

const Table* table_of(uint16_t op) {
    for (const Table& t : kTables) {
        if (t.op == op) {
            return &t;
        }
    }
    return nullptr;
}

// res_get_common_doit: the one entry, its attributes at the top level.
Result res_table_doit(const Answering& a) {
    const Table& t = *table_of(a.op());
    const Device* device = named_device(a);
    uint32_t id;
    const int port = named_port(a);
    if (!device) {
        return no_device(a);
    }
    if (!a.request.u32(t.id, id) || port < 0 || (t.per_port != (port > 0))) {
        return fail(EINVAL, "the request names no entry, or %s port 1",
                    t.per_port ? "not" : "names");
    }
    for (const Entry& entry : t.entries(a, *device)) {
        if (entry.id == id) {
            MessageWriter m = a.message(t.op, false);
            put_handle(m, *device);
            m.append(entry.attrs);
            a.out.push_back(m.finish());
            return ok();
        }
    }
    return fail(ENOENT, "%s has no such entry %u", device->name().c_str(), id);
}

// res_get_common_dumpit: the device's table, continued in another message
// whenever the next entry would not fit; nothing when it is empty.
Result res_table_dump(const Answering& a) {
    const Table& t = *table_of(a.op());
    const Device* device = named_device(a);
    const int port = named_port(a);
    if (!device) {
        return no_device(a);
    }
    if (port < 0) {
        return fail(EINVAL, "%s has only port 1", device->name().c_str());
    }
    std::vector<Bytes> entries;
    for (const Entry& entry : t.entries(a, *device)) {
        if (port > 0 && t.per_port && entry.port != uint32_t(port)) {
            continue;
        }
        AttrWriter nested;
        const size_t start = nested.begin_nest(t.entry);
        nested.append(entry.attrs);
        nested.end_nest(start);
        entries.push_back(nested.bytes());
    }
    for (size_t i = 0; i < entries.size();) {
        MessageWriter m = a.message(t.op, true);
        put_handle(m, *device);
        const size_t table = m.begin_nest(t.table);
        do {
            m.append(entries[i++]);
        } while (i < entries.size() && m.size() + entries[i].size() + NLA_HDRLEN <= kMaxDatagram);
        m.end_nest(table);
        a.out.push_back(m.finish());
    }
    return ok();
}

// --- counters ----------------------------------------------------------

// The port's counters (stat_get_doit_default_counter): every counter the
// daemon keeps, named as rxe names those it has too.
Result stat_get_doit(const Answering& a) {
    if (a.request.has(RDMA_NLDEV_ATTR_STAT_RES)) {
        return fail(EOPNOTSUPP, "no counters are bound to QPs or MRs");
    }
    const Device* device = named_device(a);
    const int port = named_port(a);
    if (!device) {
        return no_device(a);
    }
    if (port <= 0) {
        return fail(EINVAL, "counters are a port's: name port 1");
    }
    MessageWriter m = a.message(RDMA_NLDEV_CMD_STAT_GET, false);
    put_handle(m, *device);
    m.put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    const size_t table = m.begin_nest(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS, true);
    auto put_counter = [&m](const char* name, uint64_t value) {
        const size_t entry = m.begin_nest(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, true);
        m.put_string(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, name);
        m.put_u64(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, value);
        m.end_nest(entry);
    };
    const DeviceStats& stats = device->stats();
#define UROCE_PUT_COUNTER(name, text) put_counter(#name, stats.name);
    UROCE_DEVICE_COUNTERS(UROCE_PUT_COUNTER)
#undef UROCE_PUT_COUNTER
    m.end_nest(table);
    a.out.push_back(m.finish());
    return ok();
}

// Counters bound to QPs (`rdma statistic qp show`): there are none.
Result stat_get_dump(const Answering& a) {
    uint32_t res;
    if (!a.request.u32(RDMA_NLDEV_ATTR_STAT_RES, res)) {
        return fail(EINVAL, "a counter dump names its resource (STAT_RES)");
    }
    return res == RDMA_NLDEV_ATTR_RES_QP || res == RDMA_NLDEV_ATTR_RES_MR
               ? ok()
               : fail(EINVAL, "counters are bound to QPs or MRs only");
}

// --- links -------------------------------------------------------------

// nldev_newlink: a device of type "uroce" on a network interface, as
// `rdma link add NAME type rxe netdev IFACE` makes a Soft-RoCE device. The
// answer is the ACK alone.
Result newlink(const Answering& a) {
    std::string name, type, netdev;
    if (!a.request.string(RDMA_NLDEV_ATTR_DEV_NAME, name, 63) ||
        !a.request.string(RDMA_NLDEV_ATTR_LINK_TYPE, type, IFNAMSIZ - 1) ||
        !a.request.string(RDMA_NLDEV_ATTR_NDEV_NAME, netdev, IFNAMSIZ - 1) || name.empty() ||
        name.find('%') != std::string::npos) {
        return fail(EINVAL, "a new link needs a name, a type and a netdev");
    }
    if (!if_nametoindex(netdev.c_str())) {
        return fail(ENODEV, "no network interface %s", netdev.c_str());
    }
    if (type != "uroce" || !a.view.add_link) {
        return fail(EINVAL, "no link type %s here: uroce makes uroce links", type.c_str());
    }
    return a.view.add_link(name, netdev);
}

// nldev_dellink: the device goes, as an rxe device does; its clients hear
// IBV_EVENT_DEVICE_FATAL and its rdma_cm IDs DEVICE_REMOVAL. The ACK alone.
Result dellink(const Answering& a) {
    const Device* device = named_device(a);
    if (!device) {
        return no_device(a);
    }
    if (!a.view.delete_link) {
        return fail(EOPNOTSUPP, "devices cannot be deleted here");
    }
    return a.view.delete_link(*device);
}

// --- dispatch ----------------------------------------------------------

struct Handler {
    Result (*doit)(const Answering&);
    Result (*dump)(const Answering&);
};

Handler handler_of(uint16_t op) {
    switch (op) {
        case RDMA_NLDEV_CMD_GET:
            return {get_doit, get_dump};
        case RDMA_NLDEV_CMD_PORT_GET:
            return {port_get_doit, port_get_dump};
        case RDMA_NLDEV_CMD_SYS_GET:
            return {sys_get_doit, nullptr};
        case RDMA_NLDEV_CMD_GET_CHARDEV:
            return {get_chardev, nullptr};
        case RDMA_NLDEV_CMD_RES_GET:
            return {res_get_doit, res_get_dump};
        case RDMA_NLDEV_CMD_STAT_GET:
            return {stat_get_doit, stat_get_dump};
        case RDMA_NLDEV_CMD_NEWLINK:
            return {newlink, nullptr};
        case RDMA_NLDEV_CMD_DELLINK:
            return {dellink, nullptr};
        default:
            return table_of(op) ? Handler{res_table_doit, res_table_dump} : Handler{};
    }
}

// rdma_nl_rcv_skb: a doit's reply, then the ACK when asked for; a dump's
// messages and NLMSG_DONE (never an ACK); NLMSG_ERROR for any error.
void answer_one(const Answering& a) {
    const nlmsghdr& h = a.request.header;
    if (!(h.nlmsg_flags & NLM_F_REQUEST) || h.nlmsg_type < NLMSG_MIN_TYPE) {
        if (h.nlmsg_flags & NLM_F_ACK) {
            a.out.push_back(error_message(a.request, 0, a.port));
        }
        return;
    }
    const uint16_t op = a.op();
    const Handler handler =
        RDMA_NL_GET_CLIENT(h.nlmsg_type) == RDMA_NL_NLDEV && op < RDMA_NLDEV_NUM_OPS
            ? handler_of(op)
            : Handler{};
    const bool dump = h.nlmsg_flags & NLM_F_DUMP;
    auto run = dump ? handler.dump : handler.doit;
    if (!run) {
        // SET, SYS_SET, STAT_SET/DEL and the raw dumps change or reveal
        // what this device does not have.
        a.out.push_back(
            handler.doit || handler.dump
                ? error_message(a.request, EINVAL, a.port,
                                dump ? "this command cannot dump" : "this command only dumps")
                : error_message(a.request, EOPNOTSUPP, a.port,
                                "uroce does not offer this RDMA netlink command"));
        return;
    }
    const size_t before = a.out.size();
    const Result result = run(a);
    if (dump) {
        Bytes done = done_message(a.request, a.port);
        const int32_t status = -result.error;
        memcpy(done.data() + NLMSG_HDRLEN, &status, sizeof(status));
        a.out.push_back(std::move(done));
        return;
    }
    if (!result) {
        a.out.resize(before);
        a.out.push_back(error_message(a.request, result.error, a.port, result.message));
    } else if (h.nlmsg_flags & NLM_F_ACK) {
        a.out.push_back(error_message(a.request, 0, a.port));
    }
}

}  // namespace

std::vector<Bytes> answer(const NldevView& view, std::span<const std::byte> datagram,
                          uint32_t port) {
    std::vector<Bytes> out;
    std::vector<Request> requests;
    if (!parse_messages(datagram, requests)) {
        // The kernel drops what does not parse; a header that can be read
        // gets its EINVAL, so that its sender does not wait for ever.
        if (datagram.size() >= sizeof(nlmsghdr)) {
            Request broken;
            memcpy(&broken.header, datagram.data(), sizeof(nlmsghdr));
            broken.bytes = datagram.first(sizeof(nlmsghdr));
            out.push_back(error_message(broken, EINVAL, port));
        }
        return out;
    }
    for (const Request& request : requests) {
        answer_one(Answering{view, request, port, out});
    }
    return out;
}

}  // namespace uroce::netlink
