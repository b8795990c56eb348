#include "util/priority.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace uroce {

std::string raise_priority(int nice) {
    std::string refused;
    if (setpriority(PRIO_PROCESS, 0, nice) != 0) {
        refused = "running at the default priority (nice " + std::to_string(nice) +
                  " needs CAP_SYS_NICE)";
    }
    if (getsid(0) != getpid()) {
        return refused;  // the session is its starter's: its weight is theirs to set
    }
    // Absent where the kernel has no autogroup; a disabled one takes the
    // value and ignores it.
    std::ofstream autogroup("/proc/self/autogroup");
    if (autogroup && !(autogroup << nice << std::flush)) {
        const int error = errno;
        refused += std::string(refused.empty() ? "" : "; ") + "the session's autogroup stays at " +
                   "nice 0 (" + strerror(error) + ")";
    }
    return refused;
}

}  // namespace uroce
