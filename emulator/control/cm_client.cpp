#include "control/cm_client.h"

#include "cm/ucma.h"
#include "control/decode.h"
#include "control/server.h"
#include "control/session.h"
#include "util/log.h"

namespace uroce {

Result CmClient::open(Session& session, std::vector<UniqueFd>& fds,
                      std::unique_ptr<CmClient>& out) {
    Server& server = session.server();
    const ucred& peer = session.peer();
    if (fds.size() != 1) {
        return fail(EINVAL, "an rdma_cm channel opens with its pipe and nothing else");
    }
    ClientPipe readiness;
    if (Result r =
            ClientPipe::adopt_in_share(&server.descriptors(), peer.pid, 2, std::move(fds.front()),
                                       true, {"rdma_cm channel", peer.pid}, readiness);
        !r) {
        return r;
    }
    session.hold_descriptors(2);
    cm::Channel& channel =
        server.cm().open_channel(peer.pid, peer.uid, std::move(readiness), session.case_tag());
    out = std::make_unique<CmClient>(session, channel);
    return ok();
}

Result CmClient::attach(Session& session, const rpc::CmAttachRequest& request,
                        std::unique_ptr<CmClient>& out) {
    cm::Channel* channel = session.server().cm().find_channel(request.channel_token);
    if (!channel) {
        return fail(ENOENT, "no rdma_cm channel has that token");
    }
    session.server().cm().attach_channel(*channel);
    session.set_case(channel->case_tag);  // a forked child is of its parent's case
    out = std::make_unique<CmClient>(session, *channel);
    const InCase tagged(session.case_tag().get());
    log_info("client pid %d attached to an rdma_cm channel of pid %d", session.peer().pid,
             channel->pid);
    return ok();
}

void CmClient::command(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    // Large and sent often: kept off the stack and out of the allocator.
    static rpc::CmCommandRequest request;
    static rpc::CmCommandReply reply_body;
    Result result = decode(body, request);
    if (result) {
        reply_body = {};
        result = cm::execute_ucma(session_.server().cm(), *channel_, request, reply_body);
    }
    // No event yet, and librdmacm's probe of AF_IB at start, are routine.
    if (!result && result.error != EAGAIN && result.error != EAFNOSUPPORT) {
        session_.log_refusal("rdma_cm command", result);
    }
    session_.reply(
        header, result,
        result ? std::as_bytes(std::span(&reply_body, 1)) : std::span<const std::byte>{});
}

void CmClient::close() {
    session_.server().cm().close_channel(*channel_);
}

}  // namespace uroce
