// One client connection: its framing (one request, one reply, in order),
// its admission and its replies. What the connection is for comes with its
// first request, which installs a protocol client: hello for a device or
// attach a VerbsClient (control/verbs_client.h), rdma_cm open or attach a
// CmClient, netlink open a NetlinkClient; hello without a device makes it
// the tool's. Any connection may send the tool's requests (ToolRequests).
// When the connection ends, the client's context or channel goes with it.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <span>
#include <vector>

#include "control/cm_client.h"
#include "control/netlink_client.h"
#include "control/tool_requests.h"
#include "control/verbs_client.h"
#include "protocol/messages.h"
#include "util/case_tag.h"
#include "util/rate_limit.h"
#include "util/result.h"

namespace uroce {

class Server;

class Session : public std::enable_shared_from_this<Session> {
  public:
    // `admitted`: the connection took a descriptor of its client's share;
    // when it did not, its first request is answered with why, and it ends.
    Session(Server& server, boost::asio::io_context& io, int fd, const ucred& peer,
            Result admitted);
    void start();
    void close();

    Server& server() const { return server_; }
    const ucred& peer() const { return peer_; }
    bool refused() const { return !admitted_; }
    const Context* context() const { return verbs_ ? verbs_->context().get() : nullptr; }
    const std::shared_ptr<Context>& shared_context() const;
    const cm::Channel* cm_channel() const { return cm_ ? &cm_->channel() : nullptr; }
    // rdma link delete or uroce reset (`why`): a context on `device` hears
    // IBV_EVENT_DEVICE_FATAL and loses every object; its later requests
    // fail with EIO. Whether it had a context there.
    bool device_removed(const Device& device, const char* why) {
        return verbs_ && verbs_->device_removed(device, why);
    }
    uint32_t netlink_port() const { return netlink_ ? netlink_->port() : 0; }
    // The client's UROCE_CASE ("" if none), and the device's counters when
    // its context opened, for the snapshot logged when it closes.
    const CaseRef& case_tag() const { return case_; }
    const DeviceStats* stats_at_open() const { return verbs_ ? verbs_->stats_at_open() : nullptr; }

    // For the protocol clients.
    void reply(const rpc::RequestHeader& request, const Result& result,
               std::span<const std::byte> body, std::span<const int> fds = {});
    // A refusal in the log, at most a burst and a few a second.
    void log_refusal(const char* what, const Result& result);
    void set_case(CaseRef tag) { case_ = std::move(tag); }
    // Descriptors of the client's share it took beyond the connection's
    // own (an async event pipe, an rdma_cm channel), given back at close.
    void hold_descriptors(size_t count) { descriptors_ += count; }

  private:
    void wait();
    void on_readable();
    // `lost_fds`: EMFILE or ETOOMANYREFS when not all of the message's
    // descriptors arrived (the request is refused with it), else 0.
    void handle(std::span<const std::byte> message, std::vector<int>& fds, int lost_fds);
    Result check_request(std::span<const std::byte> message, int lost_fds,
                         rpc::RequestHeader& header) const;
    // To the protocol client the request is for.
    void route(const rpc::RequestHeader& header, std::span<const std::byte> body,
               std::vector<UniqueFd>& fds);
    // The first requests, which say what the connection is for.
    void hello(const rpc::RequestHeader& header, std::span<const std::byte> body,
               std::vector<UniqueFd>& fds);
    void attach(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void cm_open(const rpc::RequestHeader& header, std::span<const std::byte> body,
                 std::vector<UniqueFd>& fds);
    void cm_attach(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void netlink_open(const rpc::RequestHeader& header, std::span<const std::byte> body);
    bool said_hello() const { return verbs_ || cm_ || netlink_ || tool_; }
    // The UROCE_CASE the first request names.
    Result take_case(const char (&field)[rpc::kCaseIdLen]);
    // Sends the netlink replies, then reads the next request.
    void flush_netlink();

    Server& server_;
    boost::asio::posix::stream_descriptor socket_;
    ucred peer_;
    Result admitted_;
    bool ending_ = false;  // answered a refused connection: it ends now
    // What it holds of its client's share of the daemon's descriptors: the
    // connection, and an async event pipe or an rdma_cm channel's pipe.
    size_t descriptors_ = 0;
    // A client that has every request refused cannot fill the disk: a
    // burst of lines, then a few a second.
    RateLimit refusals_logged_{100, 10};
    CaseRef case_ = no_case();  // UROCE_CASE
    ToolRequests tool_requests_{*this};
    bool tool_ = false;  // said hello as the tool
    std::unique_ptr<VerbsClient> verbs_;
    std::unique_ptr<CmClient> cm_;
    std::unique_ptr<NetlinkClient> netlink_;
};

}  // namespace uroce
