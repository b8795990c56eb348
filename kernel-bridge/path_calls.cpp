// The calls of liburoce-bridge.so that take a path.
//  - /sys/class/infiniband, infiniband_verbs and misc/rdma_cm are answered
//    from the uroce tree at SYSFS_PATH (sysfs_redirect.cpp), for every program.
//  - /dev/infiniband/uverbs-uroce* answer as /dev/null when they do not exist,
//    so that libibverbs' stat() and open()+fstat() checks pass without root.
//  - /dev/infiniband/rdma_cm opens an event channel of the daemon's in a
//    uroce environment (rdma_cm_channel.cpp), for librdmacm.
// glibc's own functions call each other internally, past these definitions:
// fopen does not go through open, nor realpath through readlink, so each
// entry point is interposed itself.
#undef _FORTIFY_SOURCE  // its inline wrappers would clash with these definitions

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <type_traits>

#include "interpose.h"
#include "rdma_cm_channel.h"
#include "sysfs_redirect.h"

using uroce::bridge::describe_cm_channel;
using uroce::bridge::open_cm_channel;
using uroce::bridge::tree_path;

namespace {

constexpr char kNodePrefix[] = "/dev/infiniband/uverbs-uroce";
constexpr char kNodeStandIn[] = "/dev/null";

template <typename Result>
bool failed(Result r) {
    if constexpr (std::is_pointer_v<Result>) {
        return r == nullptr;
    } else {
        return r < 0;
    }
}

template <typename Result>
Result failure() {
    if constexpr (std::is_pointer_v<Result>) {
        return nullptr;
    } else {
        return -1;
    }
}

// Runs `call` on the path to use for `path`. When that fails with ENOENT for a
// uroce device node, runs it again on /dev/null: existing nodes (root-made
// symlinks, a real device) are used as they are.
template <typename Call>
auto on_path(const char* path, Call call) {
    using Result = decltype(call(path));
    char tree[PATH_MAX];
    if (!tree_path(path, tree)) {
        return failure<Result>();
    }
    Result r = call(path);
    if (failed(r) && errno == ENOENT && path &&
        strncmp(path, kNodePrefix, sizeof(kNodePrefix) - 1) == 0) {
        return call(kNodeStandIn);
    }
    return r;
}

// As on_path, for the open family, which also opens rdma_cm event channels.
template <typename Call>
int open_path(const char* path, int flags, Call call) {
    if (int fd; open_cm_channel(path, flags, &fd)) {
        return fd;
    }
    return on_path(path, call);
}

// fstatat of dirfd itself (Linux 6.11 also takes a null path for that).
bool of_dirfd(const char* path, int flags) {
    return (flags & AT_EMPTY_PATH) && (!path || !*path);
}

// An fstatat's result `r`, with an rdma_cm channel described as the
// kernel's device when the call was of dirfd itself.
template <typename Stat>
int described_at(int r, int dirfd, const char* path, int flags, Stat* buf) {
    if (r == 0 && of_dirfd(path, flags)) {
        describe_cm_channel(dirfd, buf);
    }
    return r;
}

bool needs_mode(int flags) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

}  // namespace

// open's mode argument exists only when the flags ask for one.
#define OPEN_MODE(flags)                             \
    mode_t mode = 0;                                 \
    if (needs_mode(flags)) {                         \
        va_list ap;                                  \
        va_start(ap, flags);                         \
        mode = static_cast<mode_t>(va_arg(ap, int)); \
        va_end(ap);                                  \
    }

EXPORT int open(const char* path, int flags, ...) {
    OPEN_MODE(flags);
    return open_path(path, flags, [&](const char* p) { return NEXT(open)(p, flags, mode); });
}

EXPORT int open64(const char* path, int flags, ...) {
    OPEN_MODE(flags);
    return open_path(path, flags, [&](const char* p) { return NEXT(open64)(p, flags, mode); });
}

EXPORT int openat(int dirfd, const char* path, int flags, ...) {
    OPEN_MODE(flags);
    return open_path(path, flags,
                     [&](const char* p) { return NEXT(openat)(dirfd, p, flags, mode); });
}

EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
    OPEN_MODE(flags);
    return open_path(path, flags,
                     [&](const char* p) { return NEXT(openat64)(dirfd, p, flags, mode); });
}

// What _FORTIFY_SOURCE builds call when the flags are not a constant. glibc's
// own versions abort on flags that need a mode; they are left to do so.
extern "C" int __open_2(const char*, int);
extern "C" int __open64_2(const char*, int);
extern "C" int __openat_2(int, const char*, int);
extern "C" int __openat64_2(int, const char*, int);

EXPORT int __open_2(const char* path, int flags) {
    return open_path(path, flags, [&](const char* p) { return NEXT(__open_2)(p, flags); });
}

