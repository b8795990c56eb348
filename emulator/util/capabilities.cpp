#include "util/capabilities.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <string>

namespace uroce {

std::optional<uint64_t> status_field(pid_t pid, const char* name) {
    const std::string path = "/proc/" + std::to_string(pid) + "/status";
    FILE* status = fopen(path.c_str(), "re");
    if (!status) {
        return std::nullopt;
    }
    const size_t length = strlen(name);
    const bool hex = strncmp(name, "Cap", 3) == 0;
    std::optional<uint64_t> value;
    char line[256];
    while (!value && fgets(line, sizeof(line), status)) {
        uint64_t number = 0;
        if (strncmp(line, name, length) == 0 && line[length] == ':' &&
            sscanf(line + length + 1, hex ? " %" SCNx64 : " %" SCNu64, &number) == 1) {
            value = number;
        }
    }
    fclose(status);
    return value;
}

bool has_capability(pid_t pid, int cap) {
    const std::optional<uint64_t> effective = status_field(pid, "CapEff");
    return effective && cap >= 0 && cap < 64 && (*effective >> cap) & 1;
}

}  // namespace uroce
