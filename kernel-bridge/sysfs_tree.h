// The sysfs-style tree libibverbs reads when SYSFS_PATH=<root> is set, and the
// /dev/infiniband nodes it opens: what a kernel would give it for a device.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <filesystem>
#include <string>
#include <vector>

namespace uroce::bridge {

struct TreeGid {
    ibv_gid gid{};  // all zero: an empty slot (no gid_attrs entries are written for it)
    ibv_gid_type type = IBV_GID_TYPE_ROCE_V2;
};

struct TreePort {
    // The same attributes query_port answers with: state, phys_state, rate
    // (active_width, active_speed), lid, sm_lid, lmc, sm_sl, port_cap_flags
    // and link_layer files are derived from them as the kernel does.
    ibv_port_attr attr{};
    std::vector<TreeGid> gids;  // index order; the table is gids.size() long
    std::string netdev = "lo";  // a real interface, for gid_attrs/ndevs
    std::vector<uint16_t> pkeys = {0xffff};
};

struct TreeDevice {
    std::string ibdev;  // "uroce0": class/infiniband/<ibdev>
    // "uverbs-uroce0": class/infiniband_verbs/<uverbs> and /dev/infiniband/<uverbs>;
    // liburoce-bridge.so answers only names that start with "uverbs-uroce".
    std::string uverbs;
    uint64_t node_guid = 0;       // host order
    uint64_t sys_image_guid = 0;  // host order
    // The following four files are written only when not empty.
    std::string node_desc;
    std::string fw_ver;
    std::string hca_type;
    std::string board_id;
    std::vector<TreePort> ports;        // ports 1..n
    std::filesystem::path socket_path;  // how the provider finds its daemon
};

// Makes <root> describe exactly `devices`: writes class/infiniband_verbs/
// abi_version and every file libibverbs and ibv_devinfo read per device, and
// removes devices no longer listed. Each device directory is built under a
// dot-name (libibverbs skips those) and renamed into place, so a concurrent
// reader sees a device whole or not at all. One writer per root at a time.
// With a cm_socket_path, also the rdma_cm misc device librdmacm looks for:
// class/misc/rdma_cm/abi_version, and its uroce_socket, where
// liburoce-bridge.so finds the daemon that answers /dev/infiniband/rdma_cm.
// Throws std::system_error.
void write_tree(const std::filesystem::path& root, const std::vector<TreeDevice>& devices,
                const std::filesystem::path& cm_socket_path = {});

// A cpulist ("0-3,8") as the kernel's "%*pb" bitmap of `bits` CPUs (local_cpus).
std::string cpu_mask(const std::string& cpulist, unsigned bits);

// Removes <root> and everything under it; rdma_cm and the devices disappear first.
void remove_tree(const std::filesystem::path& root);

// Creates <dev_dir>/<uverbs> as a symlink to /dev/null for every device (the
// tree's 'dev' files say the same major:minor) that has none yet, adding the
// paths it made to `made`: a symlink another daemon made (for a device of
// the same name) is left to it. Returns false, leaving nothing of this
// call behind, when that is not permitted or another file holds such a
// name.
bool create_device_nodes(const std::vector<TreeDevice>& devices,
                         std::vector<std::filesystem::path>& made,
                         const std::filesystem::path& dev_dir = "/dev/infiniband");
// Removes `nodes` (what create_device_nodes made) that are still symlinks
// to /dev/null, and their directory if it is then empty.
void remove_device_nodes(const std::vector<std::filesystem::path>& nodes);

}  // namespace uroce::bridge
