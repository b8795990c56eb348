// The daemon's devices as the kernel bridge's sysfs tree describes them
// (kernel-bridge/sysfs_tree.h writes the files).
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "device/device.h"
#include "sysfs_tree.h"

namespace uroce {

std::vector<bridge::TreeDevice> tree_entries(const std::vector<std::unique_ptr<Device>>& devices,
                                             const std::filesystem::path& socket_path);

}  // namespace uroce
