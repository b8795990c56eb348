// Message framing over a SOCK_SEQPACKET Unix socket: one message per
// sendmsg/recvmsg, with up to rpc::kMaxFds descriptors as SCM_RIGHTS.
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include <span>
#include <vector>

namespace uroce::rpc {

// Sends one message; returns 0 or an errno.
int send_message(int sock, std::span<const std::byte> data, std::span<const int> fds = {});

// Receives one message into `buffer` (resized to what arrived) and appends
// received descriptors to `fds`. Returns 0, an errno, or ECONNRESET at end
// of stream; an empty message is 0 with an empty buffer. A message larger
// than kMaxMessage is reported as EMSGSIZE. A whole message whose
// descriptors did not all arrive is in `buffer` with ETOOMANYREFS (more than
// kMaxFds) or EMFILE (no descriptor left here to receive them in).
int receive_message(int sock, std::vector<std::byte>& buffer, std::vector<int>& fds);

}  // namespace uroce::rpc
