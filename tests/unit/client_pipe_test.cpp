// emulator/util/client_pipe: the daemon's end of a pipe a client reads. A
// client can do what it likes with its own descriptor; none of it makes the
// daemon wait, and what does not fit is counted, not hung on.
#include "util/client_pipe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace uroce {
namespace {

using Clock = std::chrono::steady_clock;

// A blocking pipe as the provider makes one: the client keeps `read_end`.
struct Pipe {
    UniqueFd read_end, write_end;
    Pipe() {
        int ends[2];
        EXPECT_EQ(pipe2(ends, O_CLOEXEC), 0);
        read_end.reset(ends[0]);
        write_end.reset(ends[1]);
    }
};

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

TEST(ClientPipe, RefusesWhatIsNotAPipe) {
    ClientPipe pipe;
    const Result r =
        ClientPipe::adopt(UniqueFd(eventfd(0, EFD_CLOEXEC)), false, {"async event pipe", 1}, pipe);
    EXPECT_FALSE(r);
    EXPECT_EQ(r.error, EINVAL);
    EXPECT_NE(r.message.find("not a pipe"), std::string::npos) << r.message;
    EXPECT_EQ(ClientPipe::adopt(UniqueFd(), false, {}, pipe).error, EINVAL);
    EXPECT_FALSE(pipe);
}

// The client closed its end: records are lost (EPIPE; uroced ignores
// SIGPIPE, as this test does), and the daemon goes on.
TEST(ClientPipe, APipeNobodyReadsLosesItsRecords) {
    signal(SIGPIPE, SIG_IGN);
    Pipe p;
    ClientPipe pipe;
    ASSERT_TRUE(ClientPipe::adopt(std::move(p.write_end), false, {"async event pipe", 1}, pipe));
    p.read_end.reset();
    const uint64_t record = 7;
    EXPECT_FALSE(pipe.write_record(&record, sizeof(record)));
    EXPECT_EQ(pipe.lost(), 1u);
}

// The client's descriptor stays blocking, and the client may even make the
// daemon's received copy blocking again: the daemon writes through its own.
TEST(ClientPipe, AFullPipeLosesRecordsInsteadOfBlocking) {
    Pipe p;
    const int kept = dup(p.write_end.get());  // a copy the client keeps of what it sent
    ClientPipe pipe;
    ASSERT_TRUE(ClientPipe::adopt(std::move(p.write_end), false, {"completion channel", 1}, pipe));
    ASSERT_EQ(fcntl(kept, F_SETFL, 0), 0);
    const uint64_t record = 42;
    size_t written = 0;
    const auto start = Clock::now();
    while (pipe.write_record(&record, sizeof(record))) {
        ++written;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_GT(written, 0u);
    EXPECT_EQ(pipe.lost(), 1u);
    EXPECT_FALSE(pipe.write_record(&record, sizeof(record)));
    EXPECT_EQ(pipe.lost(), 2u);
    // Once the client reads (a page's worth: the pipe frees whole pages),
    // records fit again.
    uint64_t got[512] = {};
    ASSERT_EQ(read(p.read_end.get(), got, sizeof(got)), ssize_t(sizeof(got)));
    EXPECT_EQ(got[0], record);
    EXPECT_TRUE(pipe.write_record(&record, sizeof(record)));
    close(kept);
}

// A readiness pipe: the daemon shows and takes back its byte, whatever the
// client took meanwhile.
TEST(ClientPipe, TheDaemonTakesBackWhatTheClientDidNotRead) {
    Pipe p;
    p.write_end.reset();
    ClientPipe pipe;
    ASSERT_TRUE(ClientPipe::adopt(UniqueFd(dup(p.read_end.get())), true, {}, pipe));
    EXPECT_EQ(pipe.queued(), 0u);
    const uint8_t byte = 1;
    ASSERT_TRUE(pipe.write_record(&byte, 1));
    EXPECT_EQ(pipe.queued(), 1u);
    EXPECT_TRUE(readable(p.read_end.get()));
    pipe.drain();
    EXPECT_EQ(pipe.queued(), 0u);
    EXPECT_FALSE(readable(p.read_end.get()));
    // The client reads the byte itself: drain finds nothing, and waits for nothing.
    ASSERT_TRUE(pipe.write_record(&byte, 1));
    uint8_t taken;
    ASSERT_EQ(read(p.read_end.get(), &taken, 1), 1);
    const auto start = Clock::now();
    pipe.drain();
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(pipe.queued(), 0u);
}

// The daemon's pipe outlives nothing: when the daemon lets go, a client
// waiting on its end wakes.
TEST(ClientPipe, AClientWaitingOnItsEndWakesWhenTheDaemonLetsGo) {
    Pipe p;
    p.write_end.reset();
    auto pipe = std::make_unique<ClientPipe>();
    ASSERT_TRUE(ClientPipe::adopt(UniqueFd(dup(p.read_end.get())), true, {}, *pipe));
    pollfd wait{p.read_end.get(), POLLIN, 0};
    EXPECT_EQ(poll(&wait, 1, 0), 0);
    pipe.reset();
    EXPECT_EQ(poll(&wait, 1, 1000), 1);
    EXPECT_TRUE(wait.revents & POLLHUP);
}

// The doorbell: an eventfd every client shares, whose O_NONBLOCK any client can clear.
TEST(ClientPipe, ASharedEventfdIsReadWithoutWaiting) {
    UniqueFd doorbell(eventfd(0, EFD_CLOEXEC));  // blocking, as a client may have left it
    uint64_t value = 0;
    const auto start = Clock::now();
    EXPECT_EQ(read_shared_eventfd(doorbell.get(), value), -1);
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    const uint64_t rung = 3;
    ASSERT_EQ(write(doorbell.get(), &rung, sizeof(rung)), ssize_t(sizeof(rung)));
    EXPECT_EQ(read_shared_eventfd(doorbell.get(), value), ssize_t(sizeof(value)));
    EXPECT_EQ(value, 3u);
}

}  // namespace
}  // namespace uroce
