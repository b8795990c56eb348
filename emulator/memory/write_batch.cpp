#include "memory/write_batch.h"

#include <string.h>

#include <utility>

namespace uroce {

WriteBatch::WriteBatch() : bytes_(std::make_unique_for_overwrite<std::byte[]>(kMaxBytes)) {
    writes_.reserve(kMaxWrites);
}

bool WriteBatch::add(pid_t pid, uint64_t tag, std::span<const std::byte> bytes,
                     std::span<const Segment> to) {
    if (writes_.size() == kMaxWrites || bytes.size() > kMaxBytes - used_) {
        return false;
    }
    memcpy(bytes_.get() + used_, bytes.data(), bytes.size());
    writes_.push_back({pid, tag, used_, bytes.size(), segments_.size(), to.size()});
    segments_.insert(segments_.end(), to.begin(), to.end());
    used_ += bytes.size();
    return true;
}

int WriteBatch::write_run(size_t first, size_t last) const {
    const Write& a = writes_[first];
    const Write& b = writes_[last - 1];
    const std::span<const std::byte> bytes(bytes_.get() + a.offset, b.offset + b.length - a.offset);
    const std::span<const Segment> to(segments_.data() + a.first_segment,
                                      b.first_segment + b.segments - a.first_segment);
    return write_process(a.pid, bytes, to);
}

void WriteBatch::flush(const std::function<void(uint64_t tag, int error)>& failed) {
    std::vector<std::pair<uint64_t, int>> failures;
    for (size_t first = 0; first < writes_.size();) {
        size_t last = first + 1;
        while (last < writes_.size() && writes_[last].pid == writes_[first].pid) {
            ++last;
        }
        // A run that fails is made again write by write, to find which failed.
        if (write_run(first, last) != 0) {
            for (size_t i = first; i < last; ++i) {
                if (const int error = write_run(i, i + 1)) {
                    failures.emplace_back(writes_[i].tag, error);
                }
            }
        }
        first = last;
    }
    writes_.clear();
    segments_.clear();
    used_ = 0;
    for (const auto& [tag, error] : failures) {
        failed(tag, error);
    }
}

}  // namespace uroce
