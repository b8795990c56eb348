#include "control/dispatcher.h"

#include "control/decode.h"

#include <string.h>

#include <array>
#include <functional>

namespace uroce {
namespace {

using Handler = std::function<Answer(Context&, std::span<const std::byte>, std::vector<UniqueFd>&)>;

template <class Request, class Reply>
Handler verb(Result (Context::*method)(const Request&, Reply&)) {
    return [method](Context& context, std::span<const std::byte> body,
                    std::vector<UniqueFd>&) -> Answer {
        Request request;
        if (Result r = decode(body, request); !r) {
            return {r, {}, {}};
        }
        Reply reply{};
        Result r = (context.*method)(request, reply);
        return {r, r ? bytes_of(reply) : std::vector<std::byte>{}, {}};
    };
}

// A verb that hands shared memory back with its reply.
template <class Request, class Reply>
Handler verb(Result (Context::*method)(const Request&, Reply&, ReplyFds&)) {
    return [method](Context& context, std::span<const std::byte> body,
                    std::vector<UniqueFd>&) -> Answer {
        Request request;
        if (Result r = decode(body, request); !r) {
            return {r, {}, {}};
        }
        Reply reply{};
        ReplyFds fds;
        Result r = (context.*method)(request, reply, fds);
        if (!r) {
            return {r, {}, {}};
        }
        return {r, bytes_of(reply), std::move(fds)};
    };
}

UniqueFd take_first(std::vector<UniqueFd>& fds) {
    return fds.empty() ? UniqueFd() : std::move(fds.front());
}

struct Verb {
    const char* name = nullptr;  // the Context method's
    Handler handler;
};

std::array<Verb, static_cast<size_t>(rpc::Op::kCount)> make_handlers() {
    using rpc::Op;
    std::array<Verb, static_cast<size_t>(Op::kCount)> h;
    auto set = [&h](Op op, const char* name, Handler handler) {
        h[static_cast<size_t>(op)] = {name, std::move(handler)};
    };
    set(Op::kQueryDevice, "query_device", verb(&Context::query_device));
    set(Op::kQueryPort, "query_port", verb(&Context::query_port));
    set(Op::kAllocPd, "alloc_pd", verb(&Context::alloc_pd));
    set(Op::kDeallocPd, "dealloc_pd", verb(&Context::dealloc_pd));
    set(Op::kRegMr, "reg_mr", verb(&Context::reg_mr));
    set(Op::kReregMr, "rereg_mr", verb(&Context::rereg_mr));
    set(Op::kAdviseMr, "advise_mr", verb(&Context::advise_mr));
    set(Op::kDeregMr, "dereg_mr", verb(&Context::dereg_mr));
    set(Op::kAllocMw, "alloc_mw", verb(&Context::alloc_mw));
    set(Op::kDeallocMw, "dealloc_mw", verb(&Context::dealloc_mw));
    set(Op::kAllocDm, "alloc_dm", verb(&Context::alloc_dm));
    set(Op::kFreeDm, "free_dm", verb(&Context::free_dm));
    set(Op::kImportPd, "import_pd", verb(&Context::import_pd));
    set(Op::kImportMr, "import_mr", verb(&Context::import_mr));
    set(Op::kImportDm, "import_dm", verb(&Context::import_dm));
    set(Op::kRegDmMr, "reg_dm_mr", verb(&Context::reg_dm_mr));
    set(Op::kCreateCompChannel, "create_comp_channel",
        [](Context& context, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
            rpc::CreateCompChannelRequest request;
            Result r = decode(body, request);
            if (r) {
                r = context.create_comp_channel(request, take_first(fds));
            }
            return Answer{r, r ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{}, {}};
        });
    set(Op::kDestroyCompChannel, "destroy_comp_channel", verb(&Context::destroy_comp_channel));
    set(Op::kCreateCq, "create_cq", verb(&Context::create_cq));
    set(Op::kResizeCq, "resize_cq", verb(&Context::resize_cq));
    set(Op::kModifyCq, "modify_cq", verb(&Context::modify_cq));
    set(Op::kDestroyCq, "destroy_cq", verb(&Context::destroy_cq));
    set(Op::kCreateSrq, "create_srq", verb(&Context::create_srq));
    set(Op::kModifySrq, "modify_srq", verb(&Context::modify_srq));
    set(Op::kQuerySrq, "query_srq", verb(&Context::query_srq));
    set(Op::kDestroySrq, "destroy_srq", verb(&Context::destroy_srq));
    set(Op::kCreateQp, "create_qp", verb(&Context::create_qp));
    set(Op::kModifyQp, "modify_qp", verb(&Context::modify_qp));
    set(Op::kQueryQp, "query_qp", verb(&Context::query_qp));
    set(Op::kDestroyQp, "destroy_qp", verb(&Context::destroy_qp));
    set(Op::kOpenQp, "open_qp", verb(&Context::open_qp));
    set(Op::kCreateWq, "create_wq", verb(&Context::create_wq));
    set(Op::kModifyWq, "modify_wq", verb(&Context::modify_wq));
    set(Op::kDestroyWq, "destroy_wq", verb(&Context::destroy_wq));
    set(Op::kCreateRwqIndTable, "create_rwq_ind_table", verb(&Context::create_rwq_ind_table));
    set(Op::kDestroyRwqIndTable, "destroy_rwq_ind_table", verb(&Context::destroy_rwq_ind_table));
    set(Op::kCreateAh, "create_ah", verb(&Context::create_ah));
    set(Op::kDestroyAh, "destroy_ah", verb(&Context::destroy_ah));
    set(Op::kOpenXrcd, "open_xrcd",
        [](Context& context, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
            rpc::OpenXrcdRequest request;
            rpc::OpenXrcdReply reply{};
            Result r = decode(body, request);
            if (r) {
                r = context.open_xrcd(request, reply, take_first(fds));
            }
            return Answer{r, r ? bytes_of(reply) : std::vector<std::byte>{}, {}};
        });
    set(Op::kCloseXrcd, "close_xrcd", verb(&Context::close_xrcd));
    set(Op::kAttachMcast, "attach_mcast", verb(&Context::attach_mcast));
    set(Op::kDetachMcast, "detach_mcast", verb(&Context::detach_mcast));
    set(Op::kCreateFlow, "create_flow", verb(&Context::create_flow));
    set(Op::kDestroyFlow, "destroy_flow", verb(&Context::destroy_flow));
    return h;
}

const std::array<Verb, static_cast<size_t>(rpc::Op::kCount)>& verbs() {
    static const auto handlers = make_handlers();
    return handlers;
}

}  // namespace

Answer dispatch(Context& context, rpc::Op op, std::span<const std::byte> body,
                std::vector<UniqueFd>& fds) {
    const auto index = static_cast<size_t>(op);
    if (index >= verbs().size() || !verbs()[index].handler) {
        return {fail(EOPNOTSUPP, "unknown request op %u", static_cast<unsigned>(op)), {}, {}};
    }
    return verbs()[index].handler(context, body, fds);
}

const char* verb_name(rpc::Op op) {
    const auto index = static_cast<size_t>(op);
    return index < verbs().size() ? verbs()[index].name : nullptr;
}

}  // namespace uroce
