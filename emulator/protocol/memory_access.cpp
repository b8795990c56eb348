#include "protocol/memory_access.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

namespace uroce::rpc {
namespace {

// The probe's 8 bytes: random, so that a daemon reading another process
// (PID namespaces) does not find them by chance.
std::atomic<uint64_t> probe_bytes{0};

uint64_t probe_value() {
    uint64_t value = probe_bytes.load(std::memory_order_relaxed);
    while (value == 0) {
        if (getrandom(&value, sizeof(value), 0) != sizeof(value)) {
            value = static_cast<uint64_t>(getpid()) << 32 | 0x75726f63u;
        }
        uint64_t expected = 0;
        if (!probe_bytes.compare_exchange_strong(expected, value)) {
            value = expected;
        }
    }
    return value;
}

// What the program itself named with prctl(PR_SET_PTRACER), as the bridge
// saw it; false when the bridge is not loaded or it named nothing.
bool program_named_ptracer(long& pid) {
    using Query = int (*)(long*);
    auto query = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "uroce_bridge_program_ptracer"));
    return query && query(&pid) != 0 && pid != 0;
}

void tell_bridge_daemon_named(long pid) {
    using Note = void (*)(long);
    if (auto note = reinterpret_cast<Note>(dlsym(RTLD_DEFAULT, "uroce_bridge_named_daemon"))) {
        note(pid);
    }
}

}  // namespace

int yama_ptrace_scope() {
    std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
    int scope = 0;
    return in >> scope ? scope : 0;
}

MemoryProbe prepare_memory_access(int socket_fd) {
    MemoryProbe probe{};
    probe.value = probe_value();
    probe.address = reinterpret_cast<uintptr_t>(&probe_bytes);
    static_assert(sizeof(probe_bytes) == sizeof(probe.value));
    if (yama_ptrace_scope() != 1) {
        probe.ptracer = Ptracer::kNotNeeded;
        return probe;
    }
    ucred daemon{};
    socklen_t length = sizeof(daemon);
    if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &daemon, &length) != 0 || daemon.pid <= 0) {
        probe.ptracer = Ptracer::kDaemonUnseen;
        return probe;
    }
    long named = 0;
    if (program_named_ptracer(named)) {
        if (named == static_cast<long>(PR_SET_PTRACER_ANY)) {
            probe.ptracer = Ptracer::kProgramNamedAny;
            return probe;
        }
        if (named != daemon.pid) {
            probe.ptracer = Ptracer::kProgramNamedAnother;
            probe.program_ptracer = named;
            return probe;
        }
    }
    // Past the bridge's prctl, which notes only the program's own calls.
    if (syscall(SYS_prctl, PR_SET_PTRACER, static_cast<unsigned long>(daemon.pid), 0UL, 0UL, 0UL) !=
        0) {
        probe.ptracer = Ptracer::kFailed;
        probe.error = errno;
        return probe;
    }
    probe.ptracer = Ptracer::kNamedDaemon;
    tell_bridge_daemon_named(daemon.pid);
    return probe;
}

}  // namespace uroce::rpc
