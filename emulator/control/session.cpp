#include "control/session.h"

#include <string.h>

#include "control/decode.h"
#include "control/server.h"
#include "protocol/case_id.h"
#include "protocol/socket.h"
#include "util/log.h"
#include "util/ownership.h"

namespace uroce {

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
    if (cm_) {
        cm_->close();
        cm_.reset();
    }
    if (verbs_) {
        verbs_->close();  // now, while the devices exist; pending handlers may outlive them
    }
    server_.descriptors().give_back(peer_.pid, std::exchange(descriptors_, 0));
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    socket_.close(ignored);
}

const std::shared_ptr<Context>& Session::shared_context() const {
    static const std::shared_ptr<Context> none;
    return verbs_ ? verbs_->context() : none;
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
    const bool received =
        error == 0 || error == EMSGSIZE || error == EMFILE || error == ETOOMANYREFS;
    if (received && netlink_) {
        for (int fd : fds) {
            ::close(fd);  // a netlink socket carries none
        }
        netlink_->answer(message);
        flush_netlink();  // waits for the next request once the replies are out
        return;
    }
    if (received) {
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

void Session::flush_netlink() {
    switch (netlink_->send_replies(socket_.native_handle())) {
        case NetlinkClient::Sent::kAll:
            wait();
            return;
        case NetlinkClient::Sent::kSocketFull:
            socket_.async_wait(
                boost::asio::posix::stream_descriptor::wait_write,
                in_control_turn([self = shared_from_this()](const boost::system::error_code& e) {
                    if (!e) {
                        self->flush_netlink();
                    }
                }));
            return;
        case NetlinkClient::Sent::kFailed:
            server_.end(shared_from_this());
            return;
    }
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
    route(header, message.subspan(sizeof(header)), fds);
}

void Session::route(const rpc::RequestHeader& header, std::span<const std::byte> body,
                    std::vector<UniqueFd>& fds) {
    switch (header.op) {
        case rpc::Op::kHello:
            hello(header, body, fds);
            return;
        case rpc::Op::kAttach:
            attach(header, body);
            return;
        case rpc::Op::kCmOpen:
            cm_open(header, body, fds);
            return;
        case rpc::Op::kCmAttach:
            cm_attach(header, body);
            return;
        case rpc::Op::kNetlinkOpen:
            netlink_open(header, body);
            return;
        case rpc::Op::kCmCommand:
            if (cm_) {
                cm_->command(header, body);
            } else {
                reply(header, fail(EPROTO, "an rdma_cm command before the channel was opened"), {});
            }
            return;
        case rpc::Op::kCheckFinding:
        case rpc::Op::kCheckPeer:
            if (!verbs_) {
                reply(header, fail(EPROTO, "a check-mode request before hello for a device"), {});
            } else if (header.op == rpc::Op::kCheckFinding) {
                verbs_->check_finding(header, body);
            } else {
                verbs_->check_peer(header, body);
            }
            return;
        default:
            if (ToolRequests::handles(header.op)) {
                tool_requests_.request(header, body, fds);
            } else if (verbs_) {
                verbs_->verb(header, body, fds);
            } else {
                reply(header, fail(EPROTO, "request op %u before hello", unsigned(header.op)), {});
            }
            return;
    }
}

void Session::hello(const rpc::RequestHeader& header, std::span<const std::byte> body,
                    std::vector<UniqueFd>& fds) {
    rpc::HelloRequest request;
    rpc::HelloReply hello_reply{};
    Result result = body.size() == sizeof(request) ? ok() : fail(EPROTO, "malformed hello");
    if (result && said_hello()) {
        result = fail(EALREADY, "this connection has already said hello");
    }
    if (result) {
        memcpy(&request, body.data(), sizeof(request));
        request.device[sizeof(request.device) - 1] = '\0';
        result = take_case(request.case_id);
    }
    if (result) {
        const InCase tagged(case_.get());  // what follows is the case's
        if (request.device[0] == '\0') {
            tool_ = true;
        } else {
            result = VerbsClient::open(*this, request, fds, hello_reply, verbs_);
        }
    }
    if (!result) {
        log_refusal("hello", result);
    }
    // A device's client gets the doorbell; the tool needs none.
    const int doorbell[] = {server_.doorbell().eventfd(), server_.doorbell().page_fd()};
    reply(header, result,
          result ? std::as_bytes(std::span(&hello_reply, 1)) : std::span<const std::byte>{},
          result && verbs_ ? std::span<const int>(doorbell) : std::span<const int>{});
}

void Session::attach(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::AttachRequest request{};
    Result result = decode(body, request);
    if (result && said_hello()) {
        result = fail(EALREADY, "this connection has already said hello");
    }
    if (result) {
        request.device[sizeof(request.device) - 1] = '\0';
        result = VerbsClient::attach(*this, request, verbs_);
    }
    // The doorbell goes along, as with hello: an imported context needs it
    // (a forked child has it already and closes these).
    const int doorbell[] = {server_.doorbell().eventfd(), server_.doorbell().page_fd()};
    reply(header, result, result ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{},
          result ? std::span<const int>(doorbell) : std::span<const int>{});
}

void Session::cm_open(const rpc::RequestHeader& header, std::span<const std::byte> body,
                      std::vector<UniqueFd>& fds) {
    rpc::CmOpenRequest request;
    Result result = decode(body, request);
    if (result && said_hello()) {
        result = fail(EALREADY, "this connection has already said hello");
    } else if (result) {
        result = take_case(request.case_id);
    }
    if (result) {
        result = CmClient::open(*this, fds, cm_);
    }
    rpc::CmOpenReply reply_body{};
    if (result) {
        reply_body.channel_token = cm_->channel().token;
    } else {
        log_refusal("rdma_cm channel open", result);
    }
    reply(header, result, result ? bytes_of(reply_body) : std::vector<std::byte>{});
}

void Session::cm_attach(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::CmAttachRequest request{};
    Result result = decode(body, request);
    if (result && said_hello()) {
        result = fail(EALREADY, "this connection has already said hello");
    }
    if (result) {
        result = CmClient::attach(*this, request, cm_);
    }
    if (!result) {
        log_refusal("rdma_cm channel attach", result);
    }
    reply(header, result, result ? bytes_of(rpc::Empty{}) : std::vector<std::byte>{});
}

void Session::netlink_open(const rpc::RequestHeader& header, std::span<const std::byte> body) {
    rpc::NetlinkOpenRequest request;
    Result result = decode(body, request);
    if (result && said_hello()) {
        result = fail(EALREADY, "this connection has already said hello");
    }
    rpc::NetlinkOpenReply reply_body{};
    std::unique_ptr<NetlinkClient> client;
    if (result) {
        result = NetlinkClient::open(*this, reply_body, client);
    }
    reply(header, result, result ? bytes_of(reply_body) : std::vector<std::byte>{});
    netlink_ = std::move(client);  // after the reply: it is the last RPC message
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
