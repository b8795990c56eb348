// The kernel's rdma_cm command ABI (<rdma/rdma_user_cm.h>, ucma.c): decodes
// one write(2) of librdmacm, checks it as ucma does and calls the connection
// manager; what the kernel would copy to the caller goes into the reply.
#pragma once

#include "cm/connection_manager.h"
#include "protocol/messages.h"
#include "util/result.h"

namespace uroce::cm {

Result execute_ucma(ConnectionManager& cm, Channel& channel, const rpc::CmCommandRequest& request,
                    rpc::CmCommandReply& reply);

}  // namespace uroce::cm
