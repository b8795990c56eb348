// A report's frames named from the debug information (symbolize.h).
#include "check/symbolize.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

namespace uroce::check {
namespace {

// The libdw functions used, each looked up by its name.
#define UROCE_LIBDW_FUNCTIONS(X)    \
    X(dwfl_begin)                   \
    X(dwfl_end)                     \
    X(dwfl_linux_proc_report)       \
    X(dwfl_report_end)              \
    X(dwfl_linux_proc_find_elf)     \
    X(dwfl_standard_find_debuginfo) \
    X(dwfl_addrmodule)              \
    X(dwfl_module_addrdie)          \
    X(dwfl_module_getsrc)           \
    X(dwfl_lineinfo)                \
    X(dwarf_getscopes)              \
    X(dwarf_getscopes_die)          \
    X(dwarf_tag)                    \
    X(dwarf_diename)                \
    X(dwarf_attr_integrate)         \
    X(dwarf_formudata)              \
    X(dwarf_getsrcfiles)            \
    X(dwarf_filesrc)

struct Libdw {
#define UROCE_LIBDW_POINTER(name) decltype(&::name) name = nullptr;
    UROCE_LIBDW_FUNCTIONS(UROCE_LIBDW_POINTER)
#undef UROCE_LIBDW_POINTER
};

// libdw, loaded once; nullptr where it is not installed.
const Libdw* libdw() {
    static const Libdw* const loaded = []() -> const Libdw* {
        void* handle = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            return nullptr;
        }
        static Libdw functions;
#define UROCE_LIBDW_LOOKUP(name)                                                         \
    if (!(functions.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)))) { \
        return nullptr;                                                                  \
    }
        UROCE_LIBDW_FUNCTIONS(UROCE_LIBDW_LOOKUP)
#undef UROCE_LIBDW_LOOKUP
        return &functions;
    }();
    return loaded;
}

// An unsigned attribute of `die` (followed through its abstract origin).
std::optional<Dwarf_Word> number(const Libdw& dw, Dwarf_Die* die, unsigned name) {
    Dwarf_Attribute attribute;
    Dwarf_Word value;
    if (dw.dwarf_formudata(dw.dwarf_attr_integrate(die, name, &attribute), &value) != 0) {
        return std::nullopt;
    }
    return value;
}

// An inlined call's site, in the code it was inlined into.
void take_call_site(const Libdw& dw, Dwarf_Die* unit, Dwarf_Die* call, SourcePlace& place) {
    const auto line = number(dw, call, DW_AT_call_line);
    const auto file = number(dw, call, DW_AT_call_file);
    Dwarf_Files* files = nullptr;
    size_t count = 0;
    if (!line || !file || dw.dwarf_getsrcfiles(unit, &files, &count) != 0) {
        return;
    }
    const char* name = dw.dwarf_filesrc(files, *file, nullptr, nullptr);
    place.file = name ? name : "";
    place.line = static_cast<int>(*line);
}

// How far out from the code a function is looked for (lexical blocks and
// inlined calls within one another).
constexpr int kMaxScopes = 64;

}  // namespace

void load_symbolizer() {
    libdw();
}

Symbolizer::Symbolizer() {
    const Libdw* dw = libdw();
    if (!dw) {
        return;
    }
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {
        dw->dwfl_linux_proc_find_elf, dw->dwfl_standard_find_debuginfo, nullptr, &debuginfo_path};
    dwfl_ = dw->dwfl_begin(&callbacks);
    if (dwfl_ && (dw->dwfl_linux_proc_report(dwfl_, getpid()) != 0 ||
                  dw->dwfl_report_end(dwfl_, nullptr, nullptr) != 0)) {
        dw->dwfl_end(dwfl_);
        dwfl_ = nullptr;
    }
}

Symbolizer::~Symbolizer() {
    if (dwfl_) {
        libdw()->dwfl_end(dwfl_);
    }
}

std::optional<SourcePlace> Symbolizer::place(uintptr_t pc) const {
    if (!dwfl_) {
        return std::nullopt;
    }
    const Libdw& dw = *libdw();
    Dwfl_Module* module = dw.dwfl_addrmodule(dwfl_, pc);
    Dwarf_Addr bias = 0;
    Dwarf_Die* unit = module ? dw.dwfl_module_addrdie(module, pc, &bias) : nullptr;
    if (!unit) {
        return std::nullopt;
    }
    SourcePlace place;
    if (Dwfl_Line* line = dw.dwfl_module_getsrc(module, pc)) {
        if (const char* file =
                dw.dwfl_lineinfo(line, nullptr, &place.line, nullptr, nullptr, nullptr)) {
            place.file = file;
        }
    }
    // From the innermost scope outwards: each inlined call's site is a line
    // of the code around it, up to the function the code was compiled into.
    Dwarf_Die* scopes = nullptr;
    if (dw.dwarf_getscopes(unit, pc - bias, &scopes) <= 0) {
        free(scopes);
        return std::nullopt;
    }
    Dwarf_Die die = scopes[0];
    free(scopes);
    for (int depth = 0; depth < kMaxScopes; ++depth) {
        const int tag = dw.dwarf_tag(&die);
        if (tag == DW_TAG_subprogram) {
            const char* name = dw.dwarf_diename(&die);
            place.function = name ? name : "";
            break;
        }
        if (tag == DW_TAG_inlined_subroutine) {
            take_call_site(dw, unit, &die, place);
        }
        // The scopes around this one, itself first.
        Dwarf_Die* around = nullptr;
        const int count = dw.dwarf_getscopes_die(&die, &around);
        const bool outer = count > 1;
        if (outer) {
            die = around[1];
        }
        free(around);
        if (!outer) {
            break;
        }
    }
    if (place.function.empty() || place.file.empty()) {
        return std::nullopt;
    }
    return place;
}

}  // namespace uroce::check
