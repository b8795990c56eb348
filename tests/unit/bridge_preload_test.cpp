// Runs bridge_preload_helper (and the real ibv_devices) in child processes,
// with and without liburoce-bridge.so preloaded, and checks what they observe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sysfs_tree.h"

namespace {

namespace fs = std::filesystem;

// A path the bridge answers and nothing else creates.
constexpr char kNode[] = "/dev/infiniband/uverbs-uroce-bridgetest";

using Env = std::map<std::string, std::optional<std::string>>;  // nullopt: unset

struct Outcome {
    int status = -1;
    std::string output;  // stdout and stderr
};

Outcome run_program(const std::vector<std::string>& argv, const Env& env) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        return {};
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        dup2(pipefd[1], 2);
        for (const auto& [name, value] : env) {
            if (value) {
                setenv(name.c_str(), value->c_str(), 1);
            } else {
                unsetenv(name.c_str());
            }
        }
        std::vector<char*> args;
        for (const std::string& a : argv) {
            args.push_back(const_cast<char*>(a.c_str()));
        }
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    close(pipefd[1]);
    Outcome r;
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) {
        r.output.append(buf, n);
    }
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// Sanitizer builds preload the sanitizer runtimes ahead of our libraries.
std::optional<std::string> sanitizer_preload() {
    const std::string runtimes = UROCE_SANITIZER_PRELOAD;
    return runtimes.empty() ? std::nullopt : std::optional(runtimes);
}

Env plain() {
    return {{"LD_PRELOAD", sanitizer_preload()}, {"SYSFS_PATH", std::nullopt}};
}

Env preloaded(std::optional<std::string> sysfs = std::nullopt) {
    return {{"LD_PRELOAD", UROCE_SANITIZER_PRELOAD UROCE_BRIDGE_PATH}, {"SYSFS_PATH", sysfs}};
}

std::string null_device() {
    struct stat st;
    EXPECT_EQ(stat("/dev/null", &st), 0);
    return "chr " + std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
}

TEST(bridgePreload, AnswersUroceNodesAsDevNull) {
    ASSERT_FALSE(fs::exists(kNode)) << kNode << " exists: nothing to answer";
    const std::string chr = null_device();
    Outcome r = run_program({BRIDGE_HELPER_PATH, "nodes", kNode}, preloaded());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "stat " + chr + "\nstat64 " + chr + "\nlstat " + chr + "\nlstat64 " + chr +
                            "\nfstatat " + chr + "\nfstatat64 " + chr + "\n__xstat " + chr +
                            "\n__lxstat64 " + chr + "\n__fxstatat " + chr + "\nopen " + chr +
                            "\nopen64 " + chr + "\nopenat " + chr + "\nopenat64 " + chr +
                            "\nother-stat errno ENOENT\nother-open errno ENOENT\n");
}

TEST(bridgePreload, WithoutItTheNodesDoNotExist) {
    ASSERT_FALSE(fs::exists(kNode));
    Outcome r = run_program({BRIDGE_HELPER_PATH, "nodes", kNode}, plain());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("stat errno ENOENT\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("open errno ENOENT\n"), std::string::npos) << r.output;
}

// The helper's seccomp filter makes the kernel refuse NETLINK_RDMA with EACCES;
// EPROTONOSUPPORT can therefore only come from the bridge.
TEST(bridgePreload, RefusesRdmaNetlinkWhileSysfsPathIsSet) {
    Outcome r = run_program({BRIDGE_HELPER_PATH, "netlink"}, preloaded("/nonexistent"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "rdma errno EPROTONOSUPPORT\nroute ok\n");
}

TEST(bridgePreload, LeavesNetlinkAloneOtherwise) {
    Outcome r = run_program({BRIDGE_HELPER_PATH, "netlink"}, preloaded());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "rdma errno EACCES\nroute ok\n");
    r = run_program({BRIDGE_HELPER_PATH, "netlink"}, plain());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "rdma errno EACCES\nroute ok\n");
}

class bridgeVerbs : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "uroce-bridge-XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        root_ = tmpl;
        // Node names no daemon uses (a running daemon may own /dev nodes) that
        // start like a uroce node, so that the bridge answers them.
        uroce::bridge::write_tree(
            root_, {device("uroce0", "uverbs-uroce-unit0", 0x0011223344556677),
                    device("bridgetest0", "uverbs-uroce-bridgetest0", 0x8899aabbccddeeff)});
    }
    void TearDown() override { fs::remove_all(root_); }

    static uroce::bridge::TreeDevice device(const std::string& name, const std::string& uverbs,
                                            uint64_t guid) {
        uroce::bridge::TreeDevice dev;
        dev.ibdev = name;
        dev.uverbs = uverbs;
        dev.node_guid = guid;
        uroce::bridge::TreePort port;
        port.attr.state = IBV_PORT_ACTIVE;
        port.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
        ibv_gid gid{};
        gid.raw[10] = gid.raw[11] = 0xff;
        gid.raw[12] = 127, gid.raw[15] = 1;
        port.gids = {{gid, IBV_GID_TYPE_ROCE_V2}, {}};
        dev.ports = {port};
        return dev;
    }

    Env env() const {
        Env e = preloaded(root_.string());
        e["RDMAV_DRIVERS"] = BRIDGE_TEST_PROVIDER;
        e["IBV_SHOW_WARNINGS"] = "1";
        return e;
    }

    fs::path root_;
};

