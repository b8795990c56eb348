// Run by bridge_preload_test with or without liburoce-bridge.so preloaded;
// prints what it observes, one line per call, for the test to judge.
//   nodes PATH  stat/open families on PATH and on a path the bridge must not answer
//   sysfs       every call family that takes a path, on /sys/class/infiniband*
//   netlink     NETLINK_RDMA and NETLINK_ROUTE sockets, under a seccomp filter
//               that makes the kernel refuse NETLINK_RDMA with EACCES
//   verbs       libibverbs against the tree and bridge_test_provider
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

std::string failure() {
    return std::string("errno ") + strerrorname_np(errno);
}

template <typename Stat>
std::string describe(int result, const Stat& st) {
    if (result != 0) {
        return failure();
    }
    if (!S_ISCHR(st.st_mode)) {
        return "not-chr";
    }
    return "chr " + std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
}

std::string describe_fd(int fd) {
    if (fd < 0) {
        return failure();
    }
    struct stat st;
    std::string s = describe(fstat(fd, &st), st);
    close(fd);
    return s;
}

// glibc's entries before 2.33, which programs built against an older
// glibc call (version 1: _STAT_VER_LINUX on x86_64).
extern "C" int __xstat(int, const char*, struct stat*);
extern "C" int __lxstat64(int, const char*, struct stat64*);
extern "C" int __fxstatat(int, int, const char*, struct stat*, int);

void nodes(const char* path) {
    struct stat st;
    struct stat64 st64;
    printf("stat %s\n", describe(stat(path, &st), st).c_str());
    printf("stat64 %s\n", describe(stat64(path, &st64), st64).c_str());
    printf("lstat %s\n", describe(lstat(path, &st), st).c_str());
    printf("lstat64 %s\n", describe(lstat64(path, &st64), st64).c_str());
    printf("fstatat %s\n", describe(fstatat(AT_FDCWD, path, &st, 0), st).c_str());
    printf("fstatat64 %s\n", describe(fstatat64(AT_FDCWD, path, &st64, 0), st64).c_str());
    printf("__xstat %s\n", describe(__xstat(1, path, &st), st).c_str());
    printf("__lxstat64 %s\n", describe(__lxstat64(1, path, &st64), st64).c_str());
    printf("__fxstatat %s\n", describe(__fxstatat(1, AT_FDCWD, path, &st, 0), st).c_str());
    printf("open %s\n", describe_fd(open(path, O_RDWR | O_CLOEXEC)).c_str());
    printf("open64 %s\n", describe_fd(open64(path, O_RDWR | O_CLOEXEC)).c_str());
    printf("openat %s\n", describe_fd(openat(AT_FDCWD, path, O_RDWR | O_CLOEXEC)).c_str());
    printf("openat64 %s\n", describe_fd(openat64(AT_FDCWD, path, O_RDWR | O_CLOEXEC)).c_str());
    printf("other-stat %s\n", describe(stat("/dev/infiniband/uverbs0", &st), st).c_str());
    printf("other-open %s\n", describe_fd(open("/dev/infiniband/uverbs0", O_RDWR)).c_str());
}

extern "C" int __open_2(const char*, int);
extern "C" int __openat64_2(int, const char*, int);

std::string contents(int fd) {
    if (fd < 0) {
        return failure();
    }
    char buf[256];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0) {
        return failure();
    }
    buf[n] = '\0';
    std::string s = buf;
    return s.empty() || s.back() != '\n' ? s : s.substr(0, s.size() - 1);
}

std::string contents(FILE* f) {
    if (!f) {
        return failure();
    }
    std::string s = contents(dup(fileno(f)));
    return fclose(f) == 0 ? s : s + " fclose-failed";
}

template <typename Stat>
std::string kind(int result, const Stat& st) {
    return result != 0           ? failure()
           : S_ISDIR(st.st_mode) ? "dir"
           : S_ISREG(st.st_mode) ? "file"
                                 : "other";
}

