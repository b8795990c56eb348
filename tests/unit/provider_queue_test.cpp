// The provider's end of the shared rings against the daemon's end
// (uroce::Ring), in one process over real memfds.
#include "queue.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "device/device.h"
#include "objects/objects.h"
#include "queues/doorbell.h"
#include "queues/ring.h"

namespace uroce {
namespace {

using Side = SharedRing::Side;

constexpr uint32_t kEntrySize = 64;

Ring daemon_ring(uint32_t entries, size_t extra = 0) {
    Ring ring;
    EXPECT_TRUE(Ring::create("provider-queue-test", entries, kEntrySize, extra, ring));
    return ring;
}

SharedRing provider_ring(const Ring& ring, Side side, size_t extra = 0) {
    SharedRing mapped;
    EXPECT_EQ(SharedRing::map(ring.fd(), ring.entries(), ring.entry_size(), extra, side, mapped),
              0);
    return mapped;
}

// A ring's header as a misbehaving peer would write it.
class RawHeader {
  public:
    explicit RawHeader(const Ring& ring)
        : header_(static_cast<queues::RingHeader*>(mmap(nullptr, queues::kRingHeaderSize,
                                                        PROT_READ | PROT_WRITE, MAP_SHARED,
                                                        ring.fd(), 0))) {}
    ~RawHeader() { munmap(header_, queues::kRingHeaderSize); }
    queues::RingHeader* operator->() const { return header_; }

