// The provider's end of the queues it shares with uroced (see
// protocol/queues.h): producer of send and receive queues, consumer of
// completion queues, and the doorbell that wakes the daemon.
//
// Nothing here makes a system call after mapping. What the daemon wrote is
// checked for sanity once, when a ring is mapped; afterwards slot positions
// come from our own index, so a bad index from the daemon can make a queue
// look full or broken but never makes us touch memory outside the mapping.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <mutex>
#include <vector>

#include "protocol/messages.h"
#include "protocol/queues.h"

namespace uroce {

// One ring, mapped. Not thread-safe: the queue's lock serialises callers.
// Everything below map() but mapped() needs a mapped ring.
class SharedRing {
  public:
    enum class Side { kProducer, kConsumer };

    SharedRing() = default;
    SharedRing(SharedRing&& other) noexcept;
    SharedRing& operator=(SharedRing&& other) noexcept;
    SharedRing(const SharedRing&) = delete;
    SharedRing& operator=(const SharedRing&) = delete;
    ~SharedRing();

    // Maps the ring the daemon sent as `fd`, with the shape its reply gave:
    // `entries` slots of `entry_size` bytes, then `extra` bytes. We continue
    // from our side's index in the header. The fd is not kept. Returns 0,
    // EPROTO when the memory does not hold such a ring, or mmap's errno.
    static int map(int fd, uint32_t entries, uint32_t entry_size, size_t extra, Side side,
                   SharedRing& out);

    bool mapped() const { return base_ != nullptr; }
    uint32_t entries() const { return entries_; }
    uint32_t entry_size() const { return entry_size_; }
    // Our own index: what we have produced or consumed.
    uint32_t index() const { return local_; }
    // The bytes after the slots.
    void* extra() const { return base_ + queues::kRingHeaderSize + size_t{entries_} * entry_size_; }

    // Producer side. At most `limit` entries outstanding (a queue's
    // advertised depth; the ring's size when never set).
    void set_limit(uint32_t limit) { limit_ = limit < entries_ ? limit : entries_; }
    bool full() const;
    uint32_t limit() const { return limit_; }

    // Consumer side. Entries published and not consumed yet: 0, and broken(),
    // once the producer index claims more than the ring holds.
    uint32_t ready();
    bool broken() const { return broken_; }

    // The slot at our index: the next to fill or to read.
    std::byte* slot() const { return slot_at(local_); }
    // Moves past that slot; the daemon sees it after publish().
    void advance() { ++local_; }
    // Producer side: forgets the slots filled since `index`, not yet published.
    void rewind(uint32_t index) { local_ = index; }
    // Release-stores our index for the daemon.
    void publish();
    // A send queue in check mode (queues::RingHeader): the words the
    // provider and the daemon write.
    queues::RingHeader* check_words() const { return mapped() ? header() : nullptr; }

    // Consumer side: removes the published entries `drop` picks, keeping the
    // others in order (they move up to the newest slots, which are still
    // ours to read: the producer writes only past them), and publishes.
    // Returns how many went.
    uint32_t discard(const std::function<bool(const std::byte* entry)>& drop);

  private:
    queues::RingHeader* header() const { return reinterpret_cast<queues::RingHeader*>(base_); }
    std::byte* slot_at(uint32_t index) const {
        return base_ + queues::kRingHeaderSize + size_t{index & (entries_ - 1)} * entry_size_;
    }
    void unmap();

    std::byte* base_ = nullptr;
    size_t bytes_ = 0;
    uint32_t entries_ = 0;
    uint32_t entry_size_ = 0;
    uint32_t local_ = 0;  // never read back from shared memory
    uint32_t limit_ = 0;
    Side side_ = Side::kProducer;
    bool broken_ = false;
};

// A send or receive queue, one per cache line so that posting sends and
// receives from different threads does not bounce one line between them.
struct alignas(queues::kCacheLine) WorkQueue {
    std::mutex lock;  // serialises producers
    SharedRing ring;
    uint32_t max_sge = 0;
    uint32_t max_inline = 0;  // send queues
    // A QP's queues: its slot in the doorbell bits (queues::DoorbellBits).
    uint32_t doorbell_slot = queues::kNoDoorbellSlot;
};

// Maps a work queue the daemon sent with `shape` (from a create or modify
// reply) whose WQEs need `wqe_size` bytes, to hold at most `max_wr` of them.
int map_work_queue(int fd, const rpc::RingShape& shape, uint32_t wqe_size, uint32_t max_wr,
                   SharedRing& out);

// The daemon's doorbell: its eventfd, and the page where it says it is about
// to sleep (mapped read-only).
class ProviderDoorbell {
  public:
    ProviderDoorbell() = default;
    ProviderDoorbell(ProviderDoorbell&& other) noexcept;
    ProviderDoorbell& operator=(ProviderDoorbell&& other) noexcept;
    ProviderDoorbell(const ProviderDoorbell&) = delete;
    ProviderDoorbell& operator=(const ProviderDoorbell&) = delete;
    ~ProviderDoorbell();

    // Keeps `eventfd` on success (the page fd is not kept). 0 or an errno.
    static int open(int eventfd, int page_fd, ProviderDoorbell& out);

    // After publishing entries on a queue of doorbell slot `slot` (a QP's;
    // kNoDoorbellSlot for an SRQ's or a WQ's): sets the slot's bit, and
    // wakes the daemon if it is going to sleep.
    void ring(uint32_t slot) const;
    // Whether some CQ of the daemon holds completions its program has not
    // taken yet (queues::DoorbellPage).
    bool completions_waiting() const {
        return page_->completions_waiting.load(std::memory_order_relaxed);
    }

  private:
    void close();

    int eventfd_ = -1;
    const queues::DoorbellPage* page_ = nullptr;  // the daemon's, read-only
    queues::DoorbellBits* bits_ = nullptr;
};

// Descriptors that came with a reply. Mappings outlive their descriptors, so
// every one is closed when this goes, except those taken.
struct ReceivedFds {
    ReceivedFds() = default;
    ReceivedFds(const ReceivedFds&) = delete;
    ReceivedFds& operator=(const ReceivedFds&) = delete;
    ~ReceivedFds();
    int take(size_t i);

    std::vector<int> fds;
};

}  // namespace uroce