std::string entries(DIR* dir) {
    if (!dir) {
        return failure();
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(dir)) {
        names.push_back(e->d_name);
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    std::string s;
    for (const std::string& n : names) {
        s += (s.empty() ? "" : " ") + n;
    }
    return s;
}

std::string link_target(ssize_t n, const char* buf) {
    return n < 0 ? failure() : std::string(buf, n);
}

std::string resolved(char* path) {
    if (!path) {
        return failure();
    }
    std::string s = path;
    free(path);
    return s;
}

// Each call family on the kernel's paths of uroce0 and its class directories.
void sysfs() {
    const char* type0 = "/sys/class/infiniband/uroce0/ports/1/gid_attrs/types/0";
    const char* ndev0 = "/sys/class/infiniband/uroce0/ports/1/gid_attrs/ndevs/0";
    const char* abi = "/sys/class/infiniband_verbs/abi_version";
    const char* net = "/sys/class/infiniband/uroce0/device/net";
    struct stat st;
    struct stat64 st64;
    struct statx stx;
    char buf[PATH_MAX];
    printf("open %s\n", contents(open(type0, O_RDONLY)).c_str());
    printf("open64 %s\n", contents(open64(ndev0, O_RDONLY)).c_str());
    printf("openat %s\n", contents(openat(AT_FDCWD, abi, O_RDONLY)).c_str());
    printf("openat64 %s\n", contents(openat64(-1, type0, O_RDONLY)).c_str());
    printf("__open_2 %s\n", contents(__open_2(type0, O_RDONLY)).c_str());
    printf("__openat64_2 %s\n", contents(__openat64_2(AT_FDCWD, ndev0, O_RDONLY)).c_str());
    printf("fopen %s\n", contents(fopen(type0, "r")).c_str());
    printf("fopen64 %s\n", contents(fopen64(ndev0, "r")).c_str());
    printf("freopen %s\n", contents(freopen(abi, "r", stdin)).c_str());
    printf("stat %s\n", kind(stat("/sys/class/infiniband/uroce0", &st), st).c_str());
    printf("stat64 %s\n", kind(stat64(type0, &st64), st64).c_str());
    printf("lstat %s\n", kind(lstat(type0, &st), st).c_str());
    printf("lstat64 %s\n", kind(lstat64("/sys/class/infiniband", &st64), st64).c_str());
    printf("fstatat %s\n", kind(fstatat(AT_FDCWD, abi, &st, 0), st).c_str());
    printf("fstatat64 %s\n", kind(fstatat64(AT_FDCWD, net, &st64, 0), st64).c_str());
    int r = statx(AT_FDCWD, "/sys/class/infiniband_verbs", 0, STATX_TYPE, &stx);
    printf("statx %s\n", r ? failure().c_str() : S_ISDIR(stx.stx_mode) ? "dir" : "other");
    printf("access %s\n", access(type0, R_OK) ? failure().c_str() : "ok");
    printf("faccessat %s\n", faccessat(AT_FDCWD, ndev0, R_OK, 0) ? failure().c_str() : "ok");
    printf("opendir %s\n", entries(opendir("/sys/class/infiniband")).c_str());
    printf("opendir-net %s\n", entries(opendir(net)).c_str());
    std::string lo = std::string(net) + "/lo";
    printf("readlink %s\n", link_target(readlink(lo.c_str(), buf, sizeof(buf)), buf).c_str());
    printf("readlinkat %s\n",
           link_target(readlinkat(AT_FDCWD, lo.c_str(), buf, sizeof(buf)), buf).c_str());
    printf("realpath %s\n",
           resolved(realpath("/sys/class/infiniband/uroce0/ports/../ports/1", nullptr)).c_str());
    printf("canonicalize_file_name %s\n",
           resolved(canonicalize_file_name("/sys/class/infiniband_verbs")).c_str());
    printf("netdev-through-tree %s\n", contents(open((lo + "/ifindex").c_str(), O_RDONLY)).c_str());
    printf("neighbour %s\n", kind(stat("/sys/class/infiniband2/probe", &st), st).c_str());
    std::string longer = "/sys/class/infiniband/" + std::string(PATH_MAX - 30, 'x');
    printf("too-long %s\n", kind(stat(longer.c_str(), &st), st).c_str());
}

std::string describe_socket(int fd) {
    if (fd < 0) {
        return failure();
    }
    close(fd);
    return "ok";
}

// Stands in for a kernel that has RDMA netlink: its answer (EACCES) differs
// from the bridge's (EPROTONOSUPPORT). Only ever returns an errno, so the
// architecture is not checked.
bool refuse_rdma_netlink_in_kernel() {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NETLINK_RDMA, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog = {sizeof(filter) / sizeof(filter[0]), filter};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

int netlink() {
    if (!refuse_rdma_netlink_in_kernel()) {
        perror("seccomp");
        return 2;
    }
    printf("rdma %s\n",
           describe_socket(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA)).c_str());
    printf("route %s\n",
           describe_socket(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)).c_str());
    return 0;
}

