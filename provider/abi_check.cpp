#include "abi_check.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <climits>
#include <memory>

namespace uroce::abi {
namespace {

// The releases where a marker symbol first appears.
constexpr int kVerbsLogRelease = 37;        // __verbs_log@IBVERBS_PRIVATE_<N>
constexpr int kQueryPortSpeedRelease = 62;  // ibv_query_port_speed@IBVERBS_1.16

std::string releases(int first, int end) {
    if (end - first == 1) {
        return "v" + std::to_string(first);
    }
    return "v" + std::to_string(first) + "-v" + std::to_string(end - 1);
}

// Reads a decimal number at s[*at], advancing; -1 when there is none.
int number_at(std::string_view s, size_t* at) {
    const size_t start = *at;
    int value = 0;
    while (*at < s.size() && s[*at] >= '0' && s[*at] <= '9' && value < 100000) {
        value = value * 10 + (s[*at] - '0');
        ++*at;
    }
    return *at > start ? value : -1;
}

// What the markers say of the release.
std::string by_markers(const Found& found) {
    if (!found.verbs_log) {
        return "older than v37 (it does not export __verbs_log)";
    }
    return found.query_port_speed ? "v62 or later (it exports ibv_query_port_speed)"
                                  : "v37 to v61 (it exports __verbs_log, not ibv_query_port_speed)";
}

}  // namespace

int release_of_file(std::string_view path) {
    const size_t slash = path.rfind('/');
    std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
    constexpr std::string_view kPrefix = "libibverbs.so.";
    if (name.substr(0, kPrefix.size()) != kPrefix) {
        return 0;
    }
    // <soversion>.<api>.<release>.<minor>
    size_t at = kPrefix.size();
    int parts[4];
    for (int i = 0; i < 4; ++i) {
        if (i > 0) {
            if (at >= name.size() || name[at] != '.') {
                return 0;
            }
            ++at;
        }
        parts[i] = number_at(name, &at);
        if (parts[i] < 0) {
            return 0;
        }
    }
    return at == name.size() ? parts[2] : 0;
}

std::optional<std::string> refusal(const BuiltFor& built, const Found& found) {
    // The releases the markers allow: [low, high).
    int low = 0;
    int high = INT_MAX;
    (found.verbs_log ? low : high) = kVerbsLogRelease;
    if (found.query_port_speed) {
        low = std::max(low, kQueryPortSpeedRelease);
    } else {
        high = std::min(high, kQueryPortSpeedRelease);
    }
    const bool markers_fit = std::max(low, built.first) < std::min(high, built.end);
    const bool release_fits =
        found.release == 0 || (found.release >= built.first && found.release < built.end);
    if (markers_fit && release_fits) {
        return std::nullopt;
    }
    std::string what = found.release ? "v" + std::to_string(found.release) : by_markers(found);
    if (found.release && release_fits) {
        what += " by its name, yet " + by_markers(found);
    }
    return "uroce: this provider was built for the libibverbs of rdma-core " +
           releases(built.first, built.end) + " (private ABI " + std::to_string(built.pabi) +
           ", configured against v" + std::to_string(built.release) +
           "), but the libibverbs loading it (" + (found.file.empty() ? "?" : found.file) +
           ") is " + what +
           ", whose structures are laid out differently. The uroce provider does not register: "
           "install the uroce built for this rdma-core, or build uroce against it.";
}

Found probe(const void* address, int pabi) {
    Found found;
    Dl_info info{};
    if (!dladdr(address, &info) || !info.dli_fname) {
        return found;
    }
    std::unique_ptr<char, decltype(&free)> real(realpath(info.dli_fname, nullptr), free);
    found.file = real ? real.get() : info.dli_fname;
    found.release = release_of_file(found.file);
    void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (handle) {
        const std::string private_abi = "IBVERBS_PRIVATE_" + std::to_string(pabi);
        found.verbs_log = dlvsym(handle, "__verbs_log", private_abi.c_str()) != nullptr;
        found.query_port_speed = dlvsym(handle, "ibv_query_port_speed", "IBVERBS_1.16") != nullptr;
        dlclose(handle);
    }
    return found;
}

}  // namespace uroce::abi
