// How the bridge reaches uroced: the daemon's socket, named in the uroce
// tree at SYSFS_PATH, and one request and reply on a connection to it.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "emulator/protocol/messages.h"

namespace uroce::bridge {

// The daemon's socket, when this is a uroce environment (SYSFS_PATH names a
// tree with class/misc/rdma_cm/uroce_socket).
bool daemon_address(sockaddr_un* addr);

// One request and its reply on a connection to the daemon, with `pass_fd`
// (when not -1) as SCM_RIGHTS. Returns 0 with *got the reply body's size, the
// daemon's errno, or ENODEV when the connection fails or the reply is not the
// request's. Descriptors in a reply are not received (none is expected).
int exchange(int sock, uint32_t seq, rpc::Op op, const void* body, size_t size, int pass_fd,
             void* reply, size_t reply_size, size_t* got);

}  // namespace uroce::bridge
