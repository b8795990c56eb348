#include "control/session.h"

#include <string.h>

#include "cm/ucma.h"
#include "control/check_peer.h"
#include "control/coverage_map.h"
#include "control/decode.h"
#include "control/dispatcher.h"
#include "control/server.h"
#include "memory/process_reach.h"
#include "netlink/nldev.h"
#include "protocol/case_id.h"
#include "protocol/socket.h"
#include "util/coverage.h"
#include "util/log.h"
#include "util/ownership.h"

namespace uroce {
namespace {

// A tool request names a device: the name ends within its field.
template <class Request>
Result decode_tool_request(std::span<const std::byte> body, Request& request) {
    Result r = decode(body, request);
    request.device[sizeof(request.device) - 1] = '\0';
    return r;
}

// The tool's observability ops. They name a device, so any connection may
// send them, with or without a context.
bool is_tool_op(rpc::Op op) {
    switch (op) {
        case rpc::Op::kStats:
        case rpc::Op::kSetFaults:
        case rpc::Op::kStep:
        case rpc::Op::kConsoleStart:
        case rpc::Op::kTraceStart:
        case rpc::Op::kTraceStop:
        case rpc::Op::kTraceQuery:
        case rpc::Op::kReset:
        case rpc::Op::kCoverage:
            return true;
        default:
            return false;
    }
}

template <class T>
std::vector<std::byte> bytes_of(const T& value) {
    const auto bytes = std::as_bytes(std::span(&value, 1));
    return {bytes.begin(), bytes.end()};
}

}  // namespace

Session::Session(Server& server, boost::asio::io_context& io, int fd, const ucred& peer,
                 Result admitted)
    : server_(server),
      socket_(io, fd),
      peer_(peer),
      admitted_(std::move(admitted)),
      descriptors_(admitted_ ? 1 : 0) {}

void Session::start() {
    wait();
}

void Session::close() {
    if (cm_channel_) {
        server_.cm().close_channel(*cm_channel_);
        cm_channel_ = nullptr;
    }
    context_.reset();  // now, while the devices exist; pending handlers may outlive them
    server_.descriptors().give_back(peer_.pid, std::exchange(descriptors_, 0));
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    socket_.close(ignored);
}

void Session::wait() {
    socket_.async_wait(
        boost::asio::posix::stream_descriptor::wait_read,
        in_control_turn([self = shared_from_this()](const boost::system::error_code& error) {
            if (!error) {
                self->on_readable();
            }
        }));
}

void Session::on_readable() {
    std::vector<std::byte> message;
    std::vector<int> fds;
    const int error = rpc::receive_message(socket_.native_handle(), message, fds);
    if (error == EAGAIN) {
        wait();
        return;
    }
    if (is_netlink() &&
        (error == 0 || error == EMSGSIZE || error == EMFILE || error == ETOOMANYREFS)) {
        for (int fd : fds) {
            ::close(fd);  // a netlink socket carries none
        }
        netlink_request(message);
        return;  // flush_netlink waits for the next request once the replies are out
    }
    if (error == 0 || error == EMSGSIZE || error == EMFILE || error == ETOOMANYREFS) {
        handle(message, fds, error == EMSGSIZE ? 0 : error);
        if (ending_) {
            server_.end(shared_from_this());
            return;
        }
        wait();
        return;
    }
    for (int fd : fds) {
        ::close(fd);
    }
    if (error != ECONNRESET) {
        log_warn("client pid %d: receive failed: %s", peer_.pid, strerror(error));
    }
    server_.end(shared_from_this());
}

// The header of a request: size, magic, version, length, and the
// descriptors it came with. `header` is filled as far as the message allows.
Result Session::check_request(std::span<const std::byte> message, int lost_fds,
                              rpc::RequestHeader& header) const {
    if (message.size() < sizeof(header)) {
        return fail(EPROTO, "malformed request: %zu bytes, shorter than a header", message.size());
    }
    memcpy(&header, message.data(), sizeof(header));
    if (header.magic != rpc::kMagic) {
        return fail(EPROTO, "malformed request: bad magic 0x%08x", header.magic);
    }
    if (header.version != rpc::kVersion) {
        return fail(EPROTO, "protocol version %u is not this daemon's %u", header.version,
                    rpc::kVersion);
    }
    if (header.length != message.size()) {
        return fail(EPROTO, "malformed request: length field %u, message %zu bytes", header.length,
                    message.size());
    }
    if (lost_fds) {
        return fail(lost_fds,
                    lost_fds == EMFILE
                        ? "uroced has no file descriptors left to receive the request's"
                        : "the request carries more descriptors than the protocol allows");
    }
    return ok();
}

// Requests of the session itself rather than of a device context: hello,
// attach, status, rdma_cm, netlink and the tool's. False for a verb.
bool Session::handle_session_op(const rpc::RequestHeader& header, std::span<const std::byte> body,
                                std::vector<UniqueFd>& fds) {
    switch (header.op) {
        case rpc::Op::kHello: {
            rpc::HelloReply hello_reply{};
            const Result result = hello(body, fds, hello_reply);
            if (!result) {
                log_refusal("hello", result);
            }
            // A device's client gets the doorbell; the tool needs none.
            const int doorbell[] = {server_.doorbell().eventfd(), server_.doorbell().page_fd()};
            reply(header, result,
                  result ? std::as_bytes(std::span(&hello_reply, 1)) : std::span<const std::byte>{},
                  result && context_ ? std::span<const int>(doorbell) : std::span<const int>{});
            return true;
        }
        case rpc::Op::kAttach: {
            // The doorbell goes along, as with hello: an imported context
            // needs it (a forked child has it already and closes these).
            const Result result = attach(body);
            const int doorbell[] = {server_.doorbell().eventfd(), server_.doorbell().page_fd()};
            reply(header, result, result ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{},
                  result ? std::span<const int>(doorbell) : std::span<const int>{});
            return true;
        }
        case rpc::Op::kStatus:
        case rpc::Op::kQpSnapshot:
        case rpc::Op::kWireSnapshot:
        case rpc::Op::kCheckReport:
        case rpc::Op::kCoverageMap:
            report_page(header, body);
            return true;
        case rpc::Op::kCheckFinding:
            check_finding(header, body);
            return true;
        case rpc::Op::kCheckPeer:
            check_peer(header, body);
            return true;
        case rpc::Op::kCmOpen:
            cm_open(header, body, fds);
            return true;
        case rpc::Op::kCmAttach:
            cm_attach(header, body);
            return true;
        case rpc::Op::kCmCommand:
            cm_command(header, body);
            return true;
        case rpc::Op::kNetlinkOpen:
            netlink_open(header, body);
            return true;
        default:
            if (is_tool_op(header.op)) {
                const Answer answer = tool_request(header.op, body, fds);
                reply(header, answer.result, answer.body);
                return true;
            }
            return false;
    }
}

// Check mode: how one of the client's QPs and its peer disagree.
void Session::check_peer(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CheckPeerRequest request;
    rpc::CheckPeerReply answer{};
    Result r = decode(body, request);
    if (r && !context_) {
        r = fail(EPROTO, "a peer check before hello for a device");
    }
    std::shared_ptr<Qp> qp = r ? context_->qps().find(request.qp_handle) : nullptr;
    if (r && !qp) {
        r = fail(EINVAL, "no QP with handle %u", request.qp_handle);
    }
    if (r) {
        std::string text;
        if (request.question == rpc::PeerQuestion::kRefusal) {
            text = peer_refusal(*qp, server_.devices());
        } else if (request.question == rpc::PeerQuestion::kAttributes) {
            text = peer_mismatch(*qp, server_.devices());
        } else if (request.question == rpc::PeerQuestion::kWriteRace) {
            text = qp->requester.write_race;
            answer.seq = qp->requester.write_race_seq;
        } else if (request.question == rpc::PeerQuestion::kRnrWait) {
            text = qp->requester.rnr_wait;
            answer.seq = qp->requester.rnr_wait_seq;
        } else if (auto ah = context_->ahs().find(request.ah_handle)) {
            text = ud_qkey_mismatch(*qp, ah->attr, request.remote_qpn, request.remote_qkey,
                                    server_.devices());
        }
        snprintf(answer.text, sizeof(answer.text), "%s", text.c_str());
    }
    reply(header, r, r ? bytes_of(answer) : std::vector<std::byte>{});
}

// A finding of a client in check mode, kept for `uroce check`.
void Session::check_finding(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CheckFindingRequest request;
    Result r = decode(body, request);
    if (r && !context_) {
        r = fail(EPROTO, "a check finding before hello for a device");
    }
    if (r) {
        server_.check_findings().add(peer_.pid, context_->device().name(), request, case_->id);
    }
    reply(header, r, r ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{});
}

// A verb on the session's device context.
void Session::handle_verb(const rpc::RequestHeader& header, std::span<const std::byte> body,
                          std::vector<UniqueFd>& fds) {
    if (!context_) {
        reply(header,
              device_gone_ ? fail(EIO, "the device's context is gone: %s", device_gone_)
                           : fail(EPROTO, "request op %u before hello", unsigned(header.op)),
              {});
        return;
    }
    // The verb runs with the device's engine paused (util/ownership.h).
    ownership::touch(context_->device().engine());
    context_->set_caller(peer_.pid);
    // What was posted before these calls goes first: a program that posts
    // unsignaled datagrams and destroys their address handle and QP at once
    // (mckey) has them sent, as rxe, whose post_send runs the requester, would.
    if (header.op == rpc::Op::kResizeCq || header.op == rpc::Op::kDestroyAh ||
        header.op == rpc::Op::kDestroyQp) {
        server_.take_posted_work(context_->device());
    }
    Answer answer = dispatch(*context_, header.op, body, fds);
    if (!answer.result) {
        coverage::refusal(static_cast<uint32_t>(header.op), answer.result.error);
        char what[120];
        const char* verb = verb_name(header.op);
        if (verb) {
            snprintf(what, sizeof(what), "on %s: %s", context_->device().name().c_str(), verb);
        } else {
            snprintf(what, sizeof(what), "on %s: op %u", context_->device().name().c_str(),
                     unsigned(header.op));
        }
        log_refusal(what, answer.result);
    }
    std::vector<int> fds_out;
    for (const UniqueFd& fd : answer.fds) {
        fds_out.push_back(fd.get());
    }
    reply(header, answer.result, answer.body, fds_out);
}

void Session::handle(std::span<const std::byte> message, std::vector<int>& raw_fds, int lost_fds) {
    std::vector<UniqueFd> fds;
    for (int fd : raw_fds) {
        fds.emplace_back(fd);
    }
    rpc::RequestHeader header{};
    if (!admitted_) {
        memcpy(&header, message.data(), std::min(message.size(), sizeof(header)));
        reply(header, admitted_, {});
        ending_ = true;
        return;
    }
    const CaseRef tag = case_;  // held while its id is in log lines
    const InCase tagged(tag.get());
    if (Result r = check_request(message, lost_fds, header); !r) {
        reply(header, r, {});
        return;
    }
    const auto body = message.subspan(sizeof(header));
    if (!handle_session_op(header, body, fds)) {
        handle_verb(header, body, fds);
    }
}

Result Session::take_case(const char (&field)[rpc::kCaseIdLen]) {
    if (std::string why = rpc::case_id_problem(field); !why.empty()) {
        return fail(EINVAL, "%s", why.c_str());
    }
    case_ = tag_case(std::string(field, strnlen(field, rpc::kCaseIdLen)));
    return ok();
}

void Session::log_refusal(const char* what, const Result& result) {
    if (!refusals_logged_.allow(RateLimit::Clock::now())) {
        return;
    }
    if (refusals_logged_.suppressed()) {
        log_info("client pid %d: %llu more refusals not logged", peer_.pid,
                 static_cast<unsigned long long>(refusals_logged_.suppressed()));
    }
    log_info("client pid %d %s refused: %s (%s)", peer_.pid, what, result.message.c_str(),
             strerror(result.error));
}

void Session::cm_open(const rpc::RequestHeader& header, std::span<const std::byte> body,
                      std::vector<UniqueFd>& fds) {
    rpc::CmOpenRequest request;
    Result result = decode(body, request);
    if (result && (context_ || tool_ || cm_channel_)) {
        result = fail(EALREADY, "this connection has already said hello");
    } else if (result) {
        result = take_case(request.case_id);
    }
    if (result && fds.size() != 1) {
        result = fail(EINVAL, "an rdma_cm channel opens with its pipe and nothing else");
    }
    ClientPipe readiness;
    if (result) {
        result = server_.descriptors().take(peer_.pid, 2, "rdma_cm channel");
    }
    if (result) {
        result = ClientPipe::adopt(std::move(fds.front()), true, {"rdma_cm channel", peer_.pid},
                                   readiness);
        if (result) {
            descriptors_ += 2;
        } else {
            server_.descriptors().give_back(peer_.pid, 2);
        }
    }
    rpc::CmOpenReply reply_body{};
    if (result) {
        cm_channel_ = &server_.cm().open_channel(peer_.pid, peer_.uid, std::move(readiness), case_);
        reply_body.channel_token = cm_channel_->token;
    } else {
        log_refusal("rdma_cm channel open", result);
    }
    reply(header, result, result ? bytes_of(reply_body) : std::vector<std::byte>{});
}

void Session::cm_attach(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CmAttachRequest request{};
    Result result = decode(body, request);
    cm::Channel* channel = nullptr;
    if (result && (context_ || tool_ || cm_channel_ || is_netlink())) {
        result = fail(EALREADY, "this connection has already said hello");
    } else if (result && !(channel = server_.cm().find_channel(request.channel_token))) {
        result = fail(ENOENT, "no rdma_cm channel has that token");
    }
    if (result) {
        server_.cm().attach_channel(*channel);
        cm_channel_ = channel;
        case_ = channel->case_tag;  // a forked child is of its parent's case
        const InCase tagged(case_.get());
        log_info("client pid %d attached to an rdma_cm channel of pid %d", peer_.pid, channel->pid);
    } else {
        log_refusal("rdma_cm channel attach", result);
    }
    reply(header, result, result ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{});
}

void Session::cm_command(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    if (!cm_channel_) {
        reply(header, fail(EPROTO, "an rdma_cm command before the channel was opened"), {});
        return;
    }
    // Large and sent often: kept off the stack and out of the allocator.
    static rpc::CmCommandRequest request;
    static rpc::CmCommandReply reply_body;
    Result result = decode(body, request);
    if (result) {
        reply_body = {};
        result = cm::execute_ucma(server_.cm(), *cm_channel_, request, reply_body);
    }
    // No event yet, and librdmacm's probe of AF_IB at start, are routine.
    if (!result && result.error != EAGAIN && result.error != EAFNOSUPPORT) {
        log_refusal("rdma_cm command", result);
    }
    reply(header, result,
          result ? std::as_bytes(std::span(&reply_body, 1)) : std::span<const std::byte>{});
}

bool Session::device_removed(const Device& device, const char* why) {
    if (!context_ || &context_->device() != &device) {
        return false;
    }
    context_->post_device_fatal();
    context_.reset();  // its objects go now, while the device exists
    device_gone_ = why;
    log_info("client pid %d lost %s: %s", peer_.pid, device.name().c_str(), why);
    return true;
}

void Session::netlink_open(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::NetlinkOpenRequest request;
    Result result = decode(body, request);
    if (result && (context_ || tool_ || cm_channel_ || is_netlink())) {
        result = fail(EALREADY, "this connection has already said hello");
    }
    rpc::NetlinkOpenReply reply_body{};
    if (result) {
        reply_body.port_id = server_.netlink_port(peer_.pid);
    }
    reply(header, result, result ? bytes_of(reply_body) : std::vector<std::byte>{});
    netlink_port_ = reply_body.port_id;  // after the reply: it is the last RPC message
}

void Session::netlink_request(std::span<const std::byte> datagram) {
    std::vector<netlink::Bytes> replies =
        netlink::answer(server_.nldev_view(), datagram, netlink_port_);
    for (netlink::Bytes& message : replies) {
        netlink_out_.push_back(std::move(message));
    }
    flush_netlink();
}

// Sends queued replies until the socket is full, then waits for room; reads
// the next request only when all are out.
void Session::flush_netlink() {
    while (!netlink_out_.empty()) {
        const int error = rpc::send_message(socket_.native_handle(), netlink_out_.front());
        if (error == EAGAIN) {
            socket_.async_wait(
                boost::asio::posix::stream_descriptor::wait_write,
                in_control_turn([self = shared_from_this()](const boost::system::error_code& e) {
                    if (!e) {
                        self->flush_netlink();
                    }
                }));
            return;
        }
        if (error) {
            if (error != EPIPE && error != ECONNRESET) {
                log_warn("client pid %d: netlink reply failed: %s", peer_.pid, strerror(error));
            }
            server_.end(shared_from_this());
            return;
        }
        netlink_out_.pop_front();
    }
    wait();
}

void Session::report_page(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::ReportRequest request{};
    if (Result r = decode(body, request); !r) {
        reply(header, r, {});
        return;
    }
    request.device[sizeof(request.device) - 1] = '\0';
    if (request.offset == 0) {
        report_op_ = header.op;
        if (header.op == rpc::Op::kStatus) {
            report_ = server_.status_text();
        } else if (header.op == rpc::Op::kCheckReport) {
            report_ = server_.check_findings().json();
        } else if (header.op == rpc::Op::kCoverageMap) {
            report_ = coverage_map_json();
        } else if (header.op == rpc::Op::kWireSnapshot) {
            if (Result r = server_.wire_snapshot(request.device, report_); !r) {
                reply(header, r, {});
                return;
            }
        } else {
            QpSelection selection{request.device, std::nullopt};
            if (request.has_qpn) {
                selection.qpn = request.qpn;
            }
            if (Result r = server_.qp_snapshot(selection, report_); !r) {
                reply(header, r, {});
                return;
            }
        }
    } else if (header.op != report_op_) {
        reply(header,
              fail(EINVAL,
                   "a report page at offset %llu asks for another report than the one being read",
                   static_cast<unsigned long long>(request.offset)),
              {});
        return;
    }
    if (request.offset > report_.size()) {
        reply(header,
              fail(EINVAL, "report offset %llu is past the report's %zu bytes",
                   static_cast<unsigned long long>(request.offset), report_.size()),
              {});
        return;
    }
    const size_t page = std::min(rpc::kReportPageBytes, report_.size() - size_t(request.offset));
    const rpc::ReportReply head{report_.size()};
    std::vector<std::byte> out = bytes_of(head);
    const auto text = std::as_bytes(std::span(report_).subspan(request.offset, page));
    out.insert(out.end(), text.begin(), text.end());
    reply(header, ok(), out);
}

Result Session::attach(std::span<const std::byte> body) {
    rpc::AttachRequest request{};
    if (Result r = decode(body, request); !r) {
        return r;
    }
    if (context_ || tool_) {
        return fail(EALREADY, "this connection has already said hello");
    }
    request.device[sizeof(request.device) - 1] = '\0';
    std::shared_ptr<Context> context = server_.find_context(request.device, request.attach_token);
    if (!context) {
        return fail(ENOENT, "no open context of %s has that attach token", request.device);
    }
    // A forked child or an importer is a process of its own to reach.
    if (Result r = check_reach(peer_.pid, peer_.uid, request.memory); !r) {
        return r;
    }
    context_ = std::move(context);
    case_ = context_->case_tag();  // a forked child is of its parent's case
    const InCase tagged(case_.get());
    log_info("client pid %d attached to a context of %s", peer_.pid, request.device);
    return ok();
}

Result Session::hello(std::span<const std::byte> body, std::vector<UniqueFd>& fds,
                      rpc::HelloReply& reply) {
    rpc::HelloRequest request;
    if (body.size() != sizeof(request)) {
        return fail(EPROTO, "malformed hello");
    }
    if (context_ || tool_) {
        return fail(EALREADY, "this connection has already said hello");
    }
    memcpy(&request, body.data(), sizeof(request));
    request.device[sizeof(request.device) - 1] = '\0';
    if (Result r = take_case(request.case_id); !r) {
        return r;
    }
    const InCase tagged(case_.get());  // what follows is the case's
    if (request.device[0] == '\0') {
        tool_ = true;
        return ok();
    }
    Device* device = server_.find_device(request.device);
    if (!device) {
        return fail(ENODEV, "no device named %s", request.device);
    }
    if (fds.empty()) {
        return fail(EINVAL, "hello for a device must carry the async event pipe");
    }
    if (Result r = check_reach(peer_.pid, peer_.uid, request.memory); !r) {
        return r;
    }
    if (Result r = server_.descriptors().take(peer_.pid, 1, "async event pipe"); !r) {
        return r;
    }
    ClientPipe events;
    if (Result r = ClientPipe::adopt(std::move(fds.front()), false, {"async event pipe", peer_.pid},
                                     events);
        !r) {
        server_.descriptors().give_back(peer_.pid, 1);
        return r;
    }
    ++descriptors_;
    context_ =
        std::make_shared<Context>(*device, peer_.pid, std::move(events), &server_.descriptors());
    context_->set_case(case_);
    if (!case_->id.empty()) {
        stats_at_open_ = std::make_unique<DeviceStats>(device->stats());
    }
    reply.device_index = device->index();
    reply.check = server_.check_findings().every_client() ? 1 : 0;
    reply.attach_token = context_->attach_token();
    log_info("client pid %d opened %s", peer_.pid, device->name().c_str());
    return ok();
}

Answer Session::tool_request(rpc::Op op, std::span<const std::byte> body,
                             std::vector<UniqueFd>& fds) {
    Answer answer;
    if (op == rpc::Op::kSetFaults) {
        rpc::SetFaultsRequest request;
        if ((answer.result = decode_tool_request(body, request)) &&
            (answer.result = server_.set_faults(peer_.pid, request, fds))) {
            answer.body = bytes_of(rpc::Empty{});
        }
        return answer;
    }
    if (op == rpc::Op::kStep) {
        rpc::StepRequest request;
        rpc::StepReply reply{};
        if ((answer.result = decode_tool_request(body, request)) &&
            (answer.result = server_.step(peer_.pid, request, reply))) {
            answer.body = bytes_of(reply);
        }
        return answer;
    }
    if (op == rpc::Op::kCoverage) {
        rpc::CoverageRequest request;
        if ((answer.result = decode(body, request))) {
            auto reply = std::make_unique<rpc::CoverageReply>();
            if ((answer.result = read_coverage(request, *reply))) {
                answer.body = bytes_of(*reply);
            }
        }
        return answer;
    }
    if (op == rpc::Op::kConsoleStart) {
        rpc::ConsoleStartRequest request;
        rpc::ConsoleStartReply reply{};
        if ((answer.result = decode(body, request)) &&
            (answer.result = server_.start_console(*this, request, reply))) {
            answer.body = bytes_of(reply);
        }
        return answer;
    }
    if (op == rpc::Op::kTraceStart) {
        rpc::TraceStartRequest request;
        if ((answer.result = decode_tool_request(body, request)) &&
            (answer.result = server_.start_trace(*this, request, fds))) {
            answer.body = bytes_of(rpc::Empty{});
        }
        return answer;
    }
    rpc::DeviceRequest request;
    if (!(answer.result = decode_tool_request(body, request))) {
        return answer;
    }
    if (op == rpc::Op::kReset) {
        rpc::ResetReply reply{};
        if ((answer.result = server_.reset(peer_.pid, request.device, reply))) {
            answer.body = bytes_of(reply);
        }
        return answer;
    }
    if (op == rpc::Op::kStats) {
        std::string text;
        if ((answer.result = server_.stats_text(request.device, text))) {
            answer.body.resize(sizeof(rpc::StatsReply));
            memcpy(answer.body.data(), text.c_str(), text.size() + 1);
        }
        return answer;
    }
    rpc::TraceReply trace{};
    answer.result = op == rpc::Op::kTraceStop ? server_.stop_trace(*this, request.device, trace)
                                              : server_.query_trace(request.device, trace);
    if (answer.result) {
        answer.body = bytes_of(trace);
    }
    return answer;
}

void Session::reply(const rpc::RequestHeader& request, const Result& result,
                    std::span<const std::byte> body, std::span<const int> fds) {
    rpc::ReplyHeader header{};
    header.magic = rpc::kMagic;
    header.version = rpc::kVersion;
    header.op = request.op;
    header.seq = request.seq;
    header.error = result.error;
    snprintf(header.message, sizeof(header.message), "%s", result.message.c_str());
    std::vector<std::byte> message(sizeof(header) + body.size());
    header.length = static_cast<uint32_t>(message.size());
    memcpy(message.data(), &header, sizeof(header));
    if (!body.empty()) {
        memcpy(message.data() + sizeof(header), body.data(), body.size());
    }
    if (int error = rpc::send_message(socket_.native_handle(), message, fds); error) {
        log_warn("client pid %d: reply to op %u failed: %s", peer_.pid, unsigned(request.op),
                 strerror(error));
        // The caller waits for an answer: a reply that cannot go is
        // replaced by one that says why (small, with no descriptors).
        if (result.error == 0 && error != EPIPE && error != ECONNRESET) {
            this->reply(request,
                        fail(error, "uroced could not send its %zu-byte reply: %s", message.size(),
                             strerror(error)),
                        {});
        }
    }
}

}  // namespace uroce
