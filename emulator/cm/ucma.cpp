#include "cm/ucma.h"

#include <string.h>

#include <algorithm>
#include <array>

namespace uroce::cm {
namespace {

constexpr uint32_t kMaxBacklog = 1024;  // ucma's max_backlog sysctl default

// What rdma-core v55 (Linux 6.14) added for rdma_resolve_addrinfo and
// rdma_write_cm_event; the headers of older releases lack them.
constexpr uint32_t kCmdResolveIbService = 23;
constexpr uint32_t kCmdWriteCmEvent = 24;
constexpr uint32_t kQueryIbService = 3;
constexpr uint32_t kEventUser = 18;      // RDMA_CM_EVENT_USER
constexpr uint32_t kEventInternal = 19;  // RDMA_CM_EVENT_INTERNAL
static_assert(RDMA_USER_CM_CMD_JOIN_MCAST + 1 == kCmdResolveIbService);
static_assert(RDMA_USER_CM_QUERY_GID + 1 == kQueryIbService);

struct ResolveIbServiceCommand {  // rdma_ucm_resolve_ib_service
    uint32_t id;
    uint32_t reserved;
    uint64_t service_id;
    uint8_t service_name[64];
    uint32_t flags;
    uint32_t reserved2;
};

struct WriteCmEventCommand {  // rdma_ucm_write_cm_event
    uint32_t id;
    uint32_t reserved;
    uint32_t event;
    uint32_t status;
    union {
        rdma_ucm_conn_param conn;
        rdma_ucm_ud_param ud;
        uint64_t arg;
    } param;
};

struct QueryIbServiceResponse {  // rdma_ucm_query_ib_service_resp, no records
    uint32_t num_service_recs;
    uint32_t reserved;
};

// A command body as the kernel reads it: copy_from_user of the whole struct
// whatever `in` says (the bytes past what was written read as zero here).
template <class Command>
Command read_command(const rpc::CmCommandRequest& request) {
    Command command{};
    const size_t available = request.length - sizeof(rdma_ucm_cmd_hdr);
    memcpy(&command, request.command + sizeof(rdma_ucm_cmd_hdr),
           std::min(sizeof(command), available));
    return command;
}

template <class Response>
void respond(rpc::CmCommandReply& reply, uint64_t address, const Response& response,
             size_t size = sizeof(Response)) {
    reply.response_address = address;
    reply.response_length = static_cast<uint32_t>(size);
    memcpy(reply.response, &response, size);
}

Result need_out(const rdma_ucm_cmd_hdr& header, size_t size) {
    if (header.out < size) {
        return fail(ENOSPC, "the command's response space is %u bytes, %zu needed", header.out,
                    size);
    }
    return ok();
}

Address address_from(const void* bytes, size_t size) {
    Address address{};
    memcpy(&address, bytes, std::min(size, sizeof(address)));
    return address;
}

ConnParam conn_param_from(const rdma_ucm_conn_param& in) {
    ConnParam param;
    param.qp_num = in.qp_num;
    param.qkey = in.qkey;
    param.private_data.assign(in.private_data, in.private_data + in.private_data_len);
    param.responder_resources = in.responder_resources;
    param.initiator_depth = in.initiator_depth;
    param.flow_control = in.flow_control;
    param.retry_count = in.retry_count;
    param.rnr_retry_count = in.rnr_retry_count;
    param.srq = in.srq;
    return param;
}

// One command as its handler sees it: the header checked, the body read
// as the kernel reads it, and the reply to fill.
struct Command {
    ConnectionManager& cm;
    Channel& channel;
    const rpc::CmCommandRequest& request;
    const rdma_ucm_cmd_hdr& header;
    rpc::CmCommandReply& reply;

