#include "protocol/runtime_dir.h"

#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace uroce {

std::filesystem::path default_runtime_dir() {
    if (const char* dir = getenv("UROCE_RUNTIME_DIR"); dir && *dir) {
        return dir;
    }
    if (geteuid() == 0) {
        return "/run/uroce";
    }
    if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg && *xdg) {
        return std::filesystem::path(xdg) / "uroce";
    }
    return "/tmp/uroce-" + std::to_string(geteuid());
}

}  // namespace uroce
