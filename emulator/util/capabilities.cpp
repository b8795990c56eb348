#include "util/capabilities.h"

#include <inttypes.h>
#include <stdio.h>

#include <string>

namespace uroce {

bool has_capability(pid_t pid, int cap) {
    const std::string path = "/proc/" + std::to_string(pid) + "/status";
    FILE* status = fopen(path.c_str(), "re");
    if (!status) {
        return false;
    }
    char line[256];
    uint64_t effective = 0;
    bool found = false;
    while (!found && fgets(line, sizeof(line), status)) {
        found = sscanf(line, "CapEff: %" SCNx64, &effective) == 1;
    }
    fclose(status);
    return found && cap >= 0 && cap < 64 && (effective >> cap) & 1;
}

}  // namespace uroce
