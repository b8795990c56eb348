#include "sysfs_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_user_cm.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <system_error>

#include "emulator/protocol/bridge_abi.h"

namespace uroce::bridge {
namespace fs = std::filesystem;

namespace {

// uverbs ABI of the kernel interface: class/infiniband_verbs/abi_version
// (libibverbs 44 accepts 3 to 6).
constexpr int kUverbsAbiVersion = 6;

__attribute__((format(printf, 1, 2))) std::string strf(const char* fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

[[noreturn]] void throw_errno(const std::string& what, const fs::path& path) {
    throw std::system_error(errno, std::generic_category(), what + " " + path.string());
}

// Each file holds one line, as sysfs attributes do.
void write_file(const fs::path& path, const std::string& line) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd < 0) {
        throw_errno("cannot create", path);
    }
    std::string text = line + "\n";
    ssize_t n = ::write(fd, text.data(), text.size());
    int saved = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size())) {
        errno = n < 0 ? saved : EIO;
        throw_errno("cannot write", path);
    }
}

std::string guid_string(uint64_t guid) {
    return strf("%04x:%04x:%04x:%04x", unsigned(guid >> 48) & 0xffff, unsigned(guid >> 32) & 0xffff,
                unsigned(guid >> 16) & 0xffff, unsigned(guid) & 0xffff);
}

// The kernel's "%pI6": eight groups of four hex digits, which libibverbs parses
// at fixed offsets.
std::string gid_string(const ibv_gid& gid) {
    std::string s;
    for (int i = 0; i < 16; i += 2) {
        s += strf("%s%02x%02x", i ? ":" : "", gid.raw[i], gid.raw[i + 1]);
    }
    return s;
}

bool is_zero(const ibv_gid& gid) {
    for (uint8_t b : gid.raw) {
        if (b) {
            return false;
        }
    }
    return true;
}

std::string gid_type_string(ibv_gid_type type) {
    return type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
}

