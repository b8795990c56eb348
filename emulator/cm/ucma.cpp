#include "cm/ucma.h"

#include <string.h>

#include <algorithm>

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

}  // namespace

// The ucma commands librdmacm sends (up to v65), by number.
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
    Id* id = nullptr;
    switch (header.cmd) {
        case RDMA_USER_CM_CMD_CREATE_ID: {
            const auto cmd = read_command<rdma_ucm_create_id>(request);
            rdma_ucm_create_id_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.create_id(channel, cmd.uid, cmd.ps, cmd.qp_type, resp.id); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_DESTROY_ID: {
            const auto cmd = read_command<rdma_ucm_destroy_id>(request);
            rdma_ucm_destroy_id_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.destroy_id(channel, cmd.id, resp.events_reported); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_BIND_IP: {
            const auto cmd = read_command<rdma_ucm_bind_ip>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.bind(*id, address_from(&cmd.addr, sizeof(cmd.addr)));
        }
        case RDMA_USER_CM_CMD_BIND: {
            const auto cmd = read_command<rdma_ucm_bind>(request);
            const Address address = address_from(&cmd.addr, sizeof(cmd.addr));
            if (cmd.reserved || !cmd.addr_size || cmd.addr_size != address_size(address)) {
                return fail(EINVAL, "BIND: address size %u does not fit family %u", cmd.addr_size,
                            address.ss_family);
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.bind(*id, address);
        }
        case RDMA_USER_CM_CMD_RESOLVE_IP: {
            const auto cmd = read_command<rdma_ucm_resolve_ip>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            const Address src = address_from(&cmd.src_addr, sizeof(cmd.src_addr));
            return cm.resolve_addr(*id, src.ss_family ? &src : nullptr,
                                   address_from(&cmd.dst_addr, sizeof(cmd.dst_addr)));
        }
        case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
            const auto cmd = read_command<rdma_ucm_resolve_addr>(request);
            const Address src = address_from(&cmd.src_addr, sizeof(cmd.src_addr));
            const Address dst = address_from(&cmd.dst_addr, sizeof(cmd.dst_addr));
            if (cmd.reserved || (cmd.src_size && cmd.src_size != address_size(src)) ||
                !cmd.dst_size || cmd.dst_size != address_size(dst)) {
                return fail(EINVAL, "RESOLVE_ADDR: address sizes do not fit their families");
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.resolve_addr(*id, cmd.src_size ? &src : nullptr, dst);
        }
        case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
            const auto cmd = read_command<rdma_ucm_resolve_route>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.resolve_route(*id);
        }
        case RDMA_USER_CM_CMD_QUERY_ROUTE: {
            const auto cmd = read_command<rdma_ucm_query>(request);
            rdma_ucm_query_route_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            cm.fill_route(*id, resp);
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_QUERY: {
            const auto cmd = read_command<rdma_ucm_query>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            if (cmd.option == RDMA_USER_CM_QUERY_ADDR) {
                rdma_ucm_query_addr_resp resp{};
                if (Result r = need_out(header, sizeof(resp)); !r) {
                    return r;
                }
                cm.fill_addr(*id, resp);
                respond(reply, cmd.response, resp);
                return ok();
            }
            if (cmd.option == RDMA_USER_CM_QUERY_GID) {
                rdma_ucm_query_addr_resp resp{};
                if (Result r = need_out(header, sizeof(resp)); !r) {
                    return r;
                }
                cm.fill_gid(*id, resp);
                respond(reply, cmd.response, resp);
                return ok();
            }
            if (cmd.option == RDMA_USER_CM_QUERY_PATH) {
                // The header and one record (the path_data array is flexible).
                alignas(rdma_ucm_query_path_resp)
                    uint8_t resp[sizeof(rdma_ucm_query_path_resp) + sizeof(ib_path_rec_data)] = {};
                auto& head = *reinterpret_cast<rdma_ucm_query_path_resp*>(resp);
                if (Result r = need_out(header, sizeof(head)); !r) {
                    return r;
                }
                // As ucma_query_path: a record only where more than one fits.
                const size_t room = header.out - sizeof(head) > sizeof(ib_path_rec_data);
                const size_t paths = cm.fill_path(
                    *id, head,
                    reinterpret_cast<ib_path_rec_data*>(resp + sizeof(rdma_ucm_query_path_resp)),
                    room);
                respond(reply, cmd.response, resp,
                        sizeof(rdma_ucm_query_path_resp) + paths * sizeof(ib_path_rec_data));
                return ok();
            }
            if (cmd.option == kQueryIbService) {
                // The service records RESOLVE_IB_SERVICE found: never any here.
                const QueryIbServiceResponse resp{};
                if (Result r = need_out(header, sizeof(resp)); !r) {
                    return r;
                }
                respond(reply, cmd.response, resp);
                return ok();
            }
            return fail(ENOSYS, "QUERY option %u is not one of rdma_cm's", cmd.option);
        }
        case RDMA_USER_CM_CMD_CONNECT: {
            const auto cmd = read_command<rdma_ucm_connect>(request);
            if (!cmd.conn_param.valid) {
                return fail(EINVAL, "CONNECT without connection parameters");
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.connect(*id, conn_param_from(cmd.conn_param));
        }
        case RDMA_USER_CM_CMD_LISTEN: {
            const auto cmd = read_command<rdma_ucm_listen>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            const uint32_t backlog =
                cmd.backlog > 0 && cmd.backlog < kMaxBacklog ? cmd.backlog : kMaxBacklog;
            return cm.listen(*id, backlog);
        }
        case RDMA_USER_CM_CMD_ACCEPT: {
            const auto cmd = read_command<rdma_ucm_accept>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            if (!cmd.conn_param.valid) {
                return cm.accept(*id, 0, nullptr);
            }
            const ConnParam param = conn_param_from(cmd.conn_param);
            return cm.accept(*id, cmd.uid, &param);
        }
        case RDMA_USER_CM_CMD_REJECT: {
            const auto cmd = read_command<rdma_ucm_reject>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.reject(*id, std::span(cmd.private_data, cmd.private_data_len), cmd.reason);
        }
        case RDMA_USER_CM_CMD_DISCONNECT: {
            const auto cmd = read_command<rdma_ucm_disconnect>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.disconnect(*id);
        }
        case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
            const auto cmd = read_command<rdma_ucm_init_qp_attr>(request);
            ib_uverbs_qp_attr resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (cmd.qp_state > IBV_QPS_ERR) {
                return fail(EINVAL, "INIT_QP_ATTR for QP state %u", cmd.qp_state);
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            if (Result r = cm.init_qp_attr(*id, cmd.qp_state, resp); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_GET_EVENT: {
            const auto cmd = read_command<rdma_ucm_get_event>(request);
            rdma_ucm_event_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.get_event(channel, resp); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_SET_OPTION: {
            const auto cmd = read_command<rdma_ucm_set_option>(request);
            if (cmd.optlen != request.option_length || cmd.optlen > sizeof(request.option)) {
                return fail(EINVAL, "SET_OPTION value of %u bytes", cmd.optlen);
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.set_option(*id, cmd.level, cmd.optname,
                                 std::span(request.option, cmd.optlen));
        }
        case RDMA_USER_CM_CMD_NOTIFY: {
            const auto cmd = read_command<rdma_ucm_notify>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.notify(*id, cmd.event);
        }
        case RDMA_USER_CM_CMD_MIGRATE_ID: {
            // Written to the channel the ID moves to; cmd.fd names the one it leaves.
            const auto cmd = read_command<rdma_ucm_migrate_id>(request);
            rdma_ucm_migrate_resp resp{};
            Channel* from = cm.find_channel(request.migrate_token);
            if (!from) {
                return fail(EINVAL, "MIGRATE_ID: descriptor %u is not an rdma_cm channel", cmd.fd);
            }
            if (Result r = cm.find(*from, cmd.id, id); !r) {
                return r;
            }
            if (Result r = cm.migrate(*id, channel, resp.events_reported); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_JOIN_IP_MCAST: {
            const auto cmd = read_command<rdma_ucm_join_ip_mcast>(request);
            rdma_ucm_create_id_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            const Address group = address_from(&cmd.addr, sizeof(cmd.addr));
            if (Result r =
                    cm.join_multicast(*id, cmd.uid, group, RDMA_MC_JOIN_FLAG_FULLMEMBER, resp.id);
                !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_JOIN_MCAST: {
            const auto cmd = read_command<rdma_ucm_join_mcast>(request);
            rdma_ucm_create_id_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            const Address group = address_from(&cmd.addr, sizeof(cmd.addr));
            if (cmd.addr_size != address_size(group)) {
                return fail(EINVAL, "JOIN_MCAST: address size %u does not fit family %u",
                            cmd.addr_size, group.ss_family);
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            if (Result r = cm.join_multicast(*id, cmd.uid, group, cmd.join_flags, resp.id); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case RDMA_USER_CM_CMD_LEAVE_MCAST: {
            const auto cmd = read_command<rdma_ucm_destroy_id>(request);
            rdma_ucm_destroy_id_resp resp{};
            if (Result r = need_out(header, sizeof(resp)); !r) {
                return r;
            }
            if (Result r = cm.leave_multicast(channel, cmd.id, resp.events_reported); !r) {
                return r;
            }
            respond(reply, cmd.response, resp);
            return ok();
        }
        case kCmdResolveIbService: {
            const auto cmd = read_command<ResolveIbServiceCommand>(request);
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.resolve_ib_service(*id);
        }
        case kCmdWriteCmEvent: {
            const auto cmd = read_command<WriteCmEventCommand>(request);
            if (cmd.event != kEventUser && cmd.event != kEventInternal) {
                return fail(EINVAL, "WRITE_CM_EVENT of event %u: only USER and INTERNAL",
                            cmd.event);
            }
            if (Result r = cm.find(channel, cmd.id, id); !r) {
                return r;
            }
            return cm.write_event(*id, cmd.event, cmd.status, cmd.param.arg);
        }
        case RDMA_USER_CM_CMD_GET_OPTION:
            return fail(ENOSYS, "GET_OPTION has no handler in the kernel either");
        default:
            return fail(EINVAL, "unknown rdma_cm command %u", header.cmd);
    }
}

}  // namespace uroce::cm
