// A minimal rdma-core provider for the bridge tests, loaded with
// RDMAV_DRIVERS. It registers two drivers: "uroce" (matching uroce*), whose
// completion channels must come from uroce_comp_channel_create below, and
// "bridgetest" (matching bridgetest*), which the bridge must leave to
// libibverbs.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "emulator/protocol/bridge_abi.h"
#include "emulator/protocol/driver_abi.h"

// The cq_handle of the event each new uroce channel starts with.
constexpr uint64_t kFirstEventHandle = 0x1234abcd;

namespace {

void free_context(ibv_context* ctx) {
    verbs_context* vctx = verbs_get_ctx(ctx);
    verbs_uninit_context(vctx);
    free(vctx);
}

const verbs_context_ops kContextOps = {.free_context = free_context};

verbs_context* alloc_context(ibv_device* device, int cmd_fd, void*) {
    auto* vctx = static_cast<verbs_context*>(
        _verbs_init_and_alloc_context(device, cmd_fd, sizeof(verbs_context), nullptr, 0));
    if (!vctx) {
        return nullptr;
    }
    verbs_set_ops(vctx, &kContextOps);
    vctx->context.async_fd = eventfd(0, EFD_CLOEXEC);
    return vctx;
}

// Without a command fd, libibverbs' own ibv_create_comp_channel fails with EBADF.
verbs_context* alloc_context_without_cmd_fd(ibv_device* device, int cmd_fd, void* data) {
    verbs_context* vctx = alloc_context(device, cmd_fd, data);
    if (vctx) {
        close(vctx->context.cmd_fd);
        vctx->context.cmd_fd = -1;
    }
    return vctx;
}

verbs_device* alloc_device(verbs_sysfs_dev*) {
    return static_cast<verbs_device*>(calloc(1, sizeof(verbs_device)));
}

void uninit_device(verbs_device* device) {
    free(device);
}

const verbs_match_ent kUroceMatch[] = {
    {nullptr, {"rdma_device:*Nuroce*"}, 0, 0, VERBS_MATCH_MODALIAS}, {}};
const verbs_match_ent kOtherMatch[] = {
    {nullptr, {"rdma_device:*Nbridgetest*"}, 0, 0, VERBS_MATCH_MODALIAS}, {}};

const verbs_device_ops kUroceOps = {.name = "uroce",
                                    .match_min_abi_version = UROCE_UVERBS_ABI_VERSION,
                                    .match_max_abi_version = UROCE_UVERBS_ABI_VERSION,
                                    .match_table = kUroceMatch,
                                    .alloc_context = alloc_context,
                                    .alloc_device = alloc_device,
                                    .uninit_device = uninit_device};
const verbs_device_ops kOtherOps = {.name = "bridgetest",
                                    .match_min_abi_version = UROCE_UVERBS_ABI_VERSION,
                                    .match_max_abi_version = UROCE_UVERBS_ABI_VERSION,
                                    .match_table = kOtherMatch,
                                    .alloc_context = alloc_context_without_cmd_fd,
                                    .alloc_device = alloc_device,
                                    .uninit_device = uninit_device};

__attribute__((constructor)) void register_drivers() {
    uroce_register_driver(&kUroceOps);
    uroce_register_driver(&kOtherOps);
}

}  // namespace

extern "C" {

// A pipe whose read end already holds one completion event.
int uroce_comp_channel_create(ibv_context*) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -1;
    }
    ssize_t n = write(fds[1], &kFirstEventHandle, sizeof(kFirstEventHandle));
    close(fds[1]);
    if (n != sizeof(kFirstEventHandle)) {
        close(fds[0]);
        errno = EIO;
        return -1;
    }
    return fds[0];
}

// Reports ENOLCK when called without ctx->mutex held, breaking the contract.
int uroce_comp_channel_destroy(ibv_context* ctx, int fd) {
    close(fd);
    if (pthread_mutex_trylock(&ctx->mutex) == 0) {
        pthread_mutex_unlock(&ctx->mutex);
        return ENOLCK;
    }
    return 0;
}

}  // extern "C"
