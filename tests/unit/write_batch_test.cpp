// The responder's gathered writes into application memory, made with real
// process_vm_writev calls into this test's own memory (and a process that
// is gone): writes land in order, a full batch refuses more, and a write
// that fails is reported alone while the others still land.
#include "memory/write_batch.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>
#include <vector>

namespace uroce {
namespace {

Segment segment_of(const void* p, size_t length) {
    return {reinterpret_cast<uintptr_t>(p), length};
}

std::vector<std::byte> filled(size_t length, uint8_t value) {
    return std::vector<std::byte>(length, std::byte{value});
}

using Failures = std::vector<std::pair<uint64_t, int>>;

Failures flush(WriteBatch& batch) {
    Failures failures;
    batch.flush([&](uint64_t tag, int error) { failures.emplace_back(tag, error); });
    return failures;
}

TEST(WriteBatchTest, WritesLandInOrderOverTheirSegmentsAndNotBeforeTheFlush) {
    std::vector<std::byte> memory = filled(64, 0);
    WriteBatch batch;
    // Eight bytes over two segments, then a later write over part of them.
    const Segment split[] = {segment_of(&memory[0], 4), segment_of(&memory[32], 4)};
    ASSERT_TRUE(batch.add(getpid(), 1, filled(8, 0xaa), split));
    const Segment part[] = {segment_of(&memory[32], 2)};
    ASSERT_TRUE(batch.add(getpid(), 2, filled(2, 0xbb), part));
    const Segment tail[] = {segment_of(&memory[60], 4)};
    ASSERT_TRUE(batch.add(getpid(), 3, filled(4, 0xcc), tail));
    EXPECT_EQ(batch.size(), 3u);
    EXPECT_EQ(memory[0], std::byte{0}) << "written before the flush";

    EXPECT_TRUE(flush(batch).empty());
    EXPECT_TRUE(batch.empty());
    std::vector<std::byte> expected = filled(64, 0);
    for (size_t i : {0, 1, 2, 3, 34, 35}) {
        expected[i] = std::byte{0xaa};
    }
    expected[32] = expected[33] = std::byte{0xbb};  // the later write wins
    for (size_t i = 60; i < 64; ++i) {
        expected[i] = std::byte{0xcc};
    }
    EXPECT_EQ(memory, expected);
}

TEST(WriteBatchTest, AFullBatchRefusesMoreUntilItIsFlushed) {
    std::vector<std::byte> memory = filled(WriteBatch::kMaxBytes, 0);
    WriteBatch batch;
    const Segment one[] = {segment_of(memory.data(), 1)};
    for (size_t i = 0; i < WriteBatch::kMaxWrites; ++i) {
        ASSERT_TRUE(batch.add(getpid(), i, filled(1, 1), one));
    }
    EXPECT_FALSE(batch.add(getpid(), 99, filled(1, 2), one)) << "more writes than the bound";
    EXPECT_TRUE(flush(batch).empty());

    const Segment all[] = {segment_of(memory.data(), memory.size())};
    ASSERT_TRUE(batch.add(getpid(), 1, filled(memory.size(), 3), all));
    EXPECT_FALSE(batch.add(getpid(), 2, filled(1, 4), one)) << "more bytes than the bound";
    EXPECT_TRUE(flush(batch).empty());
    EXPECT_EQ(memory, filled(memory.size(), 3));
    EXPECT_TRUE(batch.add(getpid(), 3, filled(1, 5), one));
}

// A lent write is made from the caller's bytes as they are at the flush
// (not copied when added), in order with the copied writes around it, and
// takes none of the batch's bytes.
TEST(WriteBatchTest, LentBytesAreWrittenFromWhereTheyAreAtTheFlush) {
    std::vector<std::byte> memory = filled(24, 0);
    std::vector<std::byte> lent = filled(8, 0x44);
    std::vector<std::byte> big = filled(WriteBatch::kMaxBytes, 0x55);
    std::vector<std::byte> far = filled(WriteBatch::kMaxBytes, 0);
    WriteBatch batch;
    const Segment head[] = {segment_of(&memory[0], 4)};
    const Segment middle[] = {segment_of(&memory[4], 4), segment_of(&memory[16], 4)};
    const Segment over[] = {segment_of(&memory[6], 2)};
    const Segment all_far[] = {segment_of(far.data(), far.size())};
    ASSERT_TRUE(batch.add(getpid(), 1, filled(4, 0x11), head));
    ASSERT_TRUE(batch.add(getpid(), 2, lent, middle, true));
    ASSERT_TRUE(batch.add(getpid(), 3, filled(2, 0x22), over));
    ASSERT_TRUE(batch.add(getpid(), 4, big, all_far, true)) << "lent bytes counted as copied";
    lent[0] = std::byte{0x66};  // changed before the flush: the write has it
    EXPECT_TRUE(flush(batch).empty());
    std::vector<std::byte> expected = filled(24, 0);
    for (size_t i = 0; i < 4; ++i) {
        expected[i] = std::byte{0x11};
        expected[4 + i] = expected[16 + i] = std::byte{0x44};
    }
    expected[4] = std::byte{0x66};
    expected[6] = expected[7] = std::byte{0x22};  // the later write wins
    EXPECT_EQ(memory, expected);
    EXPECT_EQ(far, big);
}

TEST(WriteBatchTest, AWriteThatFailsIsReportedAloneAndTheOthersLand) {
    // A page no access reaches, kept mapped so that nothing else lands there.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* hole = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    // A process that has exited and been reaped.
    const pid_t gone = fork();
    if (gone == 0) {
        _exit(0);
    }
    ASSERT_GT(gone, 0);
    ASSERT_EQ(waitpid(gone, nullptr, 0), gone);

    std::vector<std::byte> memory = filled(16, 0);
    const Segment first[] = {segment_of(&memory[0], 4)};
    const Segment unmapped[] = {segment_of(hole, 4)};
    const Segment second[] = {segment_of(&memory[8], 4)};
    const Segment first_byte[] = {segment_of(&memory[0], 1)};
    WriteBatch batch;
    ASSERT_TRUE(batch.add(getpid(), 10, filled(4, 0x11), first));
    ASSERT_TRUE(batch.add(getpid(), 11, filled(4, 0x22), unmapped));
    ASSERT_TRUE(batch.add(getpid(), 12, filled(4, 0x33), second));
    ASSERT_TRUE(batch.add(gone, 13, filled(4, 0x44), first));
    ASSERT_TRUE(batch.add(getpid(), 14, filled(4, 0x55), second));

    // The callback may queue again: the batch is empty when it runs.
    size_t queued_in_callback = 0;
    Failures failures;
    batch.flush([&](uint64_t tag, int error) {
        failures.emplace_back(tag, error);
        queued_in_callback +=
            batch.empty() && batch.add(getpid(), 20, filled(1, 0x66), std::span(first_byte));
    });
    EXPECT_EQ(failures, (Failures{{11, EFAULT}, {13, ESRCH}}));
    EXPECT_EQ(queued_in_callback, 1u);
    std::vector<std::byte> expected = filled(16, 0);
    for (size_t i = 0; i < 4; ++i) {
        expected[i] = std::byte{0x11};
        expected[8 + i] = std::byte{0x55};
    }
    EXPECT_EQ(memory, expected);
    EXPECT_TRUE(flush(batch).empty());
    EXPECT_EQ(memory[0], std::byte{0x66});
    munmap(hole, page);
}

}  // namespace
}  // namespace uroce
