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

// libibverbs' definition of Fn: the next one, or, when libibverbs was
// loaded privately (dlopen by pyverbs, say), out of RTLD_NEXT's reach and
// the program's call came here all the same, that library's own.
template <auto Fn>
decltype(Fn) verbs_next(const char* name, const char* version) {
    decltype(Fn) fn = next<Fn>(name, version);
    if (!fn) {
        if (void* lib = dlopen("libibverbs.so.1", RTLD_NOLOAD | RTLD_LAZY)) {
            fn = reinterpret_cast<decltype(Fn)>(dlvsym(lib, name, version));
            dlclose(lib);
        }
    }
    return fn;
}

}  // namespace uroce::bridge

#define VERBS_NEXT(fn, version) ::uroce::bridge::verbs_next<&fn>(#fn, version)
#define NEXT(fn, ...) ::uroce::bridge::next<&fn>(#fn __VA_OPT__(, ) __VA_ARGS__)
