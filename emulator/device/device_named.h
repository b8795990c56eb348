// The device of a list that is named `name`, or null: what the tool's,
// the console's and rdma link's requests name devices by.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace uroce {

inline Device* device_named(const std::vector<std::unique_ptr<Device>>& devices,
                            const std::string& name) {
    for (const auto& device : devices) {
        if (device->name() == name) {
            return device.get();
        }
    }
    return nullptr;
}

}  // namespace uroce
