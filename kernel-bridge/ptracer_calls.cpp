// prctl(PR_SET_PTRACER), watched. Under kernel.yama.ptrace_scope = 1 a
// process names one ptracer, and uroce's daemon, which moves the bytes of
// every transfer with process_vm_*, must be it. The program's end names the
// daemon when it opens a device (emulator/protocol/memory_access.cpp), but
// not over a ptracer the program named itself, which this file notes; and a
// program that names another ptracer after uroce named its daemon is told
// on stderr that its transfers will fail. A forked child starts with no
// ptracer (Yama does not pass it on), so it forgets both.
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emulator/protocol/bridge_abi.h"
#include "interpose.h"

namespace {

// What the program named (valid once program_named is set), and the daemon
// uroce named; 0 for none.
long program_ptracer;
bool program_named;
long daemon_ptracer;

void forget_in_child() {
    program_named = false;
    program_ptracer = 0;
    daemon_ptracer = 0;
}

__attribute__((constructor)) void watch_forks() {
    pthread_atfork(nullptr, nullptr, forget_in_child);
}

void note_program_ptracer(long pid) {
    const long daemon = __atomic_load_n(&daemon_ptracer, __ATOMIC_ACQUIRE);
    if (daemon != 0 && pid != daemon && pid != static_cast<long>(PR_SET_PTRACER_ANY)) {
        char line[300];
        const int length = snprintf(
            line, sizeof(line),
            "uroce: prctl(PR_SET_PTRACER, %ld) replaces uroced (pid %ld) as this process's "
            "ptracer under kernel.yama.ptrace_scope = 1: transfers of the uroce devices it "
            "opened will fail\n",
            pid, daemon);
        if (length > 0 && write(STDERR_FILENO, line, static_cast<size_t>(length)) < 0) {
            // Nothing more to tell anyone.
        }
        __atomic_store_n(&daemon_ptracer, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&program_ptracer, pid, __ATOMIC_RELEASE);
    __atomic_store_n(&program_named, true, __ATOMIC_RELEASE);
}

}  // namespace

EXPORT int uroce_bridge_program_ptracer(long* pid) {
    if (!__atomic_load_n(&program_named, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    *pid = __atomic_load_n(&program_ptracer, __ATOMIC_ACQUIRE);
    return 1;
}

EXPORT void uroce_bridge_named_daemon(long pid) {
    __atomic_store_n(&daemon_ptracer, pid, __ATOMIC_RELEASE);
}

// glibc's prctl takes four more arguments as unsigned longs, as here.
EXPORT int prctl(int option, ...) noexcept {
    va_list args;
    va_start(args, option);
    const unsigned long arg2 = va_arg(args, unsigned long);
    const unsigned long arg3 = va_arg(args, unsigned long);
    const unsigned long arg4 = va_arg(args, unsigned long);
    const unsigned long arg5 = va_arg(args, unsigned long);
    va_end(args);
    const int result = static_cast<int>(syscall(SYS_prctl, option, arg2, arg3, arg4, arg5));
    if (result == 0 && option == PR_SET_PTRACER) {
        note_program_ptracer(static_cast<long>(arg2));
    }
    return result;
}
