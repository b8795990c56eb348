#include "device/tree_entries.h"

namespace uroce {

std::vector<bridge::TreeDevice> tree_entries(const std::vector<std::unique_ptr<Device>>& devices,
                                             const std::filesystem::path& socket_path) {
    std::vector<bridge::TreeDevice> tree;
    for (const auto& device : devices) {
        bridge::TreePort port;
        port.attr = device->port_attr();
        for (const GidTable::Shown& shown : device->shown_gids()) {
            port.gids.push_back({shown.gid, shown.type});
        }
        port.gids.resize(static_cast<size_t>(port.attr.gid_tbl_len));  // empty slots: zero GIDs
        port.netdev = device->config().netdev;
        bridge::TreeDevice entry;
        entry.ibdev = device->name();
        entry.uverbs = device->uverbs_name();
        entry.node_guid = device->node_guid();
        entry.sys_image_guid = device->node_guid();
        entry.node_desc = device->name() + " uroce emulated RoCE device";
        entry.fw_ver = device->attr().orig_attr.fw_ver;
        entry.hca_type = "uroce";
        entry.board_id = "uroce";
        entry.ports = {port};
        entry.socket_path = socket_path;
        tree.push_back(std::move(entry));
    }
    return tree;
}

}  // namespace uroce
