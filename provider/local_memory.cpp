#include "local_memory.h"

#include <mutex>

namespace uroce {

void LocalMemory::add(uint32_t lkey, uint64_t iova, const void* addr, size_t length) {
    std::unique_lock lock(lock_);
    regions_[lkey] = {iova, static_cast<const std::byte*>(addr), length};
}

void LocalMemory::remove(uint32_t lkey) {
    std::unique_lock lock(lock_);
    regions_.erase(lkey);
}

const std::byte* LocalMemory::find(uint32_t lkey, uint64_t iova, uint64_t length) const {
    std::shared_lock lock(lock_);
    const auto it = regions_.find(lkey);
    if (it == regions_.end()) {
        return nullptr;
    }
    const Region& r = it->second;
    if (iova < r.iova || iova - r.iova > r.length || length > r.length - (iova - r.iova)) {
        return nullptr;
    }
    return r.addr + (iova - r.iova);
}

bool LocalMemory::region(uint32_t lkey, Region& out) const {
    std::shared_lock lock(lock_);
    const auto it = regions_.find(lkey);
    if (it == regions_.end()) {
        return false;
    }
    out = it->second;
    return true;
}

}  // namespace uroce
