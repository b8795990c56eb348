#include "queues/ring.h"

#include <algorithm>

namespace uroce {

Result Ring::create(const std::string& name, uint32_t entries, uint32_t entry_size, size_t extra,
                    Ring& out) {
    Ring ring;
    if (Result r = SharedMemory::create(name, queues::ring_bytes(entries, entry_size) + extra,
                                        ring.memory_);
        !r) {
        return r;
    }
    ring.entries_ = entries;
    ring.entry_size_ = entry_size;
    ring.header()->entries = entries;
    ring.header()->entry_size = entry_size;
    out = std::move(ring);
    return ok();
}

std::byte* Ring::slot(uint32_t index) const {
    return static_cast<std::byte*>(memory_.data()) + queues::kRingHeaderSize +
           size_t{index & (entries_ - 1)} * entry_size_;
}

void* Ring::extra() const {
    return slot(0) + size_t{entries_} * entry_size_;
}

uint32_t Ring::pending() {
    if (broken_ || entries_ == 0) {  // broken, or a queue the QP does not have
        return 0;
    }
    const uint32_t produced = header()->producer.value.load(std::memory_order_acquire);
    const uint32_t count = produced - local_;
    if (count > entries_) {
        broken_ = true;
        return 0;
    }
    seen_ = produced;
    return count;
}

uint32_t Ring::waiting() const {
    if (broken_ || entries_ == 0) {
        return 0;
    }
    const uint32_t produced = header()->producer.value.load(std::memory_order_acquire);
    return std::min(produced - local_, entries_);
}

void Ring::discard_pending() {
    if (!entries_) {
        return;
    }
    local_ += pending();
    released_ = local_;
    header()->consumer.value.store(released_, std::memory_order_release);
}

void Ring::peek(std::span<std::byte> out) const {
    memcpy(out.data(), slot(local_), std::min<size_t>(out.size(), entry_size_));
}

void Ring::prefetch(uint32_t index, bool for_write) const {
    const std::byte* entry = slot(index);
    const size_t bytes = std::min<size_t>(entry_size_, kPrefetchBytes);
    for (size_t offset = 0; offset < bytes; offset += 64) {
        if (for_write) {
            __builtin_prefetch(entry + offset, 1);
        } else {
            __builtin_prefetch(entry + offset, 0);
        }
    }
}

void Ring::take(std::span<std::byte> out) {
    peek(out);
    ++local_;
    if (seen_ - local_ > 0 && seen_ - local_ <= entries_) {
        prefetch(local_, false);  // published already: the producer is done with it
    }
}

void Ring::release(uint32_t count) {
    if (count == 0) {
        return;  // also on a queue the QP does not have
    }
    released_ += count;
    header()->consumer.value.store(released_, std::memory_order_release);
}

bool Ring::move_pending_to(Ring& next) {
    const uint32_t count = pending();
    if (count > next.entries_) {
        return false;
    }
    for (uint32_t i = 0; i < count; ++i) {
        memcpy(next.slot(i), slot(local_ + i), std::min(entry_size_, next.entry_size_));
    }
    next.header()->producer.value.store(count, std::memory_order_release);
    return true;
}

uint32_t Ring::unconsumed() const {
    return std::min(local_ - consumed(), entries_);
}

bool Ring::move_unconsumed_to(Ring& next) {
    const uint32_t count = unconsumed();
    if (count > next.entries_) {
        return false;
    }
    for (uint32_t i = 0; i < count; ++i) {
        memcpy(next.slot(i), slot(local_ - count + i), std::min(entry_size_, next.entry_size_));
    }
    next.local_ = count;
    next.header()->producer.value.store(count, std::memory_order_release);
    return true;
}

bool Ring::push(std::span<const std::byte> entry) {
    // The consumer's index is read only when the ring looks full by the
    // value read before (each read is a cache miss while it polls).
    if (local_ - consumed_ >= entries_) {
        consumed_ = header()->consumer.value.load(std::memory_order_acquire);
        if (local_ - consumed_ >= entries_) {
            return false;
        }
    }
    memcpy(slot(local_), entry.data(), std::min<size_t>(entry.size(), entry_size_));
    ++local_;
    header()->producer.value.store(local_, std::memory_order_release);
    prefetch(local_, true);  // the consumer reads it only once it is published
    return true;
}

}  // namespace uroce
