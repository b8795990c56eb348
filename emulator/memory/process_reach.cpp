#include "memory/process_reach.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <string>

#include "util/capabilities.h"

namespace uroce {
namespace {

std::string printed(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printed(const char* format, ...) {
    char text[400];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    return text;
}

// Eight bytes of process `pid` at `address`: 0 or the errno. Not through
// read_process, which logs refused transfers: a refusal here is the
// answer sought, and the hello's refusal says it.
int read_eight(pid_t pid, uint64_t address, uint64_t& value) {
    iovec here{&value, sizeof(value)};
    iovec there{reinterpret_cast<void*>(address), sizeof(value)};
    const ssize_t n = process_vm_readv(pid, &here, 1, &there, 1, 0);
    return n == sizeof(value) ? 0 : n < 0 ? errno : EFAULT;
}

bool daemon_may_ptrace_anyone() {
    return has_capability(getpid(), CAP_SYS_PTRACE);
}

// Why the daemon may not call process_vm_readv at all, or "": it cannot
// read even itself.
std::string call_refused() {
    uint64_t own = 0;
    const uint64_t mine = 1;
    const int error = read_eight(getpid(), reinterpret_cast<uintptr_t>(&mine), own);
    if (error == 0) {
        return "";
    }
    const auto seccomp = status_field(getpid(), "Seccomp");
    const char* by = seccomp && *seccomp == 2 ? "a seccomp filter on uroced (a container "
                                                "profile?) refuses it"
                     : error == ENOSYS        ? "this kernel lacks it (gVisor?)"
                                              : "it is refused";
    return printed(
        "uroced may not call process_vm_readv (%s: %s), which it moves every "
        "message's bytes with. Fix: run uroced where process_vm_readv and "
        "process_vm_writev are allowed (the default profiles of Docker, Podman and "
        "containerd allow them)",
        strerror(error), by);
}

// The rule of Yama's mode 1 that kept the daemon out, from what the
// program's end did about it.
std::string yama_relational(const rpc::MemoryProbe& probe) {
    const char* scope =
        "kernel.yama.ptrace_scope is 1: uroced may reach only programs that name "
        "it their ptracer";
    switch (probe.ptracer) {
        case rpc::Ptracer::kProgramNamedAnother:
            return printed(
                "%s, and this program named pid %lld (prctl PR_SET_PTRACER), so uroce "
                "left it alone. Fix: do not name a ptracer before opening the device "
                "(uroce names its daemon), or name PR_SET_PTRACER_ANY",
                scope, static_cast<long long>(probe.program_ptracer));
        case rpc::Ptracer::kDaemonUnseen:
            return printed(
                "%s, and uroced is not in the program's PID namespace, so the program "
                "cannot name it. Fix: run both in one PID namespace (Kubernetes: "
                "shareProcessNamespace: true; podman, docker: --pid container:NAME)",
                scope);
        case rpc::Ptracer::kNotNeeded:
            return printed(
                "%s, and the program did not name it: where it runs, "
                "/proc/sys/kernel/yama/ptrace_scope does not read 1. Fix: run it where /proc "
                "is the machine's, or name uroced (prctl PR_SET_PTRACER) before opening the device",
                scope);
        case rpc::Ptracer::kFailed:
            return printed("%s, and prctl(PR_SET_PTRACER) failed in the program: %s", scope,
                           strerror(probe.error));
        default:
            return printed("%s; the program named it, and it is still kept out (another LSM?)",
                           scope);
    }
}

// Why the kernel keeps the daemon out of process `pid`, as far as can be
// told from here, and what to do about it.
std::string ptrace_rule(pid_t pid, uid_t uid, const rpc::MemoryProbe& probe, int error) {
    const bool privileged = daemon_may_ptrace_anyone();
    if (uid != geteuid() && !privileged) {
        return printed(
            "the program runs as uid %u and uroced as uid %u without CAP_SYS_PTRACE: "
            "a process may reach only its own user's memory. Fix: open the devices of "
            "a daemon the program's user started (uroce start as uid %u)",
            uid, geteuid(), uid);
    }
    // The files of an undumpable process belong to root (its directory
    // may still show the owner it had).
    struct stat proc {};
    const std::string proc_path = "/proc/" + std::to_string(pid) + "/status";
    if (!privileged && uid != 0 && stat(proc_path.c_str(), &proc) == 0 && proc.st_uid == 0) {
        return "the program is not dumpable (prctl PR_SET_DUMPABLE 0, a change of user, or a "
               "set-user-ID program), so no other process may reach its memory. Fix: keep it "
               "dumpable (prctl(PR_SET_DUMPABLE, 1)) before opening the device";
    }
    const auto theirs = status_field(pid, "CapPrm");
    const auto ours = status_field(getpid(), "CapPrm");
    if (!privileged && theirs && ours && (*theirs & ~*ours) != 0) {
        return printed(
            "the program holds capabilities uroced lacks (CapPrm %llx, uroced's %llx), "
            "and a process may reach only programs whose capabilities it has. Fix: "
            "start uroced with them, or drop them from the program",
            static_cast<unsigned long long>(*theirs), static_cast<unsigned long long>(*ours));
    }
    switch (rpc::yama_ptrace_scope()) {
        case 1:
            return yama_relational(probe);
        case 2:
            return "kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may reach "
                   "another's memory, and uroced has not got it. Fix: sysctl "
                   "kernel.yama.ptrace_scope=1 (uroce then names its daemon in each program), or "
                   "give uroced CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep on uroced)";
        case 3:
            return "kernel.yama.ptrace_scope is 3: no process may reach another's memory until "
                   "the machine restarts, so uroce cannot move data on this machine";
        default:
            return printed("process_vm_readv: %s", strerror(error));
    }
}

}  // namespace

Result check_reach(pid_t pid, uid_t uid, const rpc::MemoryProbe& probe) {
    if (pid <= 0) {
        return {EACCES,
                "the program is in a PID namespace uroced cannot see, so uroced cannot reach its "
                "memory. Fix: run the program in the daemon's PID namespace or one inside it "
                "(Kubernetes: shareProcessNamespace: true; podman, docker: --pid container:NAME)"};
    }
    uint64_t found = 0;
    const int error = read_eight(pid, probe.address, found);
    if (error == 0) {
        return found == probe.value
                   ? ok()
                   : fail(EACCES,
                          "uroced read pid %d, but not the bytes the program put there: the "
                          "program is not the process its socket names (PID namespaces?)",
                          pid);
    }
    if (error == EFAULT) {
        return fail(EFAULT, "the program's memory probe at 0x%llx is not mapped",
                    static_cast<unsigned long long>(probe.address));
    }
    if (std::string refused = call_refused(); !refused.empty()) {
        return {EPERM, "uroced cannot reach the program's memory: " + refused};
    }
    return {EACCES,
            "uroced cannot reach the program's memory: " + ptrace_rule(pid, uid, probe, error)};
}

}  // namespace uroce
