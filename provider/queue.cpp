#include "queue.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <utility>

namespace uroce {
namespace {

// 0 when `fd` holds at least `bytes` (touching a mapping beyond the end of
// its file would fault), else an errno.
int check_size(int fd, size_t bytes) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        return errno;
    }
    return st.st_size >= 0 && static_cast<uint64_t>(st.st_size) >= bytes ? 0 : EPROTO;
}

}  // namespace

SharedRing::SharedRing(SharedRing&& other) noexcept {
    *this = std::move(other);
}

SharedRing& SharedRing::operator=(SharedRing&& other) noexcept {
    if (this != &other) {
        unmap();
        base_ = std::exchange(other.base_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        entries_ = std::exchange(other.entries_, 0);
        entry_size_ = std::exchange(other.entry_size_, 0);
        local_ = std::exchange(other.local_, 0);
        limit_ = std::exchange(other.limit_, 0);
        side_ = other.side_;
        broken_ = std::exchange(other.broken_, false);
    }
    return *this;
}

SharedRing::~SharedRing() {
    unmap();
}

void SharedRing::unmap() {
    if (base_) {
        munmap(base_, bytes_);
        base_ = nullptr;
    }
}

int SharedRing::map(int fd, uint32_t entries, uint32_t entry_size, size_t extra, Side side,
                    SharedRing& out) {
    if (!std::has_single_bit(entries) || entry_size == 0) {
        return EPROTO;
    }
    // The size comes from the reply, never from the header in the memory.
    const size_t bytes = queues::ring_bytes(entries, entry_size) + extra;
    if (int error = check_size(fd, bytes)) {
        return error;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return errno;
    }
    SharedRing ring;
    ring.base_ = static_cast<std::byte*>(base);
    ring.bytes_ = bytes;
    ring.entries_ = entries;
    ring.entry_size_ = entry_size;
    ring.limit_ = entries;
    ring.side_ = side;
    const queues::RingHeader& header = *ring.header();
    const uint32_t produced = header.producer.value.load(std::memory_order_acquire);
    const uint32_t consumed = header.consumer.value.load(std::memory_order_acquire);
    if (header.entries != entries || header.entry_size != entry_size ||
        produced - consumed > entries) {
        return EPROTO;
    }
    ring.local_ = side == Side::kProducer ? produced : consumed;
    out = std::move(ring);
    return 0;
}

bool SharedRing::full() const {
    return local_ - header()->consumer.value.load(std::memory_order_acquire) >= limit_;
}

uint32_t SharedRing::ready() {
    if (broken_) {
        return 0;
    }
    const uint32_t count = header()->producer.value.load(std::memory_order_acquire) - local_;
    if (count > entries_) {
        broken_ = true;
        return 0;
    }
    return count;
}

void SharedRing::publish() {
    queues::RingIndex& ours = side_ == Side::kProducer ? header()->producer : header()->consumer;
    ours.value.store(local_, std::memory_order_release);
}

uint32_t SharedRing::discard(const std::function<bool(const std::byte* entry)>& drop) {
    const uint32_t count = ready();
    std::vector<std::byte> kept;
    for (uint32_t i = 0; i < count; ++i) {
        const std::byte* entry = slot_at(local_ + i);
        if (!drop(entry)) {
            kept.insert(kept.end(), entry, entry + entry_size_);
        }
    }
    const auto kept_count = static_cast<uint32_t>(kept.size() / entry_size_);
    const uint32_t first = local_ + count - kept_count;
    for (uint32_t i = 0; i < kept_count; ++i) {
        memcpy(slot_at(first + i), kept.data() + size_t{i} * entry_size_, entry_size_);
    }
    local_ = first;
    publish();
    return count - kept_count;
}

int map_work_queue(int fd, const rpc::RingShape& shape, uint32_t wqe_size, uint32_t max_wr,
                   SharedRing& out) {
    if (shape.entry_size < wqe_size) {
        return EPROTO;  // a WQE at its limits would overrun its slot
    }
    SharedRing ring;
    if (int error = SharedRing::map(fd, shape.entries, shape.entry_size, 0,
                                    SharedRing::Side::kProducer, ring)) {
        return error;
    }
    ring.set_limit(max_wr);
    out = std::move(ring);
    return 0;
}

ProviderDoorbell::ProviderDoorbell(ProviderDoorbell&& other) noexcept {
    *this = std::move(other);
}

ProviderDoorbell& ProviderDoorbell::operator=(ProviderDoorbell&& other) noexcept {
    if (this != &other) {
        close();
        eventfd_ = std::exchange(other.eventfd_, -1);
        page_ = std::exchange(other.page_, nullptr);
        bits_ = std::exchange(other.bits_, nullptr);
    }
    return *this;
}

ProviderDoorbell::~ProviderDoorbell() {
    close();
}

void ProviderDoorbell::close() {
    if (page_) {
        munmap(const_cast<queues::DoorbellPage*>(page_), queues::kDoorbellPageBytes);
        page_ = nullptr;
    }
    if (bits_) {
        munmap(bits_, sizeof(*bits_));
        bits_ = nullptr;
    }
    if (eventfd_ >= 0) {
        ::close(eventfd_);
        eventfd_ = -1;
    }
}

int ProviderDoorbell::open(int eventfd, int page_fd, ProviderDoorbell& out) {
    if (int error = check_size(page_fd, queues::kDoorbellBytes)) {
        return error;
    }
    void* page = mmap(nullptr, queues::kDoorbellPageBytes, PROT_READ, MAP_SHARED, page_fd, 0);
    if (page == MAP_FAILED) {
        return errno;
    }
    void* bits = mmap(nullptr, sizeof(queues::DoorbellBits), PROT_READ | PROT_WRITE, MAP_SHARED,
                      page_fd, queues::kDoorbellPageBytes);
    if (bits == MAP_FAILED) {
        const int error = errno;
        munmap(page, queues::kDoorbellPageBytes);
        return error;
    }
    out = ProviderDoorbell();
    out.eventfd_ = eventfd;
    out.page_ = static_cast<const queues::DoorbellPage*>(page);
    out.bits_ = static_cast<queues::DoorbellBits*>(bits);
    return 0;
}

void ProviderDoorbell::ring(uint32_t slot) const {
    // Pairs with the daemon's clearing of the bits and its store of
    // daemon_sleeping: either it sees our entries (now or on its next
    // turn) or we see it going to sleep.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (slot < queues::kDoorbellSlots) {
        queues::mark_posted(*bits_, slot);
    }
    // The engine that owns the slot's range (any engine: no slot).
    const uint32_t per_engine = page_->slots_per_engine.load(std::memory_order_relaxed);
    const uint32_t mask =
        slot < queues::kDoorbellSlots && per_engine ? 1u << (slot / per_engine) : ~0u;
    if (page_->daemon_sleeping.load() & mask) {
        const uint64_t one = 1;
        // A saturated counter (EAGAIN) has the daemon woken anyway.
        [[maybe_unused]] const ssize_t written = write(eventfd_, &one, sizeof(one));
    }
}

ReceivedFds::~ReceivedFds() {
    for (int fd : fds) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
}

int ReceivedFds::take(size_t i) {
    return std::exchange(fds[i], -1);
}

}  // namespace uroce
