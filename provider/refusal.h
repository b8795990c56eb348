// The provider's own refusals of a post (ibv_post_send, ibv_post_recv,
// ibv_post_srq_recv, ibv_post_wq_recv, ibv_wr_complete): the errno alone
// does not say which argument broke which limit, so each refusal writes a
// sentence, and the verb logs it through libibverbs' log
// (VERBS_LOG_LEVEL=1), rate-limited: a program that spins on a full queue
// must not flood its log.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>

#include "util/rate_limit.h"

namespace uroce {

// Returns `error` and keeps the sentence (printf's `format`) as this
// thread's last refusal, from where a check decides to where the verb logs.
int refused(int error, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Per context: a burst of 32 lines (a program that breaks every rule once
// sees each), then one a second, with the count of those not written.
struct RefusalLog {
    std::mutex lock;
    RateLimit limit{32, 1};
};

// Logs `verb`'s refusal with this thread's last sentence. Returns `error`.
int log_refusal(ibv_context* context, const char* verb, int error);

// A NULL `argument` that `verb` reads: EINVAL (also in errno), logged and
// reported in check mode (null-argument), where following it would crash
// the program inside the provider.
int refuse_null(ibv_context* context, const char* verb, const char* argument);

// Check mode's report of a NULL `argument` that `verb` reads, when the
// context checks.
void check_null(ibv_context* context, const char* verb, const char* argument);

}  // namespace uroce
