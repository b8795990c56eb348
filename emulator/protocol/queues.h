// The work and completion queues that the provider and uroced share.
//
// Each queue is a single-producer single-consumer ring in a memfd the daemon
// creates, seals against resizing and hands to the provider. The provider
// produces send and receive WQEs and consumes CQEs; the daemon does the
// opposite. Indexes run freely and wrap at 2^32; slot = index & (entries-1).
//
// The daemon never trusts what it reads here: it copies an entry out before
// looking at it, and treats indexes that claim more than `entries` pending
// entries as a broken queue.
#pragma once

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <atomic>

namespace uroce::queues {

inline constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) RingIndex {
    std::atomic<uint32_t> value;
};

struct RingHeader {
    RingIndex producer;  // written only by the producer
    RingIndex consumer;  // written only by the consumer
    uint32_t entries;    // a power of two
    uint32_t entry_size;
    // A send queue in check mode (docs/check.md, write-race). The daemon
    // counts its findings about the QP, which the provider then asks for.
    // The provider logs its last kCheckRetireLog retirements (written in
    // turn, check_retires of them so far), each one word: the count of
    // WQEs the program has retired by polling (those whose
    // SendWqe::check_seq is at most it) << 32, and check_clock_us() then.
    std::atomic<uint32_t> check_findings;
    std::atomic<uint32_t> check_retires;
    std::atomic<uint64_t> check_retired[4];
};
inline constexpr uint32_t kCheckRetireLog = 4;
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline constexpr size_t kRingHeaderSize = 3 * kCacheLine;
static_assert(sizeof(RingHeader) <= kRingHeaderSize);

// Bytes of memory for a ring, header included.
constexpr size_t ring_bytes(uint32_t entries, uint32_t entry_size) {
    return kRingHeaderSize + size_t{entries} * entry_size;
}

// A send WQE: fixed part, then num_sge ibv_sge or inline_length bytes.
struct SendWqe {
    uint64_t wr_id;
    uint32_t opcode;  // enum ibv_wr_opcode
    uint32_t send_flags;
    uint32_t num_sge;
    // With IBV_SEND_INLINE: bytes of data after the fixed part. Without: the
    // message's bytes copied after the gather list at post time (0: none).
    uint32_t inline_length;
    uint32_t imm_data;  // network order; or the rkey to invalidate
    uint32_t rkey;      // RDMA and atomic: remote key
    uint64_t remote_addr;
    uint64_t compare_add;
    uint64_t swap;
    uint32_t ah;  // UD: the address handle's daemon handle
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint32_t remote_srqn;  // XRC
    // IBV_WR_BIND_MW: the window by an rkey of it (`rkey` is its next),
    // and the range of the MR it opens (length 0: a type 1 window unbinds).
    uint32_t mw_rkey;
    uint32_t bind_lkey;
    uint64_t bind_addr;
    uint64_t bind_length;
    uint32_t bind_access;
    // Check mode: 1 + the WQE's number among the QP's sends (0: not
    // checked), and check_clock_us() when it was posted.
    uint32_t check_seq;
    uint32_t check_posted_us;
};
inline constexpr size_t kSendWqeFixed = 112;

// Check mode's clock: CLOCK_MONOTONIC in microseconds, wrapping at 2^32
// (71 minutes): what the provider and the daemon compare are moments a
// few seconds apart at most.
inline uint32_t check_clock_us() {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<uint32_t>(static_cast<uint64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000);
}
static_assert(sizeof(SendWqe) <= kSendWqeFixed);

struct RecvWqe {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t reserved;
};
inline constexpr size_t kRecvWqeFixed = 16;
static_assert(sizeof(RecvWqe) == kRecvWqeFixed);

// The device clock is CLOCK_MONOTONIC counted in ns: it ticks at 1 GHz
// (hca_core_clock, in kHz) and never wraps in practice (a 64-bit mask).
inline constexpr uint64_t kDeviceClockKhz = 1000000;

inline uint64_t clock_ns(clockid_t clock) {
    timespec now;
    clock_gettime(clock, &now);
    return uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
}

