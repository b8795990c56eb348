// Check mode's watch over memory the program gives back (docs/check.md,
// memory-unmapped): madvise that drops pages, munmap, mremap. A NIC keeps
// the pages it pinned for an MR, so such memory under a live MR is no
// longer the MR's. The provider installs the watch when a context checks;
// until then each call costs one load. glibc's own calls (free() of a
// large block) do not come here: the provider finds those by msync.
#undef _FORTIFY_SOURCE

#include <stdarg.h>
#include <sys/mman.h>

#include "emulator/protocol/bridge_abi.h"
#include "interpose.h"

namespace {

uroce_memory_watch watch;
// A watch that gives memory back itself is not watched again.
thread_local bool watching;

void tell(const void* addr, size_t length, const char* call, const void* caller) {
    uroce_memory_watch w = __atomic_load_n(&watch, __ATOMIC_ACQUIRE);
    if (w && length && !watching) {
        watching = true;
        w(addr, length, call, caller);
        watching = false;
    }
}

}  // namespace

EXPORT void uroce_bridge_watch_memory(uroce_memory_watch w) {
    __atomic_store_n(&watch, w, __ATOMIC_RELEASE);
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
    void* result = NEXT(mremap)(old_address, old_size, new_size, flags, new_address);
    if (result != MAP_FAILED && result != old_address) {
        tell(old_address, old_size, "mremap", __builtin_return_address(0));
    } else if (result != MAP_FAILED && new_size < old_size) {
        tell(static_cast<char*>(old_address) + new_size, old_size - new_size, "mremap",
             __builtin_return_address(0));
    }
    return result;
}
