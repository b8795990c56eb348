// Where a user's uroced keeps its socket, pid file, log and sysfs tree.
#pragma once

#include <filesystem>

namespace uroce {

// $UROCE_RUNTIME_DIR if set; otherwise /run/uroce for root,
// $XDG_RUNTIME_DIR/uroce when set, else /tmp/uroce-<uid>.
std::filesystem::path default_runtime_dir();

struct RuntimePaths {
    std::filesystem::path dir;
    std::filesystem::path socket() const { return dir / "uroced.sock"; }
    std::filesystem::path pid_file() const { return dir / "uroced.pid"; }
    std::filesystem::path log_file() const { return dir / "uroced.log"; }
    std::filesystem::path sysfs() const { return dir / "sysfs"; }
};

}  // namespace uroce
