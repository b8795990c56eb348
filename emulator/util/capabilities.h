// What a client process may do beyond an ordinary user, as the kernel's
// verbs ask capable() for it: read from /proc, since the daemon is not the
// process that calls the verb.
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <optional>

namespace uroce {

// Whether capability `cap` (CAP_NET_RAW, ...) is in the effective set of
// process `pid`; false when that cannot be read.
bool has_capability(pid_t pid, int cap);

// A number in /proc/PID/status ("CapPrm" and the others in hexadecimal,
// "Seccomp" in decimal); none when it cannot be read.
std::optional<uint64_t> status_field(pid_t pid, const char* name);

}  // namespace uroce
