// The daemon moves bytes in and out of a program with process_vm_readv and
// process_vm_writev, which the kernel allows only where ptrace would be
// allowed: the same user (or CAP_SYS_PTRACE), a dumpable program, and
// Yama's rule (kernel.yama.ptrace_scope: 1 lets a process read only its
// descendants and those that named it with prctl(PR_SET_PTRACER); 2 only
// with CAP_SYS_PTRACE; 3 never). So a program's end, when it opens a device
// or attaches after fork, names the daemon its ptracer where Yama's rule 1
// needs it, and sends a probe: an address and the 8 bytes there. The
// daemon reads them before it says yes (memory/process_reach.h), so a
// program it cannot reach learns why at ibv_open_device, not from a
// protection error on its first transfer.
#pragma once

#include <stdint.h>

namespace uroce::rpc {

// What the program's end did about Yama before the probe.
enum class Ptracer : int32_t {
    kNotNeeded = 0,        // kernel.yama.ptrace_scope is not 1 (or there is no Yama)
    kNamedDaemon,          // prctl(PR_SET_PTRACER, the daemon's pid) succeeded
    kProgramNamedAny,      // the program itself allowed any process
    kProgramNamedAnother,  // the program named another process: left as it is
    kDaemonUnseen,         // the daemon's pid is not in the program's PID namespace
    kFailed,               // prctl failed (`error`)
};

struct MemoryProbe {
    uint64_t address;  // in the program: 8 bytes holding `value`
    uint64_t value;
    Ptracer ptracer;
    int32_t error;            // of a failed prctl
    int64_t program_ptracer;  // the pid the program named, for kProgramNamedAnother
};

// kernel.yama.ptrace_scope, or 0 where the kernel has no Yama.
int yama_ptrace_scope();

// Before a program's hello or attach on `socket_fd` (a connection to the
// daemon): names the daemon as this process's ptracer when Yama's rule 1
// asks for it and the program named no other, and fills the probe.
MemoryProbe prepare_memory_access(int socket_fd);

}  // namespace uroce::rpc
