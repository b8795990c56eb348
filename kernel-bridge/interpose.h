// How liburoce-bridge.so's definitions reach the ones they stand in front of.
#pragma once

#include <dlfcn.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::bridge {

// The next definition of Fn (the real one), looked up on first use. The cache
// is zero-initialised, so no guard or constructor is involved; racing lookups
// store the same value.
template <auto Fn>
decltype(Fn) next(const char* name, const char* version = nullptr) {
    static decltype(Fn) cache;
    decltype(Fn) fn = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
    if (!fn) {
        void* sym = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
        fn = reinterpret_cast<decltype(Fn)>(sym);
        __atomic_store_n(&cache, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

}  // namespace uroce::bridge

#define NEXT(fn, ...) ::uroce::bridge::next<&fn>(#fn __VA_OPT__(, ) __VA_ARGS__)
