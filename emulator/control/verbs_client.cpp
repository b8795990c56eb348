#include "control/verbs_client.h"

#include "control/check_peer.h"
#include "control/decode.h"
#include "control/dispatcher.h"
#include "control/server.h"
#include "control/session.h"
#include "memory/process_reach.h"
#include "util/coverage.h"
#include "util/log.h"

namespace uroce {

Result VerbsClient::open(Session& session, const rpc::HelloRequest& request,
                         std::vector<UniqueFd>& fds, rpc::HelloReply& reply,
                         std::unique_ptr<VerbsClient>& out) {
    Server& server = session.server();
    const ucred& peer = session.peer();
    Device* device = server.find_device(request.device);
    if (!device) {
        return fail(ENODEV, "no device named %s", request.device);
    }
    if (fds.empty()) {
        return fail(EINVAL, "hello for a device must carry the async event pipe");
    }
    if (Result r = check_reach(peer.pid, peer.uid, request.memory); !r) {
        return r;
    }
    ClientPipe events;
    if (Result r =
            ClientPipe::adopt_in_share(&server.descriptors(), peer.pid, 1, std::move(fds.front()),
                                       false, {"async event pipe", peer.pid}, events);
        !r) {
        return r;
    }
    session.hold_descriptors(1);
    auto context =
        std::make_shared<Context>(*device, peer.pid, std::move(events), &server.descriptors());
    context->set_case(session.case_tag());
    out = std::make_unique<VerbsClient>(session, std::move(context));
    if (!session.case_tag()->id.empty()) {
        out->stats_at_open_ = std::make_unique<DeviceStats>(device->stats());
    }
    reply.device_index = device->index();
    reply.check = server.check_findings().every_client() ? 1 : 0;
    reply.attach_token = out->context_->attach_token();
    log_info("client pid %d opened %s", peer.pid, device->name().c_str());
    return ok();
}

Result VerbsClient::attach(Session& session, const rpc::AttachRequest& request,
                           std::unique_ptr<VerbsClient>& out) {
    const ucred& peer = session.peer();
    std::shared_ptr<Context> context =
        session.server().find_context(request.device, request.attach_token);
    if (!context) {
        return fail(ENOENT, "no open context of %s has that attach token", request.device);
    }
    // A forked child or an importer is a process of its own to reach.
    if (Result r = check_reach(peer.pid, peer.uid, request.memory); !r) {
        return r;
    }
    session.set_case(context->case_tag());  // a forked child is of its parent's case
    out = std::make_unique<VerbsClient>(session, std::move(context));
    const InCase tagged(session.case_tag().get());
    log_info("client pid %d attached to a context of %s", peer.pid, request.device);
    return ok();
}

VerbsClient::VerbsClient(Session& session, std::shared_ptr<Context> context)
    : session_(session), context_(std::move(context)) {}

Context* VerbsClient::live_context(const rpc::RequestHeader& header, const char* what) {
    if (!context_) {
        session_.reply(header,
                       fail(EIO, "%s: the device's context is gone: %s", what, device_gone_), {});
    }
    return context_.get();
}

void VerbsClient::verb(const rpc::RequestHeader& header, std::span<const std::byte> body,
                       std::vector<UniqueFd>& fds) {
    const char* name = verb_name(header.op);
    Context* context = live_context(header, name ? name : "a verb");
    if (!context) {
        return;
    }
    // The verb runs with the device's engine paused (util/ownership.h).
    ownership::touch(context->device().engine());
    context->set_caller(session_.peer().pid);
    // What was posted before these calls goes first: a program that posts
    // unsignaled datagrams and destroys their address handle and QP at once
    // (mckey) has them sent, as rxe, whose post_send runs the requester, would.
    if (header.op == rpc::Op::kResizeCq || header.op == rpc::Op::kDestroyAh ||
        header.op == rpc::Op::kDestroyQp) {
        session_.server().take_posted_work(context->device());
    }
    Answer answer = dispatch(*context, header.op, body, fds);
    if (!answer.result) {
        coverage::refusal(static_cast<uint32_t>(header.op), answer.result.error);
        char what[120];
        if (name) {
            snprintf(what, sizeof(what), "on %s: %s", context->device().name().c_str(), name);
        } else {
            snprintf(what, sizeof(what), "on %s: op %u", context->device().name().c_str(),
                     unsigned(header.op));
        }
        session_.log_refusal(what, answer.result);
    }
    std::vector<int> fds_out;
    for (const UniqueFd& fd : answer.fds) {
        fds_out.push_back(fd.get());
    }
    session_.reply(header, answer.result, answer.body, fds_out);
}

// Check mode: a finding of the client's, kept for `uroce check`.
void VerbsClient::check_finding(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CheckFindingRequest request;
    Result r = decode(body, request);
    Context* context = r ? live_context(header, "a check finding") : nullptr;
    if (r && !context) {
        return;
    }
    if (r) {
        session_.server().check_findings().add(session_.peer().pid, context->device().name(),
                                               request, session_.case_tag()->id);
    }
    session_.reply(header, r, r ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{});
}

// Check mode: how one of the client's QPs and its peer disagree.
void VerbsClient::check_peer(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CheckPeerRequest request;
    rpc::CheckPeerReply answer{};
    Result r = decode(body, request);
    Context* context = r ? live_context(header, "a peer check") : nullptr;
    if (r && !context) {
        return;
    }
    std::shared_ptr<Qp> qp = r ? context->qps().find(request.qp_handle) : nullptr;
    if (r && !qp) {
        r = fail(EINVAL, "no QP with handle %u", request.qp_handle);
    }
    if (r) {
        const auto& devices = session_.server().devices();
        std::string text;
        if (request.question == rpc::PeerQuestion::kRefusal) {
            text = peer_refusal(*qp, devices);
        } else if (request.question == rpc::PeerQuestion::kAttributes) {
            text = peer_mismatch(*qp, devices);
        } else if (request.question == rpc::PeerQuestion::kWriteRace) {
            text = qp->requester.write_race;
            answer.seq = qp->requester.write_race_seq;
        } else if (request.question == rpc::PeerQuestion::kRnrWait) {
            text = qp->requester.rnr_wait;
            answer.seq = qp->requester.rnr_wait_seq;
        } else if (auto ah = context->ahs().find(request.ah_handle)) {
            text =
                ud_qkey_mismatch(*qp, ah->attr, request.remote_qpn, request.remote_qkey, devices);
        }
        snprintf(answer.text, sizeof(answer.text), "%s", text.c_str());
    }
    session_.reply(header, r, r ? bytes_of(answer) : std::vector<std::byte>{});
}

bool VerbsClient::device_removed(const Device& device, const char* why) {
    if (!context_ || &context_->device() != &device) {
        return false;
    }
    context_->post_device_fatal();
    context_.reset();  // its objects go now, while the device exists
    device_gone_ = why;
    log_info("client pid %d lost %s: %s", session_.peer().pid, device.name().c_str(), why);
    return true;
}

}  // namespace uroce
