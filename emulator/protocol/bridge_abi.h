// What the kernel bridge, the daemon and the uroce provider agree on.
// C-compatible: the provider and the preload library include it.
#pragma once

#include <stddef.h>

#include "uroce_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_context;

// Written to class/infiniband_verbs/<uverbs>/abi_version; the provider's
// match_{min,max}_abi_version must include it.
#define UROCE_UVERBS_ABI_VERSION 1

// File under class/infiniband/<ibdev>/ that holds the daemon's socket path.
#define UROCE_SYSFS_SOCKET_FILE "uroce_socket"

// Exported by the provider with C linkage; liburoce-bridge.so calls them from
// ibv_create_comp_channel / ibv_destroy_comp_channel for uroce contexts.
//
// uroce_comp_channel_create returns the read end of a new completion channel
// (the daemon writes 8-byte struct ib_uverbs_comp_event_desc records to it),
// or -1 with errno set.
//
// uroce_comp_channel_destroy closes fd in every case and returns 0 or an errno
// value. It runs with ctx->mutex held (libibverbs holds it while destroying a
// channel), so it must not take that mutex.
int uroce_comp_channel_create(struct ibv_context* ctx);
int uroce_comp_channel_destroy(struct ibv_context* ctx, int fd);

// Called from ibv_get_cq_event before it reads the channel's fd: in check
// mode it waits a while for an event and reports a wait on a channel none
// of whose CQs is armed (docs/check.md); otherwise it returns at once.
void uroce_check_cq_wait(struct ibv_context* ctx, int fd);

// The provider's library name (UROCE_PROVIDER_LIBRARY, uroce_abi.h) is what
// the bridge looks for among those loaded when it has no context to find
// the provider by.

// ibv_import_device asks the kernel for the new context's async event fd
// (UVERBS_METHOD_ASYNC_EVENT_ALLOC on the command fd). The bridge answers
// that ioctl with this: a new descriptor for the async events of the
// context whose command fd is (a duplicate of) cmd_fd, or -1 with errno set.
int uroce_import_async_fd(int cmd_fd);

// Exported by the bridge: check mode's watch over memory the program gives
// back. The provider, in check mode, hands it a function that the bridge's
// madvise (MADV_DONTNEED, MADV_FREE, MADV_REMOVE), munmap and mremap (the
// part it moves or drops) call with the range, the call's name and the
// program's call site, before the call is made.
typedef void (*uroce_memory_watch)(const void* addr, size_t length, const char* call,
                                   const void* caller);
void uroce_bridge_watch_memory(uroce_memory_watch watch);

// Exported by the bridge: check mode's watch over memory the program may
// have unmapped, which tells it when it must ask the kernel again before
// reading an MR's bytes. The bridge's free, realloc and reallocarray (the
// block, whose pages glibc may unmap), munmap, mremap and shmdt call it
// with the range before the call is made; length 0 when the extent is
// unknown (shmdt). It must not allocate, lock or free.
typedef void (*uroce_release_watch)(const void* addr, size_t length);
void uroce_bridge_watch_releases(uroce_release_watch watch);

// Exported by the bridge, which stands in front of prctl: whether the
// program itself called prctl(PR_SET_PTRACER), and the pid it named then
// (0 for none, (long)PR_SET_PTRACER_ANY for any); 0 when it never did.
// The provider names the daemon its ptracer only where the program named
// no other (protocol/memory_access.cpp), and tells the bridge
// (uroce_bridge_named_daemon), which warns when the program later names
// another and so takes the daemon's access away.
int uroce_bridge_program_ptracer(long* pid);

// Exported by the bridge, which stands in front of ibv_fork_init: whether
// the program called it. uroce answers RDMA netlink's copy-on-fork
// question yes, so libibverbs' ibv_fork_init returns at once and keeps no
// trace of the call; check mode's fork-unsafe asks here.
int uroce_bridge_fork_init_called(void);
void uroce_bridge_named_daemon(long pid);

#ifdef __cplusplus
}
#endif