    template <class Body>
    Body body() const {
        return read_command<Body>(request);
    }
    // The ID `handle` names on this channel, or why there is none.
    Result find(uint32_t handle, Id*& id) { return cm.find(channel, handle, id); }
    // ENOSPC unless the caller's response space holds `Response`.
    template <class Response>
    Result room_for() const {
        return need_out(header, sizeof(Response));
    }
    template <class Response>
    Result answer(uint64_t address, const Response& response, size_t size = sizeof(Response)) {
        respond(reply, address, response, size);
        return ok();
    }
};

// Finds the ID a command names and hands it to `act`.
template <class Act>
Result on_id(Command& c, uint32_t handle, Act act) {
    Id* id = nullptr;
    if (Result r = c.find(handle, id); !r) {
        return r;
    }
    return act(*id);
}

Result create_id(Command& c) {
    const auto cmd = c.body<rdma_ucm_create_id>();
    rdma_ucm_create_id_resp resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    if (Result r = c.cm.create_id(c.channel, cmd.uid, cmd.ps, cmd.qp_type, resp.id); !r) {
        return r;
    }
    return c.answer(cmd.response, resp);
}

Result destroy_id(Command& c) {
    const auto cmd = c.body<rdma_ucm_destroy_id>();
    rdma_ucm_destroy_id_resp resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    if (Result r = c.cm.destroy_id(c.channel, cmd.id, resp.events_reported); !r) {
        return r;
    }
    return c.answer(cmd.response, resp);
}

Result bind_ip(Command& c) {
    const auto cmd = c.body<rdma_ucm_bind_ip>();
    return on_id(c, cmd.id,
                 [&](Id& id) { return c.cm.bind(id, address_from(&cmd.addr, sizeof(cmd.addr))); });
}

Result bind(Command& c) {
    const auto cmd = c.body<rdma_ucm_bind>();
    const Address address = address_from(&cmd.addr, sizeof(cmd.addr));
    if (cmd.reserved || !cmd.addr_size || cmd.addr_size != address_size(address)) {
        return fail(EINVAL, "BIND: address size %u does not fit family %u", cmd.addr_size,
                    address.ss_family);
    }
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.bind(id, address); });
}

Result resolve_ip(Command& c) {
    const auto cmd = c.body<rdma_ucm_resolve_ip>();
    return on_id(c, cmd.id, [&](Id& id) {
        const Address src = address_from(&cmd.src_addr, sizeof(cmd.src_addr));
        return c.cm.resolve_addr(id, src.ss_family ? &src : nullptr,
                                 address_from(&cmd.dst_addr, sizeof(cmd.dst_addr)));
    });
}

Result resolve_addr(Command& c) {
    const auto cmd = c.body<rdma_ucm_resolve_addr>();
    const Address src = address_from(&cmd.src_addr, sizeof(cmd.src_addr));
    const Address dst = address_from(&cmd.dst_addr, sizeof(cmd.dst_addr));
    if (cmd.reserved || (cmd.src_size && cmd.src_size != address_size(src)) || !cmd.dst_size ||
        cmd.dst_size != address_size(dst)) {
        return fail(EINVAL, "RESOLVE_ADDR: address sizes do not fit their families");
    }
    return on_id(c, cmd.id,
                 [&](Id& id) { return c.cm.resolve_addr(id, cmd.src_size ? &src : nullptr, dst); });
}

Result resolve_route(Command& c) {
    const auto cmd = c.body<rdma_ucm_resolve_route>();
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.resolve_route(id); });
}

Result query_route(Command& c) {
    const auto cmd = c.body<rdma_ucm_query>();
    rdma_ucm_query_route_resp resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    return on_id(c, cmd.id, [&](Id& id) {
        c.cm.fill_route(id, resp);
        return c.answer(cmd.response, resp);
    });
}

