// A connection that became an RDMA netlink socket (the bridge's, for
// libibverbs' enumeration and the `rdma` tool): its port id, and the
// replies to its requests (netlink/nldev.cpp) until the socket takes them.
// Session installs one on netlink open.
#pragma once

#include <stdint.h>

#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "protocol/messages.h"
#include "util/result.h"

namespace uroce {

class Session;

class NetlinkClient {
  public:
    // netlink open: a port id of the connection's own, in `reply`.
    static Result open(Session& session, rpc::NetlinkOpenReply& reply,
                       std::unique_ptr<NetlinkClient>& out);

    NetlinkClient(Session& session, uint32_t port) : session_(session), port_(port) {}
    uint32_t port() const { return port_; }
    // A datagram of requests: its replies queue behind those not yet sent.
    void answer(std::span<const std::byte> datagram);
    enum class Sent { kAll, kSocketFull, kFailed };
    // Sends queued replies on `fd` until they are out, the socket is full,
    // or it fails (logged).
    Sent send_replies(int fd);

  private:
    Session& session_;
    uint32_t port_;
    // Replies the program has not taken yet. Requests wait while any are
    // here, so this holds one request's replies, which netlink::answer bounds.
    std::deque<std::vector<std::byte>> out_;
};

}  // namespace uroce
