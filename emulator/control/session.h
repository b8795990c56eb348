// One client connection: a provider context bound to a device, or the
// uroce tool. Requests are served in order; when the connection ends, the
// client's Context and all its objects go with it.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cm/connection_manager.h"
#include "control/dispatcher.h"
#include "protocol/messages.h"
#include "util/rate_limit.h"
#include "util/result.h"
#include "verbs/context.h"

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

    const ucred& peer() const { return peer_; }
    bool refused() const { return !admitted_; }
    const Context* context() const { return context_.get(); }
    const std::shared_ptr<Context>& shared_context() const { return context_; }
    const cm::Channel* cm_channel() const { return cm_channel_; }
    // rdma link delete or uroce reset (`why`): a context on `device` hears
    // IBV_EVENT_DEVICE_FATAL and loses every object; its later requests
    // fail with EIO. Whether it had a context there.
    bool device_removed(const Device& device, const char* why);
    bool is_netlink() const { return netlink_port_ != 0; }
    // The client's UROCE_CASE ("" if none), and the device's counters when
    // its context opened, for the snapshot logged when it closes.
    const CaseRef& case_tag() const { return case_; }
    const DeviceStats* stats_at_open() const { return stats_at_open_.get(); }
    uint32_t netlink_port() const { return netlink_port_; }

  private:
    void wait();
    void on_readable();
    // `lost_fds`: EMFILE or ETOOMANYREFS when not all of the message's
    // descriptors arrived (the request is refused with it), else 0.
    void handle(std::span<const std::byte> message, std::vector<int>& fds, int lost_fds);
    Result check_request(std::span<const std::byte> message, int lost_fds,
                         rpc::RequestHeader& header) const;
    bool handle_session_op(const rpc::RequestHeader& header, std::span<const std::byte> body,
                           std::vector<UniqueFd>& fds);
    void handle_verb(const rpc::RequestHeader& header, std::span<const std::byte> body,
                     std::vector<UniqueFd>& fds);
    void reply(const rpc::RequestHeader& request, const Result& result,
               std::span<const std::byte> body, std::span<const int> fds = {});
    Result hello(std::span<const std::byte> body, std::vector<UniqueFd>& fds,
                 rpc::HelloReply& reply);
    Result attach(std::span<const std::byte> body);
    // rdma_cm: the connection becomes an event channel, then carries commands.
    void cm_open(const rpc::RequestHeader& header, std::span<const std::byte> body,
                 std::vector<UniqueFd>& fds);
    void cm_command(const rpc::RequestHeader& header, std::span<const std::byte> body);
    // A forked child's connection to the channel its parent opened.
    void cm_attach(const rpc::RequestHeader& header, std::span<const std::byte> body);
    // RDMA netlink: the connection becomes a netlink socket, then carries
    // netlink datagrams both ways.
    void netlink_open(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void netlink_request(std::span<const std::byte> datagram);
    void flush_netlink();
    void log_refusal(const char* what, const Result& result);
    Result take_case(const char (&field)[rpc::kCaseIdLen]);
    Answer tool_request(rpc::Op op, std::span<const std::byte> body, std::vector<UniqueFd>& fds);
    void report_page(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void check_finding(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void check_peer(const rpc::RequestHeader& header, std::span<const std::byte> body);

    Server& server_;
    boost::asio::posix::stream_descriptor socket_;
    ucred peer_;
    Result admitted_;
    bool ending_ = false;  // answered a refused connection: it ends now
    // What it holds of its client's share of the daemon's descriptors: the
    // connection, and an async event pipe or an rdma_cm channel's pipe.
    size_t descriptors_ = 0;
    // Shared with the connections of forked children that attached.
    std::shared_ptr<Context> context_;
    // A client that has every verb refused cannot fill the disk: a burst
    // of lines, then a few a second.
    RateLimit refusals_logged_{100, 10};
    // The report (kStatus, kQpSnapshot) this connection is reading page by page.
    std::string report_;
    rpc::Op report_op_ = rpc::Op::kStatus;
    bool tool_ = false;
    CaseRef case_ = no_case();  // UROCE_CASE
    std::unique_ptr<DeviceStats> stats_at_open_;
    const char* device_gone_ = nullptr;  // why its context's device went, if it did
    cm::Channel* cm_channel_ = nullptr;  // owned by the connection manager
    uint32_t netlink_port_ = 0;
    // Netlink replies the program has not taken yet. Requests wait while
    // any are here, so this holds one request's replies, which
    // netlink::answer bounds.
    std::deque<std::vector<std::byte>> netlink_out_;
};

}  // namespace uroce
