// The bridge's RDMA netlink sockets (rdma_netlink_socket.cpp): what the
// socket and close interposers ask of them.
#pragma once

namespace uroce::bridge {

// In a uroce environment, socket(AF_NETLINK, type, NETLINK_RDMA) is a
// connection to the daemon's RDMA netlink: returns true with *fd the socket,
// or -1 with errno set. Returns false for every other socket.
bool open_rdma_netlink(int domain, int type, int protocol, int* fd);

// After close(fd): it is no longer one of these sockets.
void forget_rdma_netlink(int fd);

}  // namespace uroce::bridge
