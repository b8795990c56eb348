// Whether the daemon can reach a program's memory, asked once when the
// program opens a device or attaches after fork (protocol/memory_access.h),
// so that a program the kernel's ptrace rules keep out is refused then,
// with the cause and its fix, and never fails transfer by transfer with a
// protection error and no reason.
#pragma once

#include <sys/types.h>

#include "protocol/memory_access.h"
#include "util/result.h"

namespace uroce {

// Reads the probe's 8 bytes in process `pid` (of user `uid`). On failure:
// EACCES where a ptrace rule (Yama, another user, a program that is not
// dumpable or holds capabilities the daemon lacks, a PID namespace) keeps
// the daemon out, EPERM where the daemon may not call process_vm_readv at
// all (seccomp, gVisor); the message names the cause and what to do.
Result check_reach(pid_t pid, uid_t uid, const rpc::MemoryProbe& probe);

}  // namespace uroce
