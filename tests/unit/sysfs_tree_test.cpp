#include "sysfs_tree.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using uroce::bridge::TreeDevice;
using uroce::bridge::TreePort;

class TempDir {
  public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "uroce-sysfs-XXXXXX").string();
        path_ = mkdtemp(tmpl.data());
    }
    ~TempDir() { fs::remove_all(path_); }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

std::string read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

ibv_gid v4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    ibv_gid gid{};
    gid.raw[10] = gid.raw[11] = 0xff;
    gid.raw[12] = a, gid.raw[13] = b, gid.raw[14] = c, gid.raw[15] = d;
    return gid;
}

TreeDevice device(const std::string& name, uint64_t guid) {
    TreeDevice dev;
    dev.ibdev = name;
    dev.uverbs = "uverbs-" + name;
    dev.node_guid = guid;
    dev.sys_image_guid = guid + 1;
    dev.node_desc = name;
    dev.fw_ver = "0.1.0";
    dev.board_id = "UROCE-1";
    dev.socket_path = "/run/uroce/uroced.sock";
    TreePort port;
    port.attr.state = IBV_PORT_ACTIVE;
    port.attr.phys_state = 5;
    port.attr.active_width = 2;  // 4X
    port.attr.active_speed = 4;  // QDR
    port.attr.port_cap_flags = 0x00010000;
    port.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
    port.gids = {{v4_gid(127, 0, 0, 1), IBV_GID_TYPE_ROCE_V2}, {}};
    dev.ports = {port};
    return dev;
}

std::string null_numbers() {
    struct stat st;
    EXPECT_EQ(stat("/dev/null", &st), 0);
    return std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) + "\n";
}

