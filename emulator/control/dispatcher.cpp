#include "control/dispatcher.h"

#include "control/decode.h"

#include <string.h>

#include <array>
#include <functional>

namespace uroce {
namespace {

using Handler = std::function<Answer(Context&, std::span<const std::byte>, std::vector<UniqueFd>&)>;

template <class T>
std::vector<std::byte> to_bytes(const T& value) {
    std::vector<std::byte> bytes(sizeof(T));
    memcpy(bytes.data(), &value, sizeof(T));
    return bytes;
}

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
        return {r, r ? to_bytes(reply) : std::vector<std::byte>{}, {}};
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
        return {r, to_bytes(reply), std::move(fds)};
    };
}

UniqueFd take_first(std::vector<UniqueFd>& fds) {
    return fds.empty() ? UniqueFd() : std::move(fds.front());
}

std::array<Handler, static_cast<size_t>(rpc::Op::kCount)> make_handlers() {
    using rpc::Op;
    std::array<Handler, static_cast<size_t>(Op::kCount)> h;
    auto set = [&h](Op op, Handler handler) { h[static_cast<size_t>(op)] = std::move(handler); };
    set(Op::kQueryDevice, verb(&Context::query_device));
    set(Op::kQueryPort, verb(&Context::query_port));
    set(Op::kAllocPd, verb(&Context::alloc_pd));
    set(Op::kDeallocPd, verb(&Context::dealloc_pd));
    set(Op::kRegMr, verb(&Context::reg_mr));
    set(Op::kReregMr, verb(&Context::rereg_mr));
    set(Op::kAdviseMr, verb(&Context::advise_mr));
    set(Op::kDeregMr, verb(&Context::dereg_mr));
    set(Op::kAllocMw, verb(&Context::alloc_mw));
    set(Op::kDeallocMw, verb(&Context::dealloc_mw));
    set(Op::kAllocDm, verb(&Context::alloc_dm));
    set(Op::kFreeDm, verb(&Context::free_dm));
    set(Op::kImportPd, verb(&Context::import_pd));
    set(Op::kImportMr, verb(&Context::import_mr));
    set(Op::kImportDm, verb(&Context::import_dm));
    set(Op::kRegDmMr, verb(&Context::reg_dm_mr));
    set(Op::kCreateCompChannel,
        [](Context& context, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
            rpc::CreateCompChannelRequest request;
            Result r = decode(body, request);
            if (r) {
                r = context.create_comp_channel(request, take_first(fds));
            }
            return Answer{r, r ? to_bytes(rpc::Empty{}) : std::vector<std::byte>{}, {}};
        });
    set(Op::kDestroyCompChannel, verb(&Context::destroy_comp_channel));
    set(Op::kCreateCq, verb(&Context::create_cq));
    set(Op::kResizeCq, verb(&Context::resize_cq));
    set(Op::kModifyCq, verb(&Context::modify_cq));
    set(Op::kDestroyCq, verb(&Context::destroy_cq));
    set(Op::kCreateSrq, verb(&Context::create_srq));
    set(Op::kModifySrq, verb(&Context::modify_srq));
    set(Op::kQuerySrq, verb(&Context::query_srq));
    set(Op::kDestroySrq, verb(&Context::destroy_srq));
    set(Op::kCreateQp, verb(&Context::create_qp));
    set(Op::kModifyQp, verb(&Context::modify_qp));
    set(Op::kQueryQp, verb(&Context::query_qp));
    set(Op::kDestroyQp, verb(&Context::destroy_qp));
    set(Op::kOpenQp, verb(&Context::open_qp));
    set(Op::kCreateWq, verb(&Context::create_wq));
    set(Op::kModifyWq, verb(&Context::modify_wq));
    set(Op::kDestroyWq, verb(&Context::destroy_wq));
    set(Op::kCreateRwqIndTable, verb(&Context::create_rwq_ind_table));
    set(Op::kDestroyRwqIndTable, verb(&Context::destroy_rwq_ind_table));
    set(Op::kCreateAh, verb(&Context::create_ah));
    set(Op::kDestroyAh, verb(&Context::destroy_ah));
    set(Op::kOpenXrcd,
        [](Context& context, std::span<const std::byte> body, std::vector<UniqueFd>& fds) {
            rpc::OpenXrcdRequest request;
            rpc::OpenXrcdReply reply{};
            Result r = decode(body, request);
            if (r) {
                r = context.open_xrcd(request, reply, take_first(fds));
            }
            return Answer{r, r ? to_bytes(reply) : std::vector<std::byte>{}, {}};
        });
    set(Op::kCloseXrcd, verb(&Context::close_xrcd));
    set(Op::kAttachMcast, verb(&Context::attach_mcast));
    set(Op::kDetachMcast, verb(&Context::detach_mcast));
    set(Op::kCreateFlow, verb(&Context::create_flow));
    set(Op::kDestroyFlow, verb(&Context::destroy_flow));
    return h;
}

}  // namespace

Answer dispatch(Context& context, rpc::Op op, std::span<const std::byte> body,
                std::vector<UniqueFd>& fds) {
    static const auto handlers = make_handlers();
    const auto index = static_cast<size_t>(op);
    if (index >= handlers.size() || !handlers[index]) {
        return {fail(EOPNOTSUPP, "unknown request op %u", static_cast<unsigned>(op)), {}, {}};
    }
    return handlers[index](context, body, fds);
}

}  // namespace uroce