std::string state_string(ibv_port_state state) {
    static const char* const kNames[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
    const unsigned index = state;
    return strf("%u: %s", index, index < 6 ? kNames[index] : "UNKNOWN");
}

std::string phys_state_string(uint8_t phys_state) {
    static const char* const kNames[] = {"<unknown>",
                                         "Sleep",
                                         "Polling",
                                         "Disabled",
                                         "PortConfigurationTraining",
                                         "LinkUp",
                                         "LinkErrorRecovery",
                                         "Phy Test"};
    return strf("%u: %s", phys_state, phys_state < 8 ? kNames[phys_state] : kNames[0]);
}

// The kernel's rate_show(); empty when the width is invalid (the kernel fails the read).
std::string rate_string(uint8_t active_width, uint8_t active_speed) {
    struct Width {
        uint8_t code;
        int lanes;
    };
    static constexpr Width kWidths[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
    struct Speed {
        uint8_t code;
        int deci_gbps;  // per lane
        const char* name;
    };
    static constexpr Speed kSpeeds[] = {{2, 50, " DDR"},    {4, 100, " QDR"},  {8, 100, " FDR10"},
                                        {16, 140, " FDR"},  {32, 250, " EDR"}, {64, 500, " HDR"},
                                        {128, 1000, " NDR"}};
    int lanes = 0;
    for (const Width& w : kWidths) {
        if (w.code == active_width) {
            lanes = w.lanes;
        }
    }
    if (!lanes) {
        return {};
    }
    Speed speed = {1, 25, " SDR"};  // also for invalid speeds, as the kernel does
    for (const Speed& s : kSpeeds) {
        if (s.code == active_speed) {
            speed = s;
        }
    }
    int rate = speed.deci_gbps * lanes;
    return strf("%d%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "", lanes, speed.name);
}

std::string link_layer_string(uint8_t link_layer) {
    switch (link_layer) {
        case IBV_LINK_LAYER_INFINIBAND:
            return "InfiniBand";
        case IBV_LINK_LAYER_ETHERNET:
            return "Ethernet";
        default:
            return "Unknown";
    }
}

void write_port(const fs::path& dir, const TreePort& port) {
    const ibv_port_attr& a = port.attr;
    fs::create_directories(dir / "gids");
    fs::create_directories(dir / "gid_attrs" / "types");
    fs::create_directories(dir / "gid_attrs" / "ndevs");
    fs::create_directories(dir / "pkeys");
    write_file(dir / "state", state_string(a.state));
    write_file(dir / "phys_state", phys_state_string(a.phys_state));
    if (std::string rate = rate_string(a.active_width, a.active_speed); !rate.empty()) {
        write_file(dir / "rate", rate);
    }
    write_file(dir / "lid", strf("0x%x", a.lid));
    write_file(dir / "sm_lid", strf("0x%x", a.sm_lid));
    write_file(dir / "lid_mask_count", std::to_string(a.lmc));
    write_file(dir / "sm_sl", std::to_string(a.sm_sl));
    write_file(dir / "cap_mask", strf("0x%08x", a.port_cap_flags));
    write_file(dir / "link_layer", link_layer_string(a.link_layer));
    for (size_t i = 0; i < port.gids.size(); ++i) {
        const std::string index = std::to_string(i);
        write_file(dir / "gids" / index, gid_string(port.gids[i].gid));
        // The kernel fails reads of an empty slot's type with EINVAL, which
        // libibverbs takes for "IB/RoCE v1" before it sees the zero GID and
        // answers ENODATA; a file that says so leads there too (a missing one
        // would fail the whole ibv_query_gid_table). An empty slot has no ndev.
        if (is_zero(port.gids[i].gid)) {
            write_file(dir / "gid_attrs" / "types" / index, "IB/RoCE v1");
        } else {
            write_file(dir / "gid_attrs" / "types" / index, gid_type_string(port.gids[i].type));
            write_file(dir / "gid_attrs" / "ndevs" / index, port.netdev);
        }
    }
    for (size_t i = 0; i < port.pkeys.size(); ++i) {
        write_file(dir / "pkeys" / std::to_string(i), strf("0x%04x", port.pkeys[i]));
    }
}

std::string read_line(const fs::path& path) {
    std::string line;
    if (FILE* f = ::fopen(path.c_str(), "re")) {
        char buf[4096];
        if (fgets(buf, sizeof(buf), f)) {
            line = buf;
        }
        fclose(f);
    }
    if (!line.empty() && line.back() == '\n') {
        line.pop_back();
    }
    return line;
}

// The parent device: the NUMA placement of a device without one (all online
// CPUs, as for a PCI device whose firmware names no node), and its netdev as
// device/net/<netdev>, a link to the interface's own directory (tools find a
// device's IP address through it).
void write_parent_device(const fs::path& dir, const TreeDevice& dev) {
    fs::create_directories(dir / "net");
    write_file(dir / "numa_node", "-1");
    const std::string online = read_line("/sys/devices/system/cpu/online");
    const std::string possible = read_line("/sys/devices/system/cpu/possible");
    // The highest possible CPU's number ends the list ("0-7"); npos + 1 is 0.
    const unsigned bits =
        strtoul(possible.c_str() + (possible.find_last_of("-,") + 1), nullptr, 10) + 1;
    write_file(dir / "local_cpulist", online.empty() ? "0" : online);
    write_file(dir / "local_cpus", cpu_mask(online.empty() ? "0" : online, bits));
    if (!dev.ports.empty()) {
        const std::string& netdev = dev.ports.front().netdev;
        fs::create_directory_symlink(fs::path("/sys/class/net") / netdev, dir / "net" / netdev);
    }
}

void write_ibdev(const fs::path& dir, const TreeDevice& dev) {
    fs::create_directories(dir);
    write_file(dir / "node_type", "1: CA");
    write_file(dir / "node_guid", guid_string(dev.node_guid));
    write_file(dir / "sys_image_guid", guid_string(dev.sys_image_guid));
    for (const auto& [name, value] :
         {std::pair{"node_desc", &dev.node_desc}, std::pair{"fw_ver", &dev.fw_ver},
          std::pair{"hca_type", &dev.hca_type}, std::pair{"board_id", &dev.board_id}}) {
        if (!value->empty()) {
            write_file(dir / name, *value);
        }
    }
    write_file(dir / UROCE_SYSFS_SOCKET_FILE, dev.socket_path.string());
    for (size_t i = 0; i < dev.ports.size(); ++i) {
        write_port(dir / "ports" / std::to_string(i + 1), dev.ports[i]);
    }
    write_parent_device(dir / "device", dev);
}

// libibverbs checks that the opened node's rdev equals 'dev'; the node is /dev/null.
std::string null_device_numbers() {
    struct stat st;
    if (::stat("/dev/null", &st) != 0) {
        throw_errno("cannot stat", "/dev/null");
    }
    return strf("%u:%u", major(st.st_rdev), minor(st.st_rdev));
}

void write_uverbs(const fs::path& dir, const TreeDevice& dev, const std::string& dev_numbers) {
    fs::create_directories(dir);
    write_file(dir / "ibdev", dev.ibdev);
    write_file(dir / "dev", dev_numbers);
    write_file(dir / "abi_version", std::to_string(UROCE_UVERBS_ABI_VERSION));
}

fs::path cm_dir(const fs::path& root) {
    return root / "class" / "misc" / "rdma_cm";
}

void write_cm(const fs::path& dir, const fs::path& socket_path) {
    fs::create_directories(dir);
    write_file(dir / "abi_version", std::to_string(RDMA_USER_CM_ABI_VERSION));
    write_file(dir / UROCE_SYSFS_SOCKET_FILE, socket_path.string());
}

fs::path staging_path(const fs::path& dst) {
    return dst.parent_path() / ("." + dst.filename().string() + ".new");
}

// Moves the complete directory `staged` to `dst` in one step, replacing what is there.
void install(const fs::path& staged, const fs::path& dst) {
    if (::rename(staged.c_str(), dst.c_str()) == 0) {
        return;
    }
    if (errno != ENOTEMPTY && errno != EEXIST) {
        throw_errno("cannot rename into", dst);
    }
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) != 0) {
        throw_errno("cannot exchange", dst);
    }
    fs::remove_all(staged);  // now the previous version
}

// Renames first so that readers never see a partly deleted directory.
void remove_whole(const fs::path& path) {
    fs::path doomed = path.parent_path() / ("." + path.filename().string() + ".old");
    fs::remove_all(doomed);
    if (::rename(path.c_str(), doomed.c_str()) != 0) {
        if (errno == ENOENT) {
            return;
        }
        throw_errno("cannot rename", path);
    }
    fs::remove_all(doomed);
}

// Removes the visible entries of `dir` whose names are not in `keep`.
void remove_others(const fs::path& dir, const std::set<std::string>& keep) {
    std::vector<fs::path> stale;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name[0] != '.' && entry.is_directory() && !keep.contains(name)) {
            stale.push_back(entry.path());
        }
    }
    for (const fs::path& path : stale) {
        remove_whole(path);
    }
}

}  // namespace

