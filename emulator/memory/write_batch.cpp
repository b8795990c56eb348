#include "memory/write_batch.h"

#include <string.h>

#include <utility>

namespace uroce {

WriteBatch::WriteBatch() : bytes_(std::make_unique_for_overwrite<std::byte[]>(kMaxBytes)) {
    writes_.reserve(kMaxWrites);
    from_.reserve(kMaxWrites);
}

bool WriteBatch::add(pid_t pid, uint64_t tag, std::span<const std::byte> bytes,
                     std::span<const Segment> to, bool lent) {
    if (writes_.size() == kMaxWrites || (!lent && bytes.size() > kMaxBytes - used_)) {
        return false;
    }
    const std::byte* from = bytes.data();
    if (!lent) {
        memcpy(bytes_.get() + used_, bytes.data(), bytes.size());
        from = bytes_.get() + used_;
        used_ += bytes.size();
    }
    writes_.push_back({pid, tag, from, bytes.size(), segments_.size(), to.size()});
    segments_.insert(segments_.end(), to.begin(), to.end());
    return true;
}

int WriteBatch::write_run(size_t first, size_t last) const {
    const Write& a = writes_[first];
    const Write& b = writes_[last - 1];
    // One iovec per stretch of adjacent bytes (copied writes are adjacent).
    from_.clear();
    for (size_t i = first; i < last; ++i) {
        const Write& w = writes_[i];
        if (!from_.empty() &&
            static_cast<std::byte*>(from_.back().iov_base) + from_.back().iov_len == w.bytes) {
            from_.back().iov_len += w.length;
        } else {
            from_.push_back({const_cast<std::byte*>(w.bytes), w.length});
        }
    }
    const std::span<const Segment> to(segments_.data() + a.first_segment,
                                      b.first_segment + b.segments - a.first_segment);
    return write_process(a.pid, from_, to);
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