// As ucma_query_path: the header and a record only where more than one fits
// (the path_data array is flexible).
Result query_path(Command& c, Id& id, uint64_t response) {
    alignas(rdma_ucm_query_path_resp)
        uint8_t resp[sizeof(rdma_ucm_query_path_resp) + sizeof(ib_path_rec_data)] = {};
    auto& head = *reinterpret_cast<rdma_ucm_query_path_resp*>(resp);
    if (Result r = c.room_for<rdma_ucm_query_path_resp>(); !r) {
        return r;
    }
    const size_t room = c.header.out - sizeof(head) > sizeof(ib_path_rec_data);
    const size_t paths = c.cm.fill_path(
        id, head, reinterpret_cast<ib_path_rec_data*>(resp + sizeof(rdma_ucm_query_path_resp)),
        room);
    return c.answer(response, resp,
                    sizeof(rdma_ucm_query_path_resp) + paths * sizeof(ib_path_rec_data));
}

Result query(Command& c) {
    const auto cmd = c.body<rdma_ucm_query>();
    return on_id(c, cmd.id, [&](Id& id) -> Result {
        switch (cmd.option) {
            case RDMA_USER_CM_QUERY_ADDR:
            case RDMA_USER_CM_QUERY_GID: {
                rdma_ucm_query_addr_resp resp{};
                if (Result r = c.room_for<decltype(resp)>(); !r) {
                    return r;
                }
                if (cmd.option == RDMA_USER_CM_QUERY_ADDR) {
                    c.cm.fill_addr(id, resp);
                } else {
                    c.cm.fill_gid(id, resp);
                }
                return c.answer(cmd.response, resp);
            }
            case RDMA_USER_CM_QUERY_PATH:
                return query_path(c, id, cmd.response);
            case kQueryIbService: {
                // The service records RESOLVE_IB_SERVICE found: never any here.
                if (Result r = c.room_for<QueryIbServiceResponse>(); !r) {
                    return r;
                }
                return c.answer(cmd.response, QueryIbServiceResponse{});
            }
            default:
                return fail(ENOSYS, "QUERY option %u is not one of rdma_cm's", cmd.option);
        }
    });
}

Result connect(Command& c) {
    const auto cmd = c.body<rdma_ucm_connect>();
    if (!cmd.conn_param.valid) {
        return fail(EINVAL, "CONNECT without connection parameters");
    }
    return on_id(c, cmd.id,
                 [&](Id& id) { return c.cm.connect(id, conn_param_from(cmd.conn_param)); });
}

Result listen(Command& c) {
    const auto cmd = c.body<rdma_ucm_listen>();
    const uint32_t backlog =
        cmd.backlog > 0 && cmd.backlog < kMaxBacklog ? cmd.backlog : kMaxBacklog;
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.listen(id, backlog); });
}

Result accept(Command& c) {
    const auto cmd = c.body<rdma_ucm_accept>();
    return on_id(c, cmd.id, [&](Id& id) {
        if (!cmd.conn_param.valid) {
            return c.cm.accept(id, 0, nullptr);
        }
        const ConnParam param = conn_param_from(cmd.conn_param);
        return c.cm.accept(id, cmd.uid, &param);
    });
}

Result reject(Command& c) {
    const auto cmd = c.body<rdma_ucm_reject>();
    return on_id(c, cmd.id, [&](Id& id) {
        return c.cm.reject(id, std::span(cmd.private_data, cmd.private_data_len), cmd.reason);
    });
}

Result disconnect(Command& c) {
    const auto cmd = c.body<rdma_ucm_disconnect>();
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.disconnect(id); });
}

Result init_qp_attr(Command& c) {
    const auto cmd = c.body<rdma_ucm_init_qp_attr>();
    ib_uverbs_qp_attr resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    if (cmd.qp_state > IBV_QPS_ERR) {
        return fail(EINVAL, "INIT_QP_ATTR for QP state %u", cmd.qp_state);
    }
    return on_id(c, cmd.id, [&](Id& id) {
        if (Result r = c.cm.init_qp_attr(id, cmd.qp_state, resp); !r) {
            return r;
        }
        return c.answer(cmd.response, resp);
    });
}