  private:
    queues::RingHeader* header_;
};

// Entries carry a number in their first bytes.
void produce(SharedRing& ring, uint64_t value) {
    ASSERT_FALSE(ring.full());
    memcpy(ring.slot(), &value, sizeof(value));
    ring.advance();
    ring.publish();
}

uint64_t consume(SharedRing& ring) {
    uint64_t value;
    memcpy(&value, ring.slot(), sizeof(value));
    ring.advance();
    ring.publish();
    return value;
}

void push(Ring& ring, uint64_t value) {
    std::byte entry[kEntrySize]{};
    memcpy(entry, &value, sizeof(value));
    ASSERT_TRUE(ring.push(entry));
}

uint64_t pop(Ring& ring) {
    std::byte entry[kEntrySize];
    ring.pop(entry);
    uint64_t value;
    memcpy(&value, entry, sizeof(value));
    return value;
}

TEST(ProviderQueue, MapsOnlyTheShapeTheReplyGave) {
    Ring ring = daemon_ring(8);
    SharedRing mapped;
    EXPECT_EQ(SharedRing::map(ring.fd(), 4, kEntrySize, 0, Side::kProducer, mapped), EPROTO);
    EXPECT_EQ(SharedRing::map(ring.fd(), 6, kEntrySize, 0, Side::kProducer, mapped), EPROTO);
    EXPECT_EQ(SharedRing::map(ring.fd(), 0, kEntrySize, 0, Side::kProducer, mapped), EPROTO);
    EXPECT_EQ(SharedRing::map(ring.fd(), 8, kEntrySize / 2, 0, Side::kProducer, mapped), EPROTO);
    // More than the memfd holds: mapping it would fault on the last slots.
    EXPECT_EQ(SharedRing::map(ring.fd(), 8, kEntrySize, 1 << 20, Side::kProducer, mapped), EPROTO);
    EXPECT_FALSE(mapped.mapped());
    EXPECT_EQ(SharedRing::map(ring.fd(), 8, kEntrySize, 0, Side::kProducer, mapped), 0);
    EXPECT_TRUE(mapped.mapped());
    EXPECT_EQ(mapped.entries(), 8u);
}

TEST(ProviderQueue, CqStateIsWhereTheDaemonLooks) {
    Ring ring = daemon_ring(8, sizeof(queues::CqState));
    SharedRing cq = provider_ring(ring, Side::kConsumer, sizeof(queues::CqState));
    static_cast<queues::CqState*>(cq.extra())->arm.store(queues::kCqArmedAny);
    EXPECT_EQ(static_cast<queues::CqState*>(ring.extra())->arm.load(), queues::kCqArmedAny);
    std::byte first[kEntrySize];
    ring.peek(first);
    EXPECT_EQ(std::count(first, first + kEntrySize, std::byte{0}), kEntrySize);
}

TEST(ProviderQueue, RefusesAHeaderClaimingMoreThanTheRingHolds) {
    Ring ring = daemon_ring(8);
    RawHeader(ring)->producer.value.store(9);
    SharedRing again;
    EXPECT_EQ(SharedRing::map(ring.fd(), 8, kEntrySize, 0, Side::kConsumer, again), EPROTO);
}

TEST(ProviderQueue, WorkQueueNeedsRoomForItsLargestWqe) {
    Ring ring = daemon_ring(8);
    SharedRing mapped;
    EXPECT_EQ(map_work_queue(ring.fd(), {8, kEntrySize}, kEntrySize + 1, 8, mapped), EPROTO);
    EXPECT_EQ(map_work_queue(ring.fd(), {8, kEntrySize}, kEntrySize, 5, mapped), 0);
    for (uint64_t i = 0; i < 5; ++i) {
        produce(mapped, i);
    }
    EXPECT_TRUE(mapped.full());  // the advertised depth, not the ring's size
}

TEST(ProviderQueue, ProducesToTheDaemonAcrossRingWrapAround) {
    Ring ring = daemon_ring(4);
    SharedRing sq = provider_ring(ring, Side::kProducer);
    uint64_t sent = 0;
    uint64_t received = 0;
    for (int round = 0; round < 25; ++round) {
        for (int i = 0; i < 3; ++i) {
            produce(sq, sent++);
        }
        ASSERT_EQ(ring.pending(), 3u);
        while (ring.pending()) {
            ASSERT_EQ(pop(ring), received++);
        }
    }
    EXPECT_EQ(received, 75u);
    EXPECT_FALSE(ring.broken());
}

TEST(ProviderQueue, ConsumesFromTheDaemonAcrossRingWrapAround) {
    Ring ring = daemon_ring(4);
    SharedRing cq = provider_ring(ring, Side::kConsumer);
    uint64_t sent = 0;
    uint64_t received = 0;
    for (int round = 0; round < 25; ++round) {
        for (int i = 0; i < 3; ++i) {
            push(ring, sent++);
        }
        ASSERT_EQ(cq.ready(), 3u);
        for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(consume(cq), received++);
        }
        ASSERT_EQ(cq.ready(), 0u);
    }
    EXPECT_FALSE(cq.broken());
}

TEST(ProviderQueue, FullAndEmpty) {
    Ring ring = daemon_ring(4);
    SharedRing sq = provider_ring(ring, Side::kProducer);
    EXPECT_EQ(ring.pending(), 0u);
    for (uint64_t i = 0; i < 4; ++i) {
        produce(sq, i);
    }
    EXPECT_TRUE(sq.full());
    EXPECT_EQ(ring.pending(), 4u);
    EXPECT_EQ(pop(ring), 0u);
    EXPECT_FALSE(sq.full());  // a slot is free once the daemon has taken its entry
    produce(sq, 4);
    EXPECT_TRUE(sq.full());

    Ring completions = daemon_ring(4);
    SharedRing cq = provider_ring(completions, Side::kConsumer);
    EXPECT_EQ(cq.ready(), 0u);
    for (uint64_t i = 0; i < 4; ++i) {
        push(completions, i);
    }
    std::byte entry[kEntrySize]{};
    EXPECT_FALSE(completions.push(entry));  // the daemon sees the ring full too
    EXPECT_EQ(cq.ready(), 4u);
    consume(cq);
    EXPECT_TRUE(completions.push(entry));
}

// The daemon's Ring always starts at index 0, so this plays the daemon by
// hand to take the provider's indexes across 2^32.
TEST(ProviderQueue, IndexesWrapAt32Bits) {
    Ring ring = daemon_ring(8);
    {
        RawHeader raw(ring);
        raw->producer.value.store(0xfffffffa);
        raw->consumer.value.store(0xfffffffa);
    }
    SharedRing sq = provider_ring(ring, Side::kProducer);
    SharedRing daemon = provider_ring(ring, Side::kConsumer);  // reads what sq writes
    ASSERT_EQ(sq.index(), 0xfffffffau);
    uint64_t received = 0;
    for (uint64_t i = 0; i < 20; ++i) {
        produce(sq, i);
        if (i % 2) {
            ASSERT_EQ(daemon.ready(), 2u);
            ASSERT_EQ(consume(daemon), received++);
            ASSERT_EQ(consume(daemon), received++);
        }
    }
    EXPECT_EQ(sq.index(), 0xfffffffau + 20);  // wrapped
    EXPECT_EQ(received, 20u);
    for (uint64_t i = 0; i < 8; ++i) {
        produce(sq, i);
    }
    EXPECT_TRUE(sq.full());
    EXPECT_EQ(daemon.ready(), 8u);
    EXPECT_FALSE(daemon.broken());
}

// resize_cq: the daemon copies what we have not consumed into a new ring and
// we start again at 0 there.
TEST(ProviderQueue, CompletionsSurviveTheMoveToANewRing) {
    Ring old_ring = daemon_ring(4, sizeof(queues::CqState));
    SharedRing cq = provider_ring(old_ring, Side::kConsumer, sizeof(queues::CqState));
    for (uint64_t i = 0; i < 4; ++i) {
        push(old_ring, i);
    }
    ASSERT_EQ(consume(cq), 0u);
    Ring new_ring = daemon_ring(16, sizeof(queues::CqState));
    ASSERT_TRUE(old_ring.move_unconsumed_to(new_ring));
    cq = provider_ring(new_ring, Side::kConsumer, sizeof(queues::CqState));
    EXPECT_EQ(cq.index(), 0u);
    for (uint64_t i = 4; i < 10; ++i) {
        push(new_ring, i);
    }
    ASSERT_EQ(cq.ready(), 9u);
    for (uint64_t i = 1; i < 10; ++i) {
        EXPECT_EQ(consume(cq), i);
    }
    EXPECT_EQ(cq.ready(), 0u);
}

// modify_srq: the daemon moves the WQEs it has not taken to a larger ring and
// we continue from the producer index in its header.
TEST(ProviderQueue, ReceivesSurviveTheMoveToALargerRing) {
    Ring old_ring = daemon_ring(8);
    SharedRing srq = provider_ring(old_ring, Side::kProducer);
    for (uint64_t i = 0; i < 5; ++i) {
        produce(srq, i);
    }
    ASSERT_EQ(pop(old_ring), 0u);
    ASSERT_EQ(pop(old_ring), 1u);
    Ring new_ring = daemon_ring(16);
    ASSERT_TRUE(old_ring.move_pending_to(new_ring));
    srq = provider_ring(new_ring, Side::kProducer);
    EXPECT_EQ(srq.index(), 3u);
    for (uint64_t i = 5; i < 18; ++i) {
        produce(srq, i);
    }
    EXPECT_TRUE(srq.full());
    ASSERT_EQ(new_ring.pending(), 16u);
    for (uint64_t i = 2; i < 18; ++i) {
        EXPECT_EQ(pop(new_ring), i);
    }
    EXPECT_FALSE(new_ring.broken());
}

TEST(ProviderQueue, ACorruptProducerIndexBreaksTheConsumer) {
    Ring sq_ring = daemon_ring(8);
    SharedRing sq = provider_ring(sq_ring, Side::kProducer);
    produce(sq, 1);
    RawHeader(sq_ring)->producer.value.store(sq.index() + 8);
    EXPECT_EQ(sq_ring.pending(), 0u);
    EXPECT_TRUE(sq_ring.broken());

    Ring cq_ring = daemon_ring(8);
    SharedRing cq = provider_ring(cq_ring, Side::kConsumer);
    push(cq_ring, 1);
    RawHeader(cq_ring)->producer.value.store(cq.index() - 1);  // "behind" us: 2^32 - 1 ready
    EXPECT_EQ(cq.ready(), 0u);
    EXPECT_TRUE(cq.broken());
}

TEST(ProviderQueue, ACorruptConsumerIndexMakesTheProducerFullNotWild) {
    Ring ring = daemon_ring(8);
    SharedRing sq = provider_ring(ring, Side::kProducer);
    RawHeader(ring)->consumer.value.store(12345);
    EXPECT_TRUE(sq.full());
}

TEST(ProviderQueue, DoorbellRingsOnlyWhileTheDaemonSleeps) {
    Doorbell daemon;
    ASSERT_TRUE(Doorbell::create(daemon));
    const int page_fd = dup(daemon.page_fd());
    ProviderDoorbell doorbell;
    ASSERT_EQ(ProviderDoorbell::open(dup(daemon.eventfd()), page_fd, doorbell), 0);
    close(page_fd);  // the mapping outlives it
    uint64_t count = 0;

    doorbell.ring(queues::kNoDoorbellSlot);
    EXPECT_EQ(read(daemon.eventfd(), &count, sizeof(count)), -1);
    EXPECT_EQ(errno, EAGAIN);

    daemon.page().daemon_sleeping.store(1);
    doorbell.ring(queues::kNoDoorbellSlot);
    doorbell.ring(queues::kNoDoorbellSlot);
    ASSERT_EQ(read(daemon.eventfd(), &count, sizeof(count)), ssize_t{sizeof(count)});
    EXPECT_EQ(count, 2u);
}

std::vector<uint32_t> taken(Doorbell& daemon, uint32_t engine = 0) {
    std::vector<uint32_t> slots;
    daemon.take_posted(engine, [&](uint32_t slot) { slots.push_back(slot); });
    return slots;
}

TEST(ProviderQueue, DoorbellBitsSayWhichSlotsWerePostedOnceEach) {
    Doorbell daemon;
    ASSERT_TRUE(Doorbell::create(daemon));
    ProviderDoorbell doorbell;
    ASSERT_EQ(ProviderDoorbell::open(dup(daemon.eventfd()), dup(daemon.page_fd()), doorbell), 0);
    EXPECT_FALSE(daemon.any_posted(0));
    EXPECT_TRUE(taken(daemon).empty());

    // The first, a last and slots that share words with others, posted
    // several times: each is taken once, in order.
    const std::vector<uint32_t> slots = {0, 1, 63, 64, 4095, 4096, queues::kDoorbellSlots - 1};
    for (int round = 0; round < 2; ++round) {
        for (uint32_t slot : slots) {
            doorbell.ring(slot);
        }
    }
    doorbell.ring(queues::kNoDoorbellSlot);  // an SRQ's: no bit
    EXPECT_TRUE(daemon.any_posted(0));
    EXPECT_EQ(taken(daemon), slots);
    EXPECT_FALSE(daemon.any_posted(0));
    EXPECT_TRUE(taken(daemon).empty()) << "a bit is taken once";

    daemon.post(64);  // the daemon's own side, after a control request
    daemon.post(queues::kNoDoorbellSlot);
    EXPECT_EQ(taken(daemon), std::vector<uint32_t>{64});
}

TEST(ProviderQueue, DoorbellSlotsAreReusedAndBounded) {
    Doorbell daemon;
    ASSERT_TRUE(Doorbell::create(daemon));
    Device device({"uroce0", wire::IpAddress::v4(htonl(INADDR_LOOPBACK))}, 0);
    Qp qps[2];
    std::vector<uint32_t> attached;
    for (uint32_t i = 0; i < queues::kDoorbellSlots; ++i) {
        const auto slot = daemon.attach(qps[i % 2], device, 0);
        ASSERT_TRUE(slot.has_value()) << i;
        attached.push_back(*slot);
    }
    EXPECT_FALSE(daemon.attach(qps[0], device, 0).has_value()) << "beyond kDoorbellSlots";
    EXPECT_EQ(daemon.owner(attached[7]).qp, &qps[1]);
    EXPECT_EQ(daemon.owner(attached[7]).device, &device);

    daemon.detach(attached[7]);
    EXPECT_EQ(daemon.owner(attached[7]).qp, nullptr) << "a posted bit of a gone QP finds nobody";
    daemon.detach(attached[7]);  // twice: nothing
    EXPECT_EQ(daemon.attach(qps[0], device, 0), attached[7]);
    EXPECT_FALSE(daemon.attach(qps[0], device, 0).has_value());
    EXPECT_EQ(daemon.owner(queues::kNoDoorbellSlot).qp, nullptr);
}

// With several engine threads, each has its range of slots: it takes only
// its own bits, and a client rings only when its QP's engine sleeps.
TEST(ProviderQueue, DoorbellRangesPerEngine) {
    Doorbell daemon;
    ASSERT_TRUE(Doorbell::create(daemon, 3));
    const uint32_t per_engine = daemon.slots_per_engine();
    EXPECT_EQ(per_engine % 4096, 0u) << "whole summary words";
    EXPECT_LE(per_engine * 3, queues::kDoorbellSlots);
    EXPECT_EQ(daemon.page().slots_per_engine.load(), per_engine);
    Device device({"uroce0", wire::IpAddress::v4(htonl(INADDR_LOOPBACK))}, 0);
    Qp qp;
    const auto first = daemon.attach(qp, device, 1);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(*first, per_engine);
    EXPECT_EQ(daemon.engine_of(*first), 1u);

    ProviderDoorbell doorbell;
    ASSERT_EQ(ProviderDoorbell::open(dup(daemon.eventfd()), dup(daemon.page_fd()), doorbell), 0);
    doorbell.ring(2 * per_engine + 5);
    doorbell.ring(per_engine);
    EXPECT_FALSE(daemon.any_posted(0));
    EXPECT_EQ(taken(daemon, 1), std::vector<uint32_t>{per_engine});
    EXPECT_EQ(taken(daemon, 2), std::vector<uint32_t>{2 * per_engine + 5});

    uint64_t count = 0;
    daemon.page().daemon_sleeping.store(1u << 2);  // engine 2 sleeps
    doorbell.ring(per_engine);                     // engine 1's QP
    EXPECT_EQ(read(daemon.eventfd(), &count, sizeof(count)), -1) << "engine 1 is awake";
    doorbell.ring(2 * per_engine);
    EXPECT_EQ(read(daemon.eventfd(), &count, sizeof(count)), ssize_t{sizeof(count)});

    Doorbell too_many;
    EXPECT_EQ(Doorbell::create(too_many, queues::kMaxEngines + 1).error, EINVAL);
}

TEST(ProviderQueue, ReceivedFdsClosesWhatIsNotTaken) {
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    int kept;
    {
        ReceivedFds received;
        received.fds = {pipe_fds[0], pipe_fds[1]};
        kept = received.take(1);
    }
    EXPECT_EQ(fcntl(pipe_fds[0], F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
    EXPECT_EQ(kept, pipe_fds[1]);
    EXPECT_EQ(close(kept), 0);
}

}  // namespace
}  // namespace uroce