std::string gid_string(const ibv_gid& gid) {
    char s[40];
    for (int i = 0; i < 8; ++i) {
        snprintf(s + i * 5, 6, "%02x%02x%s", gid.raw[2 * i], gid.raw[2 * i + 1], i < 7 ? ":" : "");
    }
    return s;
}

void exercise_uroce(ibv_context* ctx) {
    ibv_gid_entry entry{};
    int ret = ibv_query_gid_ex(ctx, 1, 0, &entry, 0);
    printf("gid0 %d %s type %u ifindex %u\n", ret, gid_string(entry.gid).c_str(), entry.gid_type,
           entry.ndev_ifindex);
    ibv_gid gid;
    ret = ibv_query_gid(ctx, 1, 1, &gid);
    printf("gid1 %d %s\n", ret, gid_string(gid).c_str());
    __be16 pkey = 0;
    ret = ibv_query_pkey(ctx, 1, 0, &pkey);
    printf("pkey0 %d 0x%04x\n", ret, be16toh(pkey));

    ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
    if (!channel) {
        printf("channel %s\n", failure().c_str());
        return;
    }
    uint64_t handle = 0;
    ssize_t n = read(channel->fd, &handle, sizeof(handle));
    printf("channel context-ok %d event %zd 0x%llx\n", channel->context == ctx, n,
           static_cast<unsigned long long>(handle));
    const int fd = channel->fd;
    channel->refcnt = 1;
    printf("destroy-in-use %s\n", strerrorname_np(ibv_destroy_comp_channel(channel)));
    printf("fd-after-busy %s\n", fcntl(fd, F_GETFD) < 0 ? failure().c_str() : "open");
    channel->refcnt = 0;
    ret = ibv_destroy_comp_channel(channel);
    printf("destroy %d\n", ret);
    printf("fd-after-destroy %s\n", fcntl(fd, F_GETFD) < 0 ? failure().c_str() : "open");
}

void exercise_other(ibv_context* ctx) {
    ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
    printf("other-channel %s\n", channel ? "created" : failure().c_str());
}

int verbs() {
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    if (!list) {
        printf("device-list %s\n", failure().c_str());
        return 1;
    }
    for (int i = 0; i < num; ++i) {
        const char* name = ibv_get_device_name(list[i]);
        printf("device %s guid %016llx\n", name,
               static_cast<unsigned long long>(be64toh(ibv_get_device_guid(list[i]))));
        ibv_context* ctx = ibv_open_device(list[i]);
        if (!ctx) {
            printf("open %s %s\n", name, failure().c_str());
            continue;
        }
        if (strncmp(name, "uroce", 5) == 0) {
            exercise_uroce(ctx);
        } else {
            exercise_other(ctx);
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "nodes" && argc == 3) {
        nodes(argv[2]);
        return 0;
    }
    if (mode == "netlink") {
        return netlink();
    }
    if (mode == "verbs") {
        return verbs();
    }
    if (mode == "sysfs") {
        sysfs();
        return 0;
    }
    fprintf(stderr, "usage: %s nodes PATH | netlink | verbs | sysfs\n", argv[0]);
    return 2;
}
