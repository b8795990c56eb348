// Completions and events as the application receives them.
#pragma once

#include <infiniband/verbs.h>

#include "verbs/objects.h"

namespace uroce::transport {

// Puts `wc` on the CQ and, when the CQ is armed for it, signals its
// completion channel (solicited-only arming lets through solicited and
// error completions). A full CQ drops the completion and reports
// IBV_EVENT_CQ_ERR once.
void post_completion(Cq& cq, const ibv_wc& wc, bool solicited);

}  // namespace uroce::transport
