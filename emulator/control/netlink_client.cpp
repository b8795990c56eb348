#include "control/netlink_client.h"

#include <string.h>

#include "control/server.h"
#include "control/session.h"
#include "netlink/nldev.h"
#include "protocol/socket.h"
#include "util/log.h"

namespace uroce {

Result NetlinkClient::open(Session& session, rpc::NetlinkOpenReply& reply,
                           std::unique_ptr<NetlinkClient>& out) {
    reply.port_id = session.server().netlink_port(session.peer().pid);
    out = std::make_unique<NetlinkClient>(session, reply.port_id);
    return ok();
}

void NetlinkClient::answer(std::span<const std::byte> datagram) {
    for (netlink::Bytes& message :
         netlink::answer(session_.server().nldev_view(), datagram, port_)) {
        out_.push_back(std::move(message));
    }
}

NetlinkClient::Sent NetlinkClient::send_replies(int fd) {
    while (!out_.empty()) {
        const int error = rpc::send_message(fd, out_.front());
        if (error == EAGAIN) {
            return Sent::kSocketFull;
        }
        if (error) {
            if (error != EPIPE && error != ECONNRESET) {
                log_warn("client pid %d: netlink reply failed: %s", session_.peer().pid,
                         strerror(error));
            }
            return Sent::kFailed;
        }
        out_.pop_front();
    }
    return Sent::kAll;
}

}  // namespace uroce
