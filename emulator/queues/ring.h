// The daemon's end of a shared ring (see protocol/queues.h): consumer of
// send and receive queues, producer of completion queues.
#pragma once

#include <string.h>

#include <cstddef>
#include <span>

#include "protocol/queues.h"
#include "queues/shared_memory.h"

namespace uroce {

class Ring {
  public:
    Ring() = default;
    // Lays out a ring of `entries` (a power of two) slots of `entry_size`
    // bytes, followed by `extra` bytes for queue-specific state.
    static Result create(const std::string& name, uint32_t entries, uint32_t entry_size,
                         size_t extra, Ring& out);

    uint32_t entries() const { return entries_; }
    uint32_t entry_size() const { return entry_size_; }
    // The memfd until release_fd() hands it over for the client's copy; the
    // daemon then keeps only the mapping.
    int fd() const { return memory_.fd(); }
    UniqueFd release_fd() { return memory_.release_fd(); }
    size_t bytes() const { return memory_.size(); }
    bool broken() const { return broken_; }

    // Consumer side. Number of entries the producer has published; a
    // producer index that claims more than the ring holds marks it broken.
    uint32_t pending();
    // Consumer side: whether an entry is pending. The producer's index is
    // read again only once the entries it showed last have been taken:
    // while the producer is busy, every read of it is a cache miss.
    bool has_pending() { return seen_ != local_ || pending() > 0; }
    // Drops everything pending (a QP reset empties its queues).
    void discard_pending();
    // For observers: pending() without marking the ring broken, and how
    // many entries the consumer has handed back since the ring was made.
    uint32_t waiting() const;
    uint32_t released() const { return released_; }
    // Consumer side: how many entries it has taken since the ring was made
    // (taken() - released() are in its hands).
    uint32_t taken() const { return local_; }
    // Copies the next entry (at most out.size() bytes) and moves past it.
    void pop(std::span<std::byte> out) {
        take(out);
        release(1);
    }
    // Like pop, but the slot stays the consumer's until release(): a send
    // queue holds a WQE until it completes, so max_send_wr bounds the WQEs
    // outstanding, not only those not yet seen.
    void take(std::span<std::byte> out);
    void release(uint32_t count);
    // The next entry without consuming it (copied: the producer may write it).
    void peek(std::span<std::byte> out) const;

    // Consumer side: moves the unconsumed entries into `next`, a new ring the
    // producer continues with. False when they do not fit.
    bool move_pending_to(Ring& next);

    // Producer side. Entries published that the consumer has not taken, and
    // the consumer's index (how many it has taken since the ring was made).
    uint32_t unconsumed() const;
    uint32_t consumed() const { return header()->consumer.value.load(std::memory_order_acquire); }
    // Producer side. False when the ring is full.
    bool push(std::span<const std::byte> entry);
    // Producer side: moves the entries the consumer has not taken yet into
    // `next`, a new ring the consumer continues with from index 0. False when
    // they do not fit.
    bool move_unconsumed_to(Ring& next);

    // The bytes after the slots.
    void* extra() const;

    // A send queue in check mode (queues::RingHeader): the provider's log
    // of its retirements; one more finding about the QP for the provider
    // to ask for.
    uint64_t check_retired(uint32_t i) const {
        return header()->check_retired[i].load(std::memory_order_acquire);
    }
    void add_check_finding() { header()->check_findings.fetch_add(1, std::memory_order_release); }

  private:
    queues::RingHeader* header() const { return static_cast<queues::RingHeader*>(memory_.data()); }
    std::byte* slot(uint32_t index) const;
    // Starts fetching the entry's first lines while the current one is
    // used: the other side wrote them (or read them a lap ago), on another
    // core, and an entry whose lines are still there waits for them to cross.
    static constexpr size_t kPrefetchBytes = 256;
    void prefetch(uint32_t index, bool for_write) const;

    SharedMemory memory_;
    uint32_t entries_ = 0;
    uint32_t entry_size_ = 0;
    uint32_t local_ = 0;     // our own index: never read back from shared memory
    uint32_t released_ = 0;  // consumer side: what the producer may reuse
    uint32_t seen_ = 0;      // consumer side: the producer's index as last read
    uint32_t consumed_ = 0;  // producer side: the consumer's index as last read
    bool broken_ = false;
};

}  // namespace uroce
