// Decodes a request body for its op, calls the verb on the client's
// Context, and encodes the reply body.
#pragma once

#include <span>
#include <vector>

#include "protocol/messages.h"
#include "util/result.h"
#include "util/unique_fd.h"
#include "verbs/context.h"  // ReplyFds

namespace uroce {

struct Answer {
    Result result;
    std::vector<std::byte> body;
    ReplyFds fds;  // sent along with the reply
};

// Runs `op` with `body`; `fds` are the descriptors that came with it.
// Ops the dispatcher does not know (Hello, Status) are the session's.
Answer dispatch(Context& context, rpc::Op op, std::span<const std::byte> body,
                std::vector<UniqueFd>& fds);
// The verb `op` runs ("create_qp"), null for an op that is not a verb.
const char* verb_name(rpc::Op op);

}  // namespace uroce