Result get_event(Command& c) {
    const auto cmd = c.body<rdma_ucm_get_event>();
    rdma_ucm_event_resp resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    if (Result r = c.cm.get_event(c.channel, resp); !r) {
        return r;
    }
    return c.answer(cmd.response, resp);
}

Result set_option(Command& c) {
    const auto cmd = c.body<rdma_ucm_set_option>();
    if (cmd.optlen != c.request.option_length || cmd.optlen > sizeof(c.request.option)) {
        return fail(EINVAL, "SET_OPTION value of %u bytes", cmd.optlen);
    }
    return on_id(c, cmd.id, [&](Id& id) {
        return c.cm.set_option(id, cmd.level, cmd.optname, std::span(c.request.option, cmd.optlen));
    });
}

Result notify(Command& c) {
    const auto cmd = c.body<rdma_ucm_notify>();
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.notify(id, cmd.event); });
}

// Written to the channel the ID moves to; cmd.fd names the one it leaves.
Result migrate_id(Command& c) {
    const auto cmd = c.body<rdma_ucm_migrate_id>();
    Channel* from = c.cm.find_channel(c.request.migrate_token);
    if (!from) {
        return fail(EINVAL, "MIGRATE_ID: descriptor %u is not an rdma_cm channel", cmd.fd);
    }
    Id* id = nullptr;
    if (Result r = c.cm.find(*from, cmd.id, id); !r) {
        return r;
    }
    rdma_ucm_migrate_resp resp{};
    if (Result r = c.cm.migrate(*id, c.channel, resp.events_reported); !r) {
        return r;
    }
    return c.answer(cmd.response, resp);
}

// Joins a group for the ID `handle` names; the caller checked the room for
// the answer first, as ucma_join_multicast does.
Result join(Command& c, uint32_t handle, uint64_t uid, const Address& group, uint32_t flags,
            uint64_t response) {
    rdma_ucm_create_id_resp resp{};
    return on_id(c, handle, [&](Id& id) {
        if (Result r = c.cm.join_multicast(id, uid, group, flags, resp.id); !r) {
            return r;
        }
        return c.answer(response, resp);
    });
}

Result join_ip_mcast(Command& c) {
    const auto cmd = c.body<rdma_ucm_join_ip_mcast>();
    if (Result r = c.room_for<rdma_ucm_create_id_resp>(); !r) {
        return r;
    }
    return join(c, cmd.id, cmd.uid, address_from(&cmd.addr, sizeof(cmd.addr)),
                RDMA_MC_JOIN_FLAG_FULLMEMBER, cmd.response);
}

Result join_mcast(Command& c) {
    const auto cmd = c.body<rdma_ucm_join_mcast>();
    const Address group = address_from(&cmd.addr, sizeof(cmd.addr));
    if (Result r = c.room_for<rdma_ucm_create_id_resp>(); !r) {
        return r;
    }
    if (cmd.addr_size != address_size(group)) {
        return fail(EINVAL, "JOIN_MCAST: address size %u does not fit family %u", cmd.addr_size,
                    group.ss_family);
    }
    return join(c, cmd.id, cmd.uid, group, cmd.join_flags, cmd.response);
}

Result leave_mcast(Command& c) {
    const auto cmd = c.body<rdma_ucm_destroy_id>();
    rdma_ucm_destroy_id_resp resp{};
    if (Result r = c.room_for<decltype(resp)>(); !r) {
        return r;
    }
    if (Result r = c.cm.leave_multicast(c.channel, cmd.id, resp.events_reported); !r) {
        return r;
    }
    return c.answer(cmd.response, resp);
}

Result resolve_ib_service(Command& c) {
    const auto cmd = c.body<ResolveIbServiceCommand>();
    return on_id(c, cmd.id, [&](Id& id) { return c.cm.resolve_ib_service(id); });
}

