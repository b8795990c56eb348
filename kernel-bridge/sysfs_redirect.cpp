#include "sysfs_redirect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

namespace uroce::bridge {
namespace {

constexpr char kSysfs[] = "/sys";
constexpr const char* kAnswered[] = {"/sys/class/infiniband", "/sys/class/infiniband_verbs",
                                     "/sys/class/misc/rdma_cm"};

// `path` is `dir` or lies under it ("/sys/class/infiniband_mad" is neither of
// "/sys/class/infiniband").
bool within(const char* path, const char* dir) {
    const size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

}  // namespace

bool tree_path(const char*& path, char (&buf)[PATH_MAX]) {
    if (!path || strncmp(path, kSysfs, sizeof(kSysfs) - 1) != 0) {
        return true;
    }
    const char* root = getenv("SYSFS_PATH");
    if (!root || !*root) {
        return true;
    }
    for (const char* dir : kAnswered) {
        if (within(path, dir)) {
            const char* rest = path + sizeof(kSysfs) - 1;  // "/class/..."
            const size_t root_len = strlen(root);
            const size_t rest_len = strlen(rest);
            if (root_len + rest_len >= sizeof(buf)) {
                errno = ENAMETOOLONG;
                return false;
            }
            memcpy(buf, root, root_len);
            memcpy(buf + root_len, rest, rest_len + 1);
            path = buf;
            return true;
        }
    }
    return true;
}

}  // namespace uroce::bridge
