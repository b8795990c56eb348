// RDMA netlink's device interface (RDMA_NL_NLDEV), answered as the kernel's
// drivers/infiniband/core/nldev.c answers it: devices, ports, resources,
// counters, the system settings and the character devices, for the `rdma`
// tool and libibverbs' and librdmacm's enumeration.
#pragma once

#include <sys/socket.h>

#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "netlink/message.h"
#include "util/result.h"

namespace uroce {
class Context;
class Device;
namespace cm {
class ConnectionManager;
}

namespace netlink {

// What the answers report on.
struct NldevView {
    std::vector<const Device*> devices;
    std::vector<std::pair<pid_t, const Context*>> contexts;  // every client's, with its pid
    const cm::ConnectionManager* cm = nullptr;
    // `rdma link add NAME type uroce netdev IFACE`: a new device.
    std::function<Result(const std::string& name, const std::string& netdev)> add_link;
    // `rdma link delete NAME`.
    std::function<Result(const Device& device)> delete_link;
    // Runs the device's data plane over what its clients posted, so that
    // a QP's PSNs and state are as of the request.
    std::function<void(const Device& device)> take_posted_work;
};

// The replies to one datagram of requests, each reply one datagram: a
// doit's answer and then its ACK when NLM_F_ACK asks for one, or a dump's
// messages and NLMSG_DONE; an error is NLMSG_ERROR. Each is at most
// kMaxDatagram bytes, what `rdma` reads at once.
inline constexpr size_t kMaxDatagram = 4096;
std::vector<Bytes> answer(const NldevView& view, std::span<const std::byte> datagram,
                          uint32_t port);

}  // namespace netlink
}  // namespace uroce
