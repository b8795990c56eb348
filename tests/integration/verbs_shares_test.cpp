// One client (a process) may hold a quarter of each of a device's tables:
// a program that allocates until refused gets the man page's ENOMEM at its
// share, and another program goes on allocating beside it.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "daemon_fixture.h"

namespace uroce::test {
namespace {

constexpr const char* kDevice = "uroce0";
// The daemon's tables ibv_query_device has no field for (device/device.h).
constexpr int kMaxCompChannels = 8192;

// Run by spawn_child: allocates PDs, then completion channels, each until
// refused; prints "pds N errno E channels M errno F" and waits to be killed.
int hog_main(const std::vector<std::string>&) {
    ContextPtr context = open_device(kDevice);
    if (!context) {
        return 1;
    }
    std::vector<ibv_pd*> pds;
    while (ibv_pd* pd = ibv_alloc_pd(context.get())) {
        pds.push_back(pd);
    }
    const int pd_errno = errno;
    std::vector<ibv_comp_channel*> channels;
    while (ibv_comp_channel* channel = ibv_create_comp_channel(context.get())) {
        channels.push_back(channel);
    }
    const int channel_errno = errno;
    printf("pds %zu errno %d channels %zu errno %d\n", pds.size(), pd_errno, channels.size(),
           channel_errno);
    fflush(stdout);
    for (;;) {
        pause();
    }
}

[[maybe_unused]] const bool kHog = register_child("hog", hog_main);

TEST(ClientShares, OneProgramAtItsShareLeavesTheOthersRoom) {
    ContextPtr context = open_device(kDevice);
    ASSERT_TRUE(context);
    ibv_device_attr attr{};
    ASSERT_EQ(ibv_query_device(context.get(), &attr), 0);

    const Child hog = spawn_child("hog", {});
    ASSERT_GT(hog.pid, 0);
    const std::string line = read_line(hog.output, std::chrono::seconds(60));
    size_t pds = 0, channels = 0;
    int pd_errno = 0, channel_errno = 0;
    const int parsed = sscanf(line.c_str(), "pds %zu errno %d channels %zu errno %d", &pds,
                              &pd_errno, &channels, &channel_errno);
    // This program goes on while the other holds its share.
    PdPtr pd(ibv_alloc_pd(context.get()));
    const int my_pd_errno = errno;
    ChannelPtr channel(ibv_create_comp_channel(context.get()));
    const int my_channel_errno = errno;
    const std::string status = test_daemon().status();
    kill(hog.pid, SIGKILL);
    waitpid(hog.pid, nullptr, 0);
    close(hog.output);

    ASSERT_EQ(parsed, 4) << "the other program said: '" << line << "'";
    EXPECT_EQ(pds, size_t(attr.max_pd / 4));
    EXPECT_EQ(pd_errno, ENOMEM);
    // A completion channel is a table entry and one of the daemon's
    // descriptors: whichever share ends first refuses it.
    EXPECT_GT(channels, 0u);
    EXPECT_LE(channels, size_t(kMaxCompChannels / 4));
    EXPECT_TRUE(channel_errno == ENOMEM || channel_errno == EMFILE) << strerror(channel_errno);
    EXPECT_TRUE(pd) << strerror(my_pd_errno);
    EXPECT_TRUE(channel) << strerror(my_channel_errno);
    EXPECT_NE(status.find("limits per client: a quarter of each table"), std::string::npos)
        << status;
}

}  // namespace
}  // namespace uroce::test