Result write_cm_event(Command& c) {
    const auto cmd = c.body<WriteCmEventCommand>();
    if (cmd.event != kEventUser && cmd.event != kEventInternal) {
        return fail(EINVAL, "WRITE_CM_EVENT of event %u: only USER and INTERNAL", cmd.event);
    }
    return on_id(c, cmd.id, [&](Id& id) {
        return c.cm.write_event(id, cmd.event, cmd.status, cmd.param.arg);
    });
}

Result get_option(Command&) {
    return fail(ENOSYS, "GET_OPTION has no handler in the kernel either");
}

using Handler = Result (*)(Command&);

// The ucma commands librdmacm sends (up to v65), by number: ucma.c's
// ucma_cmd_table.
constexpr auto kHandlers = [] {
    std::array<Handler, kCmdWriteCmEvent + 1> t{};
    t[RDMA_USER_CM_CMD_CREATE_ID] = create_id;
    t[RDMA_USER_CM_CMD_DESTROY_ID] = destroy_id;
    t[RDMA_USER_CM_CMD_BIND_IP] = bind_ip;
    t[RDMA_USER_CM_CMD_RESOLVE_IP] = resolve_ip;
    t[RDMA_USER_CM_CMD_RESOLVE_ROUTE] = resolve_route;
    t[RDMA_USER_CM_CMD_QUERY_ROUTE] = query_route;
    t[RDMA_USER_CM_CMD_CONNECT] = connect;
    t[RDMA_USER_CM_CMD_LISTEN] = listen;
    t[RDMA_USER_CM_CMD_ACCEPT] = accept;
    t[RDMA_USER_CM_CMD_REJECT] = reject;
    t[RDMA_USER_CM_CMD_DISCONNECT] = disconnect;
    t[RDMA_USER_CM_CMD_INIT_QP_ATTR] = init_qp_attr;
    t[RDMA_USER_CM_CMD_GET_EVENT] = get_event;
    t[RDMA_USER_CM_CMD_GET_OPTION] = get_option;
    t[RDMA_USER_CM_CMD_SET_OPTION] = set_option;
    t[RDMA_USER_CM_CMD_NOTIFY] = notify;
    t[RDMA_USER_CM_CMD_JOIN_IP_MCAST] = join_ip_mcast;
    t[RDMA_USER_CM_CMD_LEAVE_MCAST] = leave_mcast;
    t[RDMA_USER_CM_CMD_MIGRATE_ID] = migrate_id;
    t[RDMA_USER_CM_CMD_QUERY] = query;
    t[RDMA_USER_CM_CMD_BIND] = bind;
    t[RDMA_USER_CM_CMD_RESOLVE_ADDR] = resolve_addr;
    t[RDMA_USER_CM_CMD_JOIN_MCAST] = join_mcast;
    t[kCmdResolveIbService] = resolve_ib_service;
    t[kCmdWriteCmEvent] = write_cm_event;
    return t;
}();

}  // namespace

Result execute_ucma(ConnectionManager& cm, Channel& channel, const rpc::CmCommandRequest& request,
                    rpc::CmCommandReply& reply) {
    rdma_ucm_cmd_hdr header;
    if (request.length < sizeof(header) || request.length > sizeof(request.command)) {
        return fail(EINVAL, "malformed rdma_cm command: %u bytes", request.length);
    }
    memcpy(&header, request.command, sizeof(header));
    if (header.in + sizeof(header) > request.length) {
        return fail(EINVAL, "rdma_cm command %u says %u bytes follow, %zu do", header.cmd,
                    header.in, request.length - sizeof(header));
    }
    if (header.cmd >= kHandlers.size() || !kHandlers[header.cmd]) {
        return fail(EINVAL, "unknown rdma_cm command %u", header.cmd);
    }
    Command command{cm, channel, request, header, reply};
    return kHandlers[header.cmd](command);
}

}  // namespace uroce::cm
