// Where io_uring is refused, the network takes the readiness loop and says
// why: a seccomp filter (as a container runtime's default profile loads)
// refusing io_uring_setup, or only io_uring_enter, in a child process.
#include "net/socket_io.h"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <iostream>

namespace uroce {
namespace {

// Makes `syscall_number` fail with `error` in this process from now on.
void refuse(long syscall_number, int error) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(syscall_number), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & 0xffff)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
        _exit(2);
    }
}

// In a child with `syscall_number` refused: the choice and its reason on
// stderr, exit 0 when it is the readiness loop and a network can be made.
void choose_without(long syscall_number, int error) {
    refuse(syscall_number, error);
    const SocketIoChoice choice = choose_socket_io(false);
    std::cerr << describe(choice) << "\n";
    make_socket_io(choice.kind);
    _exit(choice.kind == SocketIo::Kind::kReadiness ? 0 : 1);
}

TEST(SocketIoTest, IoUringWorksHereAndIsChosen) {
    const SocketIoChoice choice = choose_socket_io(false);
    ASSERT_EQ(choice.kind, SocketIo::Kind::kIoUring) << choice.reason;
    EXPECT_EQ(describe(choice), "network io_uring");
}

TEST(SocketIoTest, TheReadinessLoopIsChosenWhenAsked) {
    const SocketIoChoice choice = choose_socket_io(true);
    EXPECT_EQ(choice.kind, SocketIo::Kind::kReadiness);
    EXPECT_EQ(describe(choice),
              "network readiness loop (epoll, sendmmsg, recvmmsg), io_uring not used: "
              "--no-io-uring");
}

TEST(SocketIoTest, SetupRefusedBySeccompChoosesTheReadinessLoopAndSaysWhy) {
    EXPECT_EXIT(choose_without(__NR_io_uring_setup, EPERM), ::testing::ExitedWithCode(0),
                "io_uring not used: io_uring_setup: Operation not permitted");
    EXPECT_EXIT(choose_without(__NR_io_uring_setup, ENOSYS), ::testing::ExitedWithCode(0),
                "io_uring not used: io_uring_setup: Function not implemented");
}

TEST(SocketIoTest, EnterRefusedAloneIsFoundBeforeTheFirstSend) {
    EXPECT_EXIT(choose_without(__NR_io_uring_enter, EPERM), ::testing::ExitedWithCode(0),
                "io_uring not used: io_uring_enter: Operation not permitted");
}

}  // namespace
}  // namespace uroce
