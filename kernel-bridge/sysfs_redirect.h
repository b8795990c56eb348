// Which paths of the kernel's sysfs a uroce environment answers from its own
// tree, so that every program that reads them directly (UCX, hwloc, scripts)
// sees what libibverbs sees through SYSFS_PATH.
#pragma once

#include <limits.h>

namespace uroce::bridge {

// Points `path` at <SYSFS_PATH>/class/..., written to `buf`, when SYSFS_PATH
// is set and `path` is /sys/class/infiniband, /sys/class/infiniband_verbs or
// /sys/class/misc/rdma_cm, or lies under them; leaves it alone otherwise
// (relative paths too). Returns false with errno ENAMETOOLONG when the result
// does not fit.
bool tree_path(const char*& path, char (&buf)[PATH_MAX]);

}  // namespace uroce::bridge