TEST_F(bridgeVerbs, IbvDevicesListsTheDevice) {
    if (!fs::exists("/usr/bin/ibv_devices")) {
        FAIL() << "ibv_devices is not installed (tools/install-deps installs ibverbs-utils)";
    }
    Outcome r = run_program({"/usr/bin/ibv_devices"}, env());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("uroce0"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("0011223344556677"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Warning"), std::string::npos) << r.output;
}

TEST_F(bridgeVerbs, WithoutThePreloadTheDeviceIsNotUsable) {
    Env e = env();
    e["LD_PRELOAD"] = std::nullopt;
    Outcome r = run_program({BRIDGE_HELPER_PATH, "verbs"}, e);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "") << "no device should be listed";
}

TEST_F(bridgeVerbs, LibibverbsReadsTheTreeAndGetsChannelsFromTheProvider) {
    Outcome r = run_program({BRIDGE_HELPER_PATH, "verbs"}, env());
    ASSERT_EQ(r.status, 0) << r.output;
    const std::string uroce0 =
        "device uroce0 guid 0011223344556677\n"
        "gid0 0 0000:0000:0000:0000:0000:ffff:7f00:0001 type 2 ifindex 1\n"
        "gid1 0 0000:0000:0000:0000:0000:0000:0000:0000\n"
        "pkey0 0 0xffff\n"
        "channel context-ok 1 event 8 0x1234abcd\n"
        "destroy-in-use EBUSY\n"
        "fd-after-busy open\n"
        "destroy 0\n"
        "fd-after-destroy errno EBADF\n";
    EXPECT_NE(r.output.find(uroce0), std::string::npos) << r.output;
    // A context of another provider gets libibverbs' own channel, which fails
    // without a command fd.
    const std::string other =
        "device bridgetest0 guid 8899aabbccddeeff\n"
        "other-channel errno EBADF\n";
    EXPECT_NE(r.output.find(other), std::string::npos) << r.output;
}

// Every program of the environment reads the tree where it would read the
// kernel's sysfs, whichever libc call it uses (UCX reads gid_attrs/types with
// open, hwloc walks with opendir and realpath, scripts use fopen).
TEST_F(bridgeVerbs, EveryCallFamilyReadsTheTreeForTheKernelsPaths) {
    fs::create_directories(root_ / "class" / "infiniband2");
    std::ofstream(root_ / "class" / "infiniband2" / "probe") << "not ours\n";
    const fs::path real_root = fs::canonical(root_);
    Outcome r = run_program({BRIDGE_HELPER_PATH, "sysfs"}, env());
    ASSERT_EQ(r.status, 0) << r.output;
    const std::string lo_ifindex = std::to_string(if_nametoindex("lo"));
    EXPECT_EQ(r.output,
              "open RoCE v2\n"
              "open64 lo\n"
              "openat 6\n"
              "openat64 RoCE v2\n"
              "__open_2 RoCE v2\n"
              "__openat64_2 lo\n"
              "fopen RoCE v2\n"
              "fopen64 lo\n"
              "freopen 6\n"
              "stat dir\n"
              "stat64 file\n"
              "lstat file\n"
              "lstat64 dir\n"
              "fstatat file\n"
              "fstatat64 dir\n"
              "statx dir\n"
              "access ok\n"
              "faccessat ok\n"
              "opendir . .. bridgetest0 uroce0\n"
              "opendir-net . .. lo\n"
              "readlink /sys/class/net/lo\n"
              "readlinkat /sys/class/net/lo\n"
              "realpath " +
                  (real_root / "class/infiniband/uroce0/ports/1").string() +
                  "\n"
                  "canonicalize_file_name " +
                  (real_root / "class/infiniband_verbs").string() +
                  "\n"
                  "netdev-through-tree " +
                  lo_ifindex +
                  "\n"
                  "neighbour errno ENOENT\n"
                  "too-long errno ENAMETOOLONG\n");
}

TEST_F(bridgeVerbs, WithoutSysfsPathTheKernelsPathsAreLeftAlone) {
    Env e = env();
    e["SYSFS_PATH"] = std::nullopt;
    Outcome r = run_program({BRIDGE_HELPER_PATH, "sysfs"}, e);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("open errno ENOENT\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fopen errno ENOENT\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("realpath errno ENOENT\n"), std::string::npos) << r.output;
}

}  // namespace
