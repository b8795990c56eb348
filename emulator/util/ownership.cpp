#include "util/ownership.h"

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/log.h"

namespace uroce {
namespace ownership {

thread_local int32_t thread_engine = -1;

namespace {

// A sanitizer build checks ownership as --paranoid does.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Set once, before the control plane runs; control turns run on one thread.
Pauser* pauser = nullptr;
bool paranoid = false;
thread_local int turn_depth = 0;
thread_local uint64_t held = 0;        // engines this thread's turn paused
thread_local uint64_t for_daemon = 0;  // of those, the ones claim_all took

uint64_t bit(uint32_t engine) {
    return uint64_t{1} << engine;
}

void hold(uint32_t engine) {
    if (!(held & bit(engine))) {
        pauser->pause(engine);
        held |= bit(engine);
    }
}

}  // namespace

void set_pauser(Pauser* p) {
    pauser = p;
}

void set_paranoid(bool on) {
    paranoid = on || kSanitized;
}

void set_thread_engine(uint32_t engine) {
    thread_engine = static_cast<int32_t>(engine);
}

bool in_control_turn() {
    return turn_depth > 0;
}

void touch_other(uint32_t engine) {
    if (turn_depth > 0) {
        // Engine 0's devices are this thread's own.
        if (engine != 0 && pauser) {
            hold(engine);
        }
        return;
    }
    if (paranoid && pauser) [[unlikely]] {
        char who[32] = "a thread of no engine";
        if (thread_engine >= 0) {
            snprintf(who, sizeof(who), "engine %d's thread", thread_engine);
        }
        log_warn(
            "paranoid: a device of engine %u was touched from %s outside a control turn. This is "
            "a bug of uroced; aborting",
            engine, who);
        void* frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32),
                             STDERR_FILENO);  // where, for the report
        abort();
    }
}

void claim_all() {
    if (turn_depth == 0 || !pauser) {
        return;
    }
    for (uint32_t engine = 1; engine < pauser->engines(); ++engine) {
        hold(engine);
        for_daemon |= bit(engine);
    }
}

}  // namespace ownership

ControlTurn::ControlTurn() {
    ++ownership::turn_depth;
}

ControlTurn::~ControlTurn() {
    using namespace ownership;
    if (--turn_depth > 0 || !held) {
        return;
    }
    for (uint32_t engine = 1; engine < 64; ++engine) {
        if (held & bit(engine)) {
            pauser->resume(engine, for_daemon & bit(engine));
        }
    }
    held = 0;
    for_daemon = 0;
}

}  // namespace uroce
