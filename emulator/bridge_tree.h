// What the kernel bridge publishes about the daemon's devices.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "device/device.h"
#include "sysfs_tree.h"

namespace uroce {

std::vector<bridge::TreeDevice> bridge_tree(const std::vector<std::unique_ptr<Device>>& devices,
                                            const std::filesystem::path& socket_path);

}  // namespace uroce
