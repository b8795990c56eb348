#include "memory/stage_pool.h"

namespace uroce::transport {

StageBuffer StagePool::take() {
    if (spare_.empty()) {
        return std::make_unique_for_overwrite<std::byte[]>(kStageBytes);
    }
    StageBuffer buffer = std::move(spare_.back());
    spare_.pop_back();
    return buffer;
}

void StagePool::give(StageBuffer buffer) {
    if (buffer && spare_.size() < kKept) {
        spare_.push_back(std::move(buffer));
    }
}

}  // namespace uroce::transport