// "%*pb": 32-bit hexadecimal words, most significant first, separated by
// commas; the first only as wide as the bits it holds.
std::string cpu_mask(const std::string& cpulist, unsigned bits) {
    std::vector<bool> set(bits);
    for (const char* p = cpulist.c_str(); *p;) {
        char* end;
        unsigned first = strtoul(p, &end, 10), last = first;
        if (*end == '-') {
            last = strtoul(end + 1, &end, 10);
        }
        for (unsigned cpu = first; cpu <= last && cpu < bits; ++cpu) {
            set[cpu] = true;
        }
        p = *end == ',' ? end + 1 : "";
    }
    std::string mask;
    const unsigned words = (bits + 31) / 32;
    for (unsigned w = words; w-- > 0;) {
        uint32_t word = 0;
        for (unsigned b = 0; b < 32 && w * 32 + b < bits; ++b) {
            word |= uint32_t(set[w * 32 + b]) << b;
        }
        const unsigned top_bits = bits - w * 32;
        const int digits = w + 1 == words ? int((std::min(top_bits, 32u) + 3) / 4) : 8;
        mask += strf("%s%0*x", mask.empty() ? "" : ",", digits, word);
    }
    return mask;
}

void write_tree(const fs::path& root, const std::vector<TreeDevice>& devices,
                const fs::path& cm_socket_path) {
    const fs::path ib_dir = root / "class" / "infiniband";
    const fs::path verbs_dir = root / "class" / "infiniband_verbs";
    fs::create_directories(ib_dir);
    fs::create_directories(verbs_dir);
    if (cm_socket_path.empty()) {
        remove_whole(cm_dir(root));
    }

    const fs::path abi_file = verbs_dir / "abi_version";
    const fs::path abi_staged = staging_path(abi_file);
    write_file(abi_staged, std::to_string(kUverbsAbiVersion));
    if (::rename(abi_staged.c_str(), abi_file.c_str()) != 0) {
        throw_errno("cannot rename into", abi_file);
    }

    // libibverbs enters through class/infiniband_verbs: take entries away there
    // first, and add them there last.
    std::set<std::string> ibdevs, uverbs;
    for (const TreeDevice& dev : devices) {
        ibdevs.insert(dev.ibdev);
        uverbs.insert(dev.uverbs);
    }
    remove_others(verbs_dir, uverbs);
    remove_others(ib_dir, ibdevs);

    const std::string dev_numbers = null_device_numbers();
    for (const TreeDevice& dev : devices) {
        const fs::path ib_staged = staging_path(ib_dir / dev.ibdev);
        fs::remove_all(ib_staged);
        write_ibdev(ib_staged, dev);
        install(ib_staged, ib_dir / dev.ibdev);

        const fs::path verbs_staged = staging_path(verbs_dir / dev.uverbs);
        fs::remove_all(verbs_staged);
        write_uverbs(verbs_staged, dev, dev_numbers);
        install(verbs_staged, verbs_dir / dev.uverbs);
    }

    // librdmacm starts from rdma_cm and then lists the devices: it comes last.
    if (!cm_socket_path.empty()) {
        const fs::path staged = staging_path(cm_dir(root));
        fs::remove_all(staged);
        write_cm(staged, cm_socket_path);
        install(staged, cm_dir(root));
    }
}

