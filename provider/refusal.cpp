// The sentences of the provider's refusals, and their rate-limited log.
#include "refusal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "provider.h"

namespace uroce {
namespace {

thread_local char last_refusal[200];

}  // namespace

int refused(int error, const char* format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_refusal, sizeof(last_refusal), format, args);
    va_end(args);
    return error;
}

int log_refusal(ibv_context* context, const char* verb, int error) {
    RefusalLog& log = to_context(context)->refusals;
    std::lock_guard lock(log.lock);
    if (!log.limit.allow(RateLimit::Clock::now())) {
        return error;
    }
    verbs_context* ibv = &to_context(context)->ibv;
    if (const uint64_t held_back = log.limit.suppressed()) {
        __verbs_log(ibv, VERBS_LOG_ERR, "uroce: %llu refusals not logged (at most 1 a second)\n",
                    static_cast<unsigned long long>(held_back));
    }
    __verbs_log(ibv, VERBS_LOG_ERR, "uroce: %s: %s: %s\n", verb, strerror(error), last_refusal);
    return error;
}

int refuse_null(ibv_context* context, const char* verb, const char* argument) {
    errno = log_refusal(context, verb, refused(EINVAL, "%s is NULL", argument));
    check_null(context, verb, argument);
    return EINVAL;
}

void check_null(ibv_context* context, const char* verb, const char* argument) {
    if (check::CheckState* check = to_context(context)->check) {
        check->null_argument(verb, argument);
    }
}

}  // namespace uroce