TEST(sysfsTree, WritesWhatLibibverbsReads) {
    TempDir tmp;
    uroce::bridge::write_tree(tmp.path(), {device("uroce0", 0x0011223344556677)});
    const fs::path verbs = tmp.path() / "class/infiniband_verbs";
    const fs::path ib = tmp.path() / "class/infiniband/uroce0";
    const fs::path port = ib / "ports/1";

    EXPECT_EQ(read(verbs / "abi_version"), "6\n");
    EXPECT_EQ(read(verbs / "uverbs-uroce0/ibdev"), "uroce0\n");
    EXPECT_EQ(read(verbs / "uverbs-uroce0/dev"), null_numbers());
    EXPECT_EQ(read(verbs / "uverbs-uroce0/abi_version"), "1\n");

    EXPECT_EQ(read(ib / "node_type"), "1: CA\n");
    EXPECT_EQ(read(ib / "node_guid"), "0011:2233:4455:6677\n");
    EXPECT_EQ(read(ib / "sys_image_guid"), "0011:2233:4455:6678\n");
    EXPECT_EQ(read(ib / "node_desc"), "uroce0\n");
    EXPECT_EQ(read(ib / "fw_ver"), "0.1.0\n");
    EXPECT_EQ(read(ib / "board_id"), "UROCE-1\n");
    EXPECT_FALSE(fs::exists(ib / "hca_type"));  // empty strings are left out
    EXPECT_EQ(read(ib / "uroce_socket"), "/run/uroce/uroced.sock\n");

    EXPECT_EQ(read(port / "state"), "4: ACTIVE\n");
    EXPECT_EQ(read(port / "phys_state"), "5: LinkUp\n");
    EXPECT_EQ(read(port / "rate"), "40 Gb/sec (4X QDR)\n");
    EXPECT_EQ(read(port / "lid"), "0x0\n");
    EXPECT_EQ(read(port / "sm_lid"), "0x0\n");
    EXPECT_EQ(read(port / "lid_mask_count"), "0\n");
    EXPECT_EQ(read(port / "sm_sl"), "0\n");
    EXPECT_EQ(read(port / "cap_mask"), "0x00010000\n");
    EXPECT_EQ(read(port / "link_layer"), "Ethernet\n");
    EXPECT_EQ(read(port / "gids/0"), "0000:0000:0000:0000:0000:ffff:7f00:0001\n");
    EXPECT_EQ(read(port / "gid_attrs/types/0"), "RoCE v2\n");
    EXPECT_EQ(read(port / "gid_attrs/ndevs/0"), "lo\n");
    EXPECT_EQ(read(port / "gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
    EXPECT_EQ(read(port / "gid_attrs/types/1"),
              "IB/RoCE v1\n");  // as libibverbs reads an empty slot
    EXPECT_FALSE(fs::exists(port / "gid_attrs/ndevs/1"));
    EXPECT_EQ(read(port / "pkeys/0"), "0xffff\n");
    EXPECT_FALSE(fs::exists(port / "pkeys/1"));
    // The parent device: its netdev, where tools look for the device's IP
    // address, is a link to the interface's directory; it is on no NUMA node
    // and local to every online CPU.
    EXPECT_EQ(fs::read_symlink(ib / "device/net/lo"), "/sys/class/net/lo");
    EXPECT_EQ(read(ib / "device/numa_node"), "-1\n");
    const std::string online = read("/sys/devices/system/cpu/online");
    const std::string possible = read("/sys/devices/system/cpu/possible");
    const unsigned cpus = std::stoul(possible.substr(possible.find_last_of("-,") + 1)) + 1;
    EXPECT_EQ(read(ib / "device/local_cpulist"), online);
    EXPECT_EQ(read(ib / "device/local_cpus"),
              uroce::bridge::cpu_mask(online.substr(0, online.size() - 1), cpus) + "\n");
}

// The kernel's "%*pb": 32-bit words, most significant first; the first word
// only as wide as the CPUs it holds.
TEST(sysfsTree, CpuMaskFollowsTheKernelsBitmapFormat) {
    using uroce::bridge::cpu_mask;
    EXPECT_EQ(cpu_mask("0-1", 2), "3");
    EXPECT_EQ(cpu_mask("0", 1), "1");
    EXPECT_EQ(cpu_mask("0-3,8", 9), "10f");
    EXPECT_EQ(cpu_mask("1,3", 8), "0a");
    EXPECT_EQ(cpu_mask("0-39", 40), "ff,ffffffff");
    EXPECT_EQ(cpu_mask("0", 64), "00000000,00000001");
    EXPECT_EQ(cpu_mask("32-33", 64), "00000003,00000000");
    EXPECT_EQ(cpu_mask("0-5", 4), "f");  // CPUs beyond the possible ones are left out
}

TEST(sysfsTree, RateFollowsTheKernelsFormat) {
    TempDir tmp;
    TreeDevice dev = device("uroce0", 1);
    struct Case {
        uint8_t width, speed;
        const char* rate;
    };
    for (const Case& c :
         {Case{1, 1, "2.5 Gb/sec (1X SDR)\n"}, Case{1, 2, "5 Gb/sec (1X DDR)\n"},
          Case{16, 32, "50 Gb/sec (2X EDR)\n"}, Case{8, 16, "168 Gb/sec (12X FDR)\n"},
          Case{4, 128, "800 Gb/sec (8X NDR)\n"}, Case{2, 0, "10 Gb/sec (4X SDR)\n"}}) {
        dev.ports[0].attr.active_width = c.width;
        dev.ports[0].attr.active_speed = c.speed;
        uroce::bridge::write_tree(tmp.path(), {dev});
        EXPECT_EQ(read(tmp.path() / "class/infiniband/uroce0/ports/1/rate"), c.rate);
    }
    dev.ports[0].attr.active_width = 0;  // invalid: the kernel fails the read
    uroce::bridge::write_tree(tmp.path(), {dev});
    EXPECT_FALSE(fs::exists(tmp.path() / "class/infiniband/uroce0/ports/1/rate"));
}

TEST(sysfsTree, RewriteReplacesAndRemovesDevices) {
    TempDir tmp;
    uroce::bridge::write_tree(tmp.path(), {device("uroce0", 1), device("uroce1", 2)});
    TreeDevice changed = device("uroce0", 0xabcd);
    changed.ports[0].gids.resize(1);
    uroce::bridge::write_tree(tmp.path(), {changed});

    const fs::path classes = tmp.path() / "class";
    EXPECT_EQ(read(classes / "infiniband/uroce0/node_guid"), "0000:0000:0000:abcd\n");
    EXPECT_FALSE(fs::exists(classes / "infiniband/uroce0/ports/1/gids/1"));
    EXPECT_FALSE(fs::exists(classes / "infiniband/uroce1"));
    EXPECT_FALSE(fs::exists(classes / "infiniband_verbs/uverbs-uroce1"));
    // Nothing staged is left behind.
    for (const char* dir : {"infiniband", "infiniband_verbs"}) {
        for (const auto& entry : fs::directory_iterator(classes / dir)) {
            EXPECT_NE(entry.path().filename().string()[0], '.') << entry.path();
        }
    }
}

TEST(sysfsTree, RemoveTreeRemovesRoot) {
    TempDir tmp;
    const fs::path root = tmp.path() / "sysfs";
    uroce::bridge::write_tree(root, {device("uroce0", 1)});
    uroce::bridge::remove_tree(root);
    EXPECT_FALSE(fs::exists(root));
    uroce::bridge::remove_tree(root);  // already gone: no error
}

TEST(sysfsTree, RdmaCmNamesTheDaemonsSocket) {
    TempDir tmp;
    const fs::path cm = tmp.path() / "class/misc/rdma_cm";
    uroce::bridge::write_tree(tmp.path(), {device("uroce0", 1)}, "/run/uroce/uroced.sock");
    EXPECT_EQ(read(cm / "abi_version"), "4\n");  // the ucma ABI librdmacm 44 speaks
    EXPECT_EQ(read(cm / "uroce_socket"), "/run/uroce/uroced.sock\n");
    uroce::bridge::write_tree(tmp.path(), {device("uroce0", 1)}, "/tmp/other.sock");
    EXPECT_EQ(read(cm / "uroce_socket"), "/tmp/other.sock\n");
    for (const auto& entry : fs::directory_iterator(cm.parent_path())) {
        EXPECT_NE(entry.path().filename().string()[0], '.') << entry.path();
    }

    uroce::bridge::write_tree(tmp.path(), {device("uroce0", 1)});  // no socket: no rdma_cm
    EXPECT_FALSE(fs::exists(cm));
    EXPECT_TRUE(fs::exists(tmp.path() / "class/infiniband/uroce0"));

    const fs::path root = tmp.path() / "sysfs";
    uroce::bridge::write_tree(root, {}, "/run/uroce/uroced.sock");
    EXPECT_TRUE(fs::exists(root / "class/misc/rdma_cm/uroce_socket"));
    uroce::bridge::remove_tree(root);
    EXPECT_FALSE(fs::exists(root));
}

TEST(sysfsTree, WriteFailureThrows) {
    TempDir tmp;
    std::ofstream(tmp.path() / "file") << "x";
    EXPECT_THROW(uroce::bridge::write_tree(tmp.path() / "file", {device("uroce0", 1)}),
                 std::system_error);
}

TEST(sysfsTree, DeviceNodesAreSymlinksToDevNull) {
    TempDir tmp;
    const fs::path dev_dir = tmp.path() / "infiniband";
    const std::vector<TreeDevice> devices = {device("uroce0", 1), device("uroce1", 2)};
    std::vector<fs::path> made;
    ASSERT_TRUE(uroce::bridge::create_device_nodes(devices, made, dev_dir));
    EXPECT_EQ(made, (std::vector<fs::path>{dev_dir / "uverbs-uroce0", dev_dir / "uverbs-uroce1"}));
    for (const fs::path& node : made) {
        EXPECT_TRUE(fs::is_symlink(node));
        EXPECT_EQ(fs::read_symlink(node), "/dev/null");
    }
    EXPECT_TRUE(uroce::bridge::create_device_nodes(devices, made, dev_dir));  // already there
    EXPECT_EQ(made.size(), 2u);
    uroce::bridge::remove_device_nodes(made);
    EXPECT_FALSE(fs::exists(dev_dir));
}

// Two daemons with a device of the same name: the node is the first's to
// remove, and the second's stop leaves the first's nodes alone.
TEST(sysfsTree, ADaemonRemovesOnlyTheNodesItMade) {
    TempDir tmp;
    const fs::path dev_dir = tmp.path() / "infiniband";
    std::vector<fs::path> first, second;
    ASSERT_TRUE(uroce::bridge::create_device_nodes({device("uroce0", 1)}, first, dev_dir));
    ASSERT_TRUE(uroce::bridge::create_device_nodes({device("uroce0", 1), device("uroce9", 2)},
                                                   second, dev_dir));
    EXPECT_EQ(second, (std::vector<fs::path>{dev_dir / "uverbs-uroce9"}));
    uroce::bridge::remove_device_nodes(second);
    EXPECT_TRUE(fs::is_symlink(dev_dir / "uverbs-uroce0"));
    EXPECT_FALSE(fs::exists(dev_dir / "uverbs-uroce9"));
    uroce::bridge::remove_device_nodes(first);
    EXPECT_FALSE(fs::exists(dev_dir));
}

TEST(sysfsTree, DeviceNodesAllOrNothing) {
    TempDir tmp;
    const fs::path dev_dir = tmp.path() / "infiniband";
    fs::create_directories(dev_dir);
    std::ofstream(dev_dir / "uverbs-uroce1") << "not ours";
    const std::vector<TreeDevice> devices = {device("uroce0", 1), device("uroce1", 2)};
    std::vector<fs::path> made;
    EXPECT_FALSE(uroce::bridge::create_device_nodes(devices, made, dev_dir));
    EXPECT_TRUE(made.empty());
    EXPECT_FALSE(fs::exists(dev_dir / "uverbs-uroce0"));
    uroce::bridge::remove_device_nodes({dev_dir / "uverbs-uroce1"});
    EXPECT_EQ(read(dev_dir / "uverbs-uroce1"), "not ours");  // not a symlink to /dev/null: kept
}

TEST(sysfsTree, DeviceNodesFailWhereNotPermitted) {
    std::vector<fs::path> made;
    EXPECT_FALSE(
        uroce::bridge::create_device_nodes({device("uroce0", 1)}, made, "/proc/uroce-test"));
}

}  // namespace