void remove_tree(const fs::path& root) {
    remove_whole(cm_dir(root));
    remove_whole(root / "class" / "infiniband_verbs");
    fs::remove_all(root);
}

bool create_device_nodes(const std::vector<TreeDevice>& devices, std::vector<fs::path>& made,
                         const fs::path& dev_dir) {
    std::error_code ec;
    const bool made_dir = fs::create_directories(dev_dir, ec);
    if (ec) {
        return false;
    }
    const size_t before = made.size();
    for (const TreeDevice& dev : devices) {
        const fs::path node = dev_dir / dev.uverbs;
        if (fs::is_symlink(node, ec) && fs::read_symlink(node, ec) == "/dev/null") {
            continue;
        }
        if (::symlink("/dev/null", node.c_str()) != 0) {
            for (size_t i = before; i < made.size(); ++i) {
                fs::remove(made[i], ec);
            }
            made.resize(before);
            if (made_dir) {
                fs::remove(dev_dir, ec);
            }
            return false;
        }
        made.push_back(node);
    }
    return true;
}

void remove_device_nodes(const std::vector<fs::path>& nodes) {
    std::error_code ec;
    std::set<fs::path> dirs;
    for (const fs::path& node : nodes) {
        if (fs::is_symlink(node, ec) && fs::read_symlink(node, ec) == "/dev/null") {
            fs::remove(node, ec);
        }
        dirs.insert(node.parent_path());
    }
    for (const fs::path& dir : dirs) {
        if (fs::is_empty(dir, ec)) {
            fs::remove(dir, ec);
        }
    }
}

}  // namespace uroce::bridge