EXPORT int __open64_2(const char* path, int flags) {
    return open_path(path, flags, [&](const char* p) { return NEXT(__open64_2)(p, flags); });
}

EXPORT int __openat_2(int dirfd, const char* path, int flags) {
    return open_path(path, flags, [&](const char* p) { return NEXT(__openat_2)(dirfd, p, flags); });
}

EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
    return open_path(path, flags,
                     [&](const char* p) { return NEXT(__openat64_2)(dirfd, p, flags); });
}

EXPORT FILE* fopen(const char* __restrict path, const char* __restrict mode) {
    return on_path(path, [&](const char* p) { return NEXT(fopen)(p, mode); });
}

EXPORT FILE* fopen64(const char* __restrict path, const char* __restrict mode) {
    return on_path(path, [&](const char* p) { return NEXT(fopen64)(p, mode); });
}

EXPORT FILE* freopen(const char* __restrict path, const char* __restrict mode,
                     FILE* __restrict stream) {
    return on_path(path, [&](const char* p) { return NEXT(freopen)(p, mode, stream); });
}

EXPORT FILE* freopen64(const char* __restrict path, const char* __restrict mode,
                       FILE* __restrict stream) {
    return on_path(path, [&](const char* p) { return NEXT(freopen64)(p, mode, stream); });
}

EXPORT int stat(const char* __restrict path, struct stat* __restrict buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(stat)(p, buf); });
}

EXPORT int stat64(const char* __restrict path, struct stat64* __restrict buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(stat64)(p, buf); });
}

EXPORT int lstat(const char* __restrict path, struct stat* __restrict buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(lstat)(p, buf); });
}

EXPORT int lstat64(const char* __restrict path, struct stat64* __restrict buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(lstat64)(p, buf); });
}

EXPORT int fstatat(int dirfd, const char* __restrict path, struct stat* __restrict buf,
                   int flags) noexcept {
    return described_at(
        on_path(path, [&](const char* p) { return NEXT(fstatat)(dirfd, p, buf, flags); }), dirfd,
        path, flags, buf);
}

EXPORT int fstatat64(int dirfd, const char* __restrict path, struct stat64* __restrict buf,
                     int flags) noexcept {
    return described_at(
        on_path(path, [&](const char* p) { return NEXT(fstatat64)(dirfd, p, buf, flags); }), dirfd,
        path, flags, buf);
}

// glibc's entries before 2.33, still exported, which programs built
// against an older glibc call instead of stat, lstat and fstatat.
EXPORT int __xstat(int version, const char* path, struct stat* buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(__xstat)(version, p, buf); });
}

EXPORT int __xstat64(int version, const char* path, struct stat64* buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(__xstat64)(version, p, buf); });
}

EXPORT int __lxstat(int version, const char* path, struct stat* buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(__lxstat)(version, p, buf); });
}

EXPORT int __lxstat64(int version, const char* path, struct stat64* buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(__lxstat64)(version, p, buf); });
}

EXPORT int __fxstatat(int version, int dirfd, const char* path, struct stat* buf,
                      int flags) noexcept {
    return described_at(
        on_path(path,
                [&](const char* p) { return NEXT(__fxstatat)(version, dirfd, p, buf, flags); }),
        dirfd, path, flags, buf);
}

EXPORT int __fxstatat64(int version, int dirfd, const char* path, struct stat64* buf,
                        int flags) noexcept {
    return described_at(
        on_path(path,
                [&](const char* p) { return NEXT(__fxstatat64)(version, dirfd, p, buf, flags); }),
        dirfd, path, flags, buf);
}

EXPORT int statx(int dirfd, const char* __restrict path, int flags, unsigned int mask,
                 struct statx* __restrict buf) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(statx)(dirfd, p, flags, mask, buf); });
}

EXPORT int access(const char* path, int mode) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(access)(p, mode); });
}

EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(faccessat)(dirfd, p, mode, flags); });
}

EXPORT DIR* opendir(const char* path) {
    return on_path(path, [&](const char* p) { return NEXT(opendir)(p); });
}

EXPORT ssize_t readlink(const char* __restrict path, char* __restrict buf, size_t len) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(readlink)(p, buf, len); });
}

EXPORT ssize_t readlinkat(int dirfd, const char* __restrict path, char* __restrict buf,
                          size_t len) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(readlinkat)(dirfd, p, buf, len); });
}

// A resolved tree path names the tree, as realpath of a /sys/class link names /sys/devices.
EXPORT char* realpath(const char* __restrict path, char* __restrict resolved) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(realpath)(p, resolved); });
}

EXPORT char* canonicalize_file_name(const char* path) noexcept {
    return on_path(path, [&](const char* p) { return NEXT(canonicalize_file_name)(p); });
}
