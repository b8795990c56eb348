// liburoce-bridge.so, loaded with LD_PRELOAD: the parts of a kernel that a
// file tree cannot give libibverbs.
//  - the calls that take a path: path_calls.cpp.
//  - madvise, munmap, mremap, watched for check mode: memory_calls.cpp.
//  - socket(AF_NETLINK, *, NETLINK_RDMA) is the daemon's RDMA netlink in a
//    uroce environment (rdma_netlink_socket.cpp); where SYSFS_PATH is set but
//    no daemon runs, it fails, so that libibverbs reads that tree even where
//    the kernel has RDMA.
//  - ibv_create_comp_channel / ibv_destroy_comp_channel get their fd from the
//    uroce provider for uroce contexts (libibverbs would ask the kernel).
//  - the one ioctl libibverbs sends a uroce command fd, asking for an
//    imported context's async event fd, is answered by the provider.
// Anything else goes to the next definition unchanged. Built without the C++
// runtime (no exceptions, no static constructors): it is loaded into every
// process the user starts.
#undef _FORTIFY_SOURCE  // its inline wrappers would clash with these definitions

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "emulator/protocol/bridge_abi.h"
#include "emulator/protocol/driver_abi.h"
#include "interpose.h"
#include "rdma_netlink_socket.h"

EXPORT int socket(int domain, int type, int protocol) noexcept {
    if (int fd; uroce::bridge::open_rdma_netlink(domain, type, protocol, &fd)) {
        return fd;
    }
    const char* sysfs = getenv("SYSFS_PATH");
    if (domain == AF_NETLINK && protocol == NETLINK_RDMA && sysfs && *sysfs) {
        errno = EPROTONOSUPPORT;  // no daemon: what a kernel without RDMA answers
        return -1;
    }
    return NEXT(socket)(domain, type, protocol);
}

namespace {

bool is_uroce(ibv_context* ctx) {
    const verbs_device_ops* ops = reinterpret_cast<verbs_device*>(ctx->device)->ops;
    return ops && ops->name && strcmp(ops->name, "uroce") == 0;
}

// The provider is dlopen()ed privately by libibverbs, so its symbols are found
// through the library that holds its ops.
void* provider_symbol(ibv_context* ctx, const char* name) {
    Dl_info info;
    const void* ops = reinterpret_cast<verbs_device*>(ctx->device)->ops;
    if (!dladdr(ops, &info) || !info.dli_fname) {
        return nullptr;
    }
    void* lib = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (!lib) {
        return nullptr;
    }
    void* sym = dlsym(lib, name);
    dlclose(lib);  // libibverbs keeps the provider loaded
    return sym;
}

}  // namespace

EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
    if (!is_uroce(ctx)) {
        auto real = NEXT(ibv_create_comp_channel, "IBVERBS_1.0");
        if (!real) {
            errno = ENOSYS;
            return nullptr;
        }
        return real(ctx);
    }
    auto create = reinterpret_cast<decltype(&uroce_comp_channel_create)>(
        provider_symbol(ctx, "uroce_comp_channel_create"));
    if (!create) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    auto* channel = static_cast<ibv_comp_channel*>(malloc(sizeof(ibv_comp_channel)));
    if (!channel) {
        return nullptr;
    }
    int fd = create(ctx);
    if (fd < 0) {
        int saved = errno;
        free(channel);
        errno = saved;
        return nullptr;
    }
    channel->context = ctx;
    channel->fd = fd;
    channel->refcnt = 0;
    return channel;
}

// As libibverbs: EBUSY while CQs use the channel. The provider closes the fd
// even when it reports an error, so the channel is freed in every other case.
EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    ibv_context* ctx = channel->context;
    if (!is_uroce(ctx)) {
        auto real = NEXT(ibv_destroy_comp_channel, "IBVERBS_1.0");
        return real ? real(channel) : ENOSYS;
    }
    auto destroy = reinterpret_cast<decltype(&uroce_comp_channel_destroy)>(
        provider_symbol(ctx, "uroce_comp_channel_destroy"));
    if (!destroy) {
        return EOPNOTSUPP;
    }
    pthread_mutex_lock(&ctx->mutex);
    int ret = EBUSY;
    if (channel->refcnt == 0) {
        ret = destroy(ctx, channel->fd);
        free(channel);
    }
    pthread_mutex_unlock(&ctx->mutex);
    return ret;
}

// Check mode's look at a wait that may never end, then libibverbs' wait.
EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    auto real = VERBS_NEXT(ibv_get_cq_event, "IBVERBS_1.1");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (channel && is_uroce(channel->context)) {
        static decltype(&uroce_check_cq_wait) watch;
        if (!__atomic_load_n(&watch, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&watch,
                             reinterpret_cast<decltype(watch)>(
                                 provider_symbol(channel->context, "uroce_check_cq_wait")),
                             __ATOMIC_RELEASE);
        }
        if (auto check = __atomic_load_n(&watch, __ATOMIC_ACQUIRE)) {
            check(channel->context, channel->fd);
        }
    }
    return real(channel, cq, cq_context);
}

namespace {

// The provider's exported function `name`, found among the loaded libraries
// by the provider's library name (no context is at hand to find it by).
void* loaded_provider_symbol(const char* name) {
    const char* path = nullptr;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* found) {
            const char* base = strrchr(info->dlpi_name, '/');
            if (base && strcmp(base + 1, UROCE_PROVIDER_LIBRARY) == 0) {
                *static_cast<const char**>(found) = info->dlpi_name;
                return 1;
            }
            return 0;
        },
        &path);
    void* lib = path ? dlopen(path, RTLD_NOLOAD | RTLD_LAZY) : nullptr;
    if (!lib) {
        return nullptr;
    }
    void* sym = dlsym(lib, name);
    dlclose(lib);
    return sym;
}

// A uroce command fd is the /dev/null that stands in for the device node.
bool is_stand_in(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
           minor(st.st_rdev) == 3;
}

}  // namespace

EXPORT int ioctl(int fd, unsigned long request, ...) noexcept {
    va_list args;
    va_start(args, request);
    void* arg = va_arg(args, void*);
    va_end(args);
    auto* hdr = static_cast<ib_uverbs_ioctl_hdr*>(arg);
    if (request == RDMA_VERBS_IOCTL && hdr && hdr->object_id == UVERBS_OBJECT_ASYNC_EVENT &&
        hdr->method_id == UVERBS_METHOD_ASYNC_EVENT_ALLOC && hdr->num_attrs == 1 &&
        hdr->attrs[0].attr_id == UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE && is_stand_in(fd)) {
        auto async_fd = reinterpret_cast<decltype(&uroce_import_async_fd)>(
            loaded_provider_symbol("uroce_import_async_fd"));
        const int got = async_fd ? async_fd(fd) : -1;
        if (got < 0) {
            errno = async_fd ? errno : ENOTTY;
            return -1;
        }
        hdr->attrs[0].data = static_cast<uint64_t>(got);
        return 0;
    }
    auto real = NEXT(ioctl);
    return real ? real(fd, request, arg) : (errno = ENOSYS, -1);
}
