// Check mode's watches over memory the program gives back (docs/check.md,
// memory-unmapped): madvise that drops pages, munmap, mremap. A NIC keeps
// the pages it pinned for an MR, so such memory under a live MR is no
// longer the MR's. And over memory that may leave the process (those, and
// free, realloc and shmdt, behind which glibc unmaps without a call that
// comes here), so that check mode reads an MR's bytes in place without
// asking the kernel first while nothing was released. The provider
// installs the watches when a context checks; until then each call costs
// one load.
#undef _FORTIFY_SOURCE

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>

#include "emulator/protocol/bridge_abi.h"
#include "interpose.h"

namespace {

uroce_memory_watch watch;
uroce_release_watch release_watch;
// A watch that gives memory back itself is not watched again.
thread_local bool watching;

void released(const void* addr, size_t length) {
    if (uroce_release_watch w = __atomic_load_n(&release_watch, __ATOMIC_ACQUIRE)) {
        w(addr, length);
    }
}

// A block of the allocator's, which may have been a mapping of its own.
void released_block(void* block) {
    if (block && __atomic_load_n(&release_watch, __ATOMIC_ACQUIRE)) {
        released(block, malloc_usable_size(block));
    }
}

// free's and realloc's next definitions, looked up as the bridge is loaded
// or, for a call before that, then. dlsym may free a former dlerror message
// while it looks: a free that comes meanwhile is left undone rather than
// made twice. No thread-local here: a sanitizer's runtime stands in front
// of __tls_get_addr and calls free before it can answer.
bool looking_up;
using FreeFn = void (*)(void*);
using ReallocFn = void* (*)(void*, size_t);
FreeFn next_free;
ReallocFn next_realloc;

template <class Fn>
Fn next_allocator_call(Fn& cache, const char* name) {
    Fn fn = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
    if (!fn && !__atomic_exchange_n(&looking_up, true, __ATOMIC_ACQ_REL)) {
        fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
        __atomic_store_n(&cache, fn, __ATOMIC_RELEASE);
        __atomic_store_n(&looking_up, false, __ATOMIC_RELEASE);
    }
    return fn;
}

void tell(const void* addr, size_t length, const char* call, const void* caller) {
    uroce_memory_watch w = __atomic_load_n(&watch, __ATOMIC_ACQUIRE);
    if (w && length && !watching) {
        watching = true;
        w(addr, length, call, caller);
        watching = false;
    }
}

__attribute__((constructor)) void look_up_allocator_calls() {
    next_allocator_call(next_free, "free");
    next_allocator_call(next_realloc, "realloc");
}

}  // namespace

EXPORT void uroce_bridge_watch_memory(uroce_memory_watch w) {
    __atomic_store_n(&watch, w, __ATOMIC_RELEASE);
}

EXPORT void uroce_bridge_watch_releases(uroce_release_watch w) {
    __atomic_store_n(&release_watch, w, __ATOMIC_RELEASE);
}

EXPORT void free(void* block) noexcept {
    released_block(block);
    if (FreeFn real = next_allocator_call(next_free, "free")) {
        real(block);
    }
}

EXPORT void* realloc(void* block, size_t size) noexcept {
    released_block(block);
    if (ReallocFn real = next_allocator_call(next_realloc, "realloc")) {
        return real(block, size);
    }
    errno = ENOMEM;
    return nullptr;
}

EXPORT void* reallocarray(void* block, size_t count, size_t size) noexcept {
    released_block(block);
    return NEXT(reallocarray)(block, count, size);
}

EXPORT int shmdt(const void* addr) noexcept {
    released(addr, 0);
    return NEXT(shmdt)(addr);
}

EXPORT int madvise(void* addr, size_t length, int advice) noexcept {
    switch (advice) {
        case MADV_DONTNEED:
            tell(addr, length, "madvise(MADV_DONTNEED)", __builtin_return_address(0));
            break;
        case MADV_FREE:
            tell(addr, length, "madvise(MADV_FREE)", __builtin_return_address(0));
            break;
        case MADV_REMOVE:
            tell(addr, length, "madvise(MADV_REMOVE)", __builtin_return_address(0));
            break;
        default:
            break;
    }
    return NEXT(madvise)(addr, length, advice);
}

EXPORT int munmap(void* addr, size_t length) noexcept {
    tell(addr, length, "munmap", __builtin_return_address(0));
    released(addr, length);
    return NEXT(munmap)(addr, length);
}

// What moved went from the old address; what shrank gave its tail back.
EXPORT void* mremap(void* old_address, size_t old_size, size_t new_size, int flags, ...) noexcept {
    void* new_address = nullptr;
    if (flags & MREMAP_FIXED) {
        va_list args;
        va_start(args, flags);
        new_address = va_arg(args, void*);
        va_end(args);
    }
    released(old_address, old_size);
    void* result = NEXT(mremap)(old_address, old_size, new_size, flags, new_address);
    if (result != MAP_FAILED && result != old_address) {
        tell(old_address, old_size, "mremap", __builtin_return_address(0));
    } else if (result != MAP_FAILED && new_size < old_size) {
        tell(static_cast<char*>(old_address) + new_size, old_size - new_size, "mremap",
             __builtin_return_address(0));
    }
    return result;
}