// A CQE is the ibv_wc the application will see, padded to a cache line.
// timestamp: the device clock, wallclock_ns: CLOCK_REALTIME, both read when
// the completion was added.
// A completion. A small received message may come in it (data_length
// bytes after the Cqe, in the same slot): the provider copies them to
// data_addr, in its own process, before the application sees the
// completion, which saves the daemon a process_vm_writev per message (as
// mlx5's scatter to CQE). The buffer's contents are undefined until then.
struct Cqe {
    ibv_wc wc;
    uint64_t timestamp;
    uint64_t wallclock_ns;
    uint64_t data_addr;
    uint32_t data_length;  // 0: the daemon wrote the data itself
    uint32_t reserved;
};
inline constexpr size_t kCqeSize = 256;
inline constexpr size_t kCqeDataBytes = kCqeSize - sizeof(Cqe);

// Armed by ibv_req_notify_cq, disarmed by the daemon when it signals.
enum CqArm : uint32_t { kCqDisarmed = 0, kCqArmedSolicited = 1, kCqArmedAny = 2 };

// Bytes after a CQ ring's entries: its notification state.
struct CqState {
    std::atomic<uint32_t> arm;
};

// The doorbell: one memfd per daemon, mapped by every client. Its first
// page (DoorbellPage) only the daemon writes; clients map it read-only.
// After producing entries, a client writes the doorbell eventfd only when
// the daemon has said it is about to sleep. While some CQ holds completions
// its program has not taken, completions_waiting is 1, and a poller that
// finds its own CQ empty gives its CPU away: on a machine with fewer cores
// than spinning programs, the program those completions wait for may need it.
// A daemon with several engine threads gives each a range of
// slots_per_engine slots; bit E of daemon_sleeping (and of
// completions_waiting) is engine E's, and a client rings when the engine of
// its QP's slot (slot / slots_per_engine) sleeps.
struct DoorbellPage {
    alignas(kCacheLine) std::atomic<uint32_t> daemon_sleeping;
    std::atomic<uint32_t> completions_waiting;
    std::atomic<uint32_t> slots_per_engine;
};
inline constexpr uint32_t kMaxEngines = 32;  // the bits of daemon_sleeping
inline constexpr size_t kDoorbellPageBytes = 4096;
static_assert(sizeof(DoorbellPage) <= kDoorbellPageBytes);

// Then the doorbell bits (DoorbellBits), which clients write: every QP of
// the daemon has a slot, and a client that published entries on one of its
// queues sets the slot's bit, so that the daemon looks at the QPs posted to
// rather than at every QP's queues (a page of each) on every turn. Bit w of
// `summary` says that posted[w] may have bits set. A bit set for nothing
// costs the daemon one look.
inline constexpr uint32_t kDoorbellSlots = 1u << 18;
inline constexpr uint32_t kNoDoorbellSlot = ~0u;
struct DoorbellBits {
    std::atomic<uint64_t> summary[kDoorbellSlots / 64 / 64];
    alignas(kCacheLine) std::atomic<uint64_t> posted[kDoorbellSlots / 64];
};
inline constexpr size_t kDoorbellBytes = kDoorbellPageBytes + sizeof(DoorbellBits);

// Sets slot `slot`'s bit. The entries must be published, and a seq_cst
// fence passed, before: the daemon clears a word, fences, then looks at its
// QPs, so either it sees the entries or the bit stays set for its next turn.
// The bits are set in seq_cst order, as the daemon reads them before it
// sleeps (DoorbellPage::daemon_sleeping).
inline void mark_posted(DoorbellBits& bits, uint32_t slot) {
    const uint32_t word = slot / 64;
    const uint64_t bit = uint64_t{1} << (slot % 64);
    if (!(bits.posted[word].load(std::memory_order_relaxed) & bit)) {
        bits.posted[word].fetch_or(bit);
        bits.summary[word / 64].fetch_or(uint64_t{1} << (word % 64));
    }
}

// A message this small is copied into its WQE when posted, after its gather
// list, so that the daemon need not read it from the application (one
// system call per message saved). The daemon still checks the gather list.
inline constexpr size_t kPrefetchBytes = 128;

constexpr uint32_t send_wqe_size(uint32_t max_sge, uint32_t max_inline) {
    const size_t gather = max_sge * sizeof(ibv_sge) + kPrefetchBytes;
    const size_t data = gather > max_inline ? gather : max_inline;
    return static_cast<uint32_t>((kSendWqeFixed + data + kCacheLine - 1) & ~(kCacheLine - 1));
}

constexpr uint32_t recv_wqe_size(uint32_t max_sge) {
    return static_cast<uint32_t>((kRecvWqeFixed + max_sge * sizeof(ibv_sge) + kCacheLine - 1) &
                                 ~(kCacheLine - 1));
}

}  // namespace uroce::queues
