// Flow steering rules (ibv_create_flow(3)) on RAW_PACKET QPs.
#include <linux/capability.h>

#include <algorithm>

#include "qp/qp_transitions.h"
#include "util/capabilities.h"
#include "verbs/context.h"

namespace uroce {

// As the kernel: only CAP_NET_RAW steers frames, to a RAW_PACKET QP of the
// caller (an RSS QP included), by a rule that parses; the QP cannot be
// destroyed while it has rules (EBUSY).
Result Context::create_flow(const rpc::CreateFlowRequest& req, rpc::CreateFlowReply& reply) {
    auto qp = qps_.find(req.qp);
    if (!qp) {
        return fail(EINVAL, "no QP with handle %u", req.qp);
    }
    if (qp->type != IBV_QPT_RAW_PACKET) {
        return fail(EINVAL, "flows steer frames to RAW_PACKET QPs, not to %s QP 0x%x",
                    qp_type_name(qp->type), qp->qpn);
    }
    if (!has_capability(pid_, CAP_NET_RAW)) {
        return fail(EPERM, "only a process with CAP_NET_RAW creates flows");
    }
    if (req.size > sizeof(req.attr)) {
        return fail(EINVAL, "a flow attribute of %u bytes: at most %zu are taken", req.size,
                    sizeof(req.attr));
    }
    steering::ParsedRule parsed = steering::parse_flow_rule(std::span(req.attr).first(req.size));
    if (parsed.error) {
        return fail(parsed.error, "%s", parsed.why.c_str());
    }
    auto flow = std::make_shared<Flow>();
    flow->qp = Ref<Qp>(qp);
    flow->rule = std::move(parsed.rule);
    reply.handle = flows_.add(flow)->handle;
    device_.flows().push_back(flow.get());
    return ok();
}

Result Context::destroy_flow(const rpc::HandleRequest& req, rpc::Empty&) {
    auto flow = flows_.find(req.handle);
    if (!flow) {
        return fail(EINVAL, "no flow with handle %u", req.handle);
    }
    std::erase(device_.flows(), flow.get());
    flows_.erase(req.handle);
    return ok();
}

}  // namespace uroce
