// liburoce-bridge.so's /dev/infiniband/rdma_cm: runs bridge_rdma_cm_helper
// with the bridge preloaded against a fake daemon (a listener thread here that
// speaks the kCmOpen/kCmCommand protocol), and checks what both sides observe.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bridge_rdma_cm_script.h"
#include "emulator/protocol/messages.h"
#include "sysfs_tree.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
namespace rpc = uroce::rpc;
using namespace bridge_rdma_cm;
using Clock = std::chrono::steady_clock;

constexpr char kNode[] = "/dev/infiniband/rdma_cm";

// What the fake daemon was sent.
struct Seen {
    std::vector<uint64_t> tokens;  // per connection, in the order they came
    size_t create_id_length = 0;
    std::vector<std::pair<uint32_t, std::vector<uint8_t>>> options;  // length, bytes
    std::vector<uint64_t> migrate_tokens;
    int eagain_answers = 0;  // GET_EVENTs that came while no event waited
};

// Answers the bridge as uroced would, with the answers bridge_rdma_cm_script.h
// describes; kCmOpen fails with `refuse_open` when that is not 0.
class FakeDaemon {
  public:
    FakeDaemon(const fs::path& socket_path, int refuse_open = 0) : refuse_open_(refuse_open) {
        listener_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
        EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        EXPECT_EQ(listen(listener_, 16), 0);
        EXPECT_EQ(pipe2(stop_, O_CLOEXEC), 0);
        thread_ = std::thread([this] { run(); });
    }
    ~FakeDaemon() {
        EXPECT_EQ(write(stop_[1], "", 1), 1);
        thread_.join();
        for (const Connection& c : connections_) {
            close(c.sock);
            close(c.pipe);
        }
        close(listener_);
        close(stop_[0]);
        close(stop_[1]);
    }

    Seen seen() {
        std::lock_guard lock(mutex_);
        return seen_;
    }

  private:
    struct Connection {
        int sock = -1;  // -1 once closed
        int pipe = -1;  // the channel's pipe, opened again as the daemon does
        bool event_waits = false;
    };

    void run() {
        for (;;) {
            std::vector<pollfd> fds = {{stop_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
            for (const Connection& c : connections_) {
                fds.push_back({c.sock, POLLIN, 0});
            }
            int timeout = -1;
            if (arm_at_) {
                const auto left = *arm_at_ - Clock::now();
                timeout =
                    std::max<int>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count());
            }
            poll(fds.data(), fds.size(), timeout);
            if (fds[0].revents) {
                return;
            }
            if (arm_at_ && Clock::now() >= *arm_at_) {
                EXPECT_EQ(write(connections_[armed_].pipe, "", 1), 1);
                connections_[armed_].event_waits = true;
                arm_at_.reset();
            }
            for (size_t i = 2; i < fds.size(); ++i) {
                if (fds[i].revents) {
                    serve(i - 2);
                }
            }
            if (fds[1].revents & POLLIN) {
                connections_.push_back({accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC)});
            }
        }
    }

    void serve(size_t index) {
        Connection& c = connections_[index];
        alignas(8) uint8_t buf[4096];
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
        iovec iov{buf, sizeof(buf)};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        const ssize_t n = recvmsg(c.sock, &msg, MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            close(c.sock);
            c.sock = -1;
            return;
        }
        int fd = -1;
        if (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg && cmsg->cmsg_type == SCM_RIGHTS) {
            memcpy(&fd, CMSG_DATA(cmsg), sizeof(fd));
        }
        rpc::RequestHeader header;
        memcpy(&header, buf, sizeof(header));
        const size_t body = static_cast<size_t>(n) - sizeof(header);
        EXPECT_EQ(header.magic, rpc::kMagic);
        EXPECT_EQ(header.length, static_cast<size_t>(n));
        if (header.op == rpc::Op::kCmOpen) {
            EXPECT_EQ(body, sizeof(rpc::CmOpenRequest));
            EXPECT_GE(fd, 0);
            if (refuse_open_) {
                close(fd);
                reply(c.sock, header, refuse_open_);
                return;
            }
            struct stat st;
            EXPECT_EQ(fstat(fd, &st), 0);
            EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the channel's descriptor is a pipe";
            c.pipe = open(("/proc/self/fd/" + std::to_string(fd)).c_str(),
                          O_RDWR | O_NONBLOCK | O_CLOEXEC);
            EXPECT_GE(c.pipe, 0);
            close(fd);
            const rpc::CmOpenReply open{0x1000 + index};
            std::lock_guard lock(mutex_);
            seen_.tokens.push_back(open.channel_token);
            reply(c.sock, header, 0, &open, sizeof(open));
            return;
        }
        ASSERT_EQ(header.op, rpc::Op::kCmCommand);
        ASSERT_EQ(body, sizeof(rpc::CmCommandRequest));
        rpc::CmCommandRequest request;
        memcpy(&request, buf + sizeof(header), sizeof(request));
        rpc::CmCommandReply answer{};
        const int error = command(index, request, answer);
        if (error >= 0) {  // < 0: hung up
            reply(c.sock, header, error, &answer, sizeof(answer));
        }
    }

    template <class Response>
    static void respond(rpc::CmCommandReply& answer, uint64_t address, const Response& r) {
        answer.response_address = address;
        answer.response_length = sizeof(r);
        memcpy(answer.response, &r, sizeof(r));
    }

    // 0 or an errno to answer; -1 when the connection was closed instead.
    int command(size_t index, const rpc::CmCommandRequest& request, rpc::CmCommandReply& answer) {
        Connection& c = connections_[index];
        std::lock_guard lock(mutex_);
        rdma_ucm_cmd_hdr hdr;
        memcpy(&hdr, request.command, sizeof(hdr));
        const uint8_t* in = request.command + sizeof(hdr);
        switch (hdr.cmd) {
            case RDMA_USER_CM_CMD_CREATE_ID: {
                rdma_ucm_create_id cmd;
                memcpy(&cmd, in, sizeof(cmd));
                seen_.create_id_length = request.length;
                if (hdr.in != sizeof(cmd) || hdr.out != sizeof(rdma_ucm_create_id_resp) ||
                    cmd.uid != kUid || cmd.ps != RDMA_PS_TCP || cmd.qp_type != 2) {
                    return EINVAL;
                }
                respond(answer, cmd.response, rdma_ucm_create_id_resp{kCreatedId});
                return 0;
            }
            case RDMA_USER_CM_CMD_SET_OPTION: {
                const uint32_t length = request.option_length;
                const size_t held = length <= rpc::kMaxCmOptionValue ? length : 0;
                seen_.options.push_back(
                    {length, std::vector<uint8_t>(request.option, request.option + held)});
                return length > rpc::kMaxCmOptionValue ? EINVAL : 0;
            }
            case RDMA_USER_CM_CMD_MIGRATE_ID: {
                rdma_ucm_migrate_id cmd;
                memcpy(&cmd, in, sizeof(cmd));
                seen_.migrate_tokens.push_back(request.migrate_token);
                respond(answer, cmd.response, rdma_ucm_migrate_resp{kEventsReported});
                return 0;
            }
            case RDMA_USER_CM_CMD_GET_EVENT: {
                if (!c.event_waits) {
                    ++seen_.eagain_answers;
                    return EAGAIN;
                }
                char byte;
                EXPECT_EQ(read(c.pipe, &byte, 1), 1);  // no longer readable
                c.event_waits = false;
                rdma_ucm_get_event cmd;
                memcpy(&cmd, in, sizeof(cmd));
                rdma_ucm_event_resp event{};
                event.uid = kEventUid;
                event.id = kEventId;
                event.event = kEvent;
                respond(answer, cmd.response, event);
                return 0;
            }
            case RDMA_USER_CM_CMD_NOTIFY:
                return action(index, in);
            default:
                return ENOENT;  // as for an id that does not exist
        }
    }

    int action(size_t index, const uint8_t* in) {
        rdma_ucm_notify cmd;
        memcpy(&cmd, in, sizeof(cmd));
        switch (cmd.event) {
            case kArmEvent:
                arm_at_ = Clock::now() + std::chrono::milliseconds(200);
                armed_ = index;
                return 0;
            case kFirstClosed: {
                pollfd first{connections_[0].sock, POLLRDHUP, 0};
                const bool closed = first.fd < 0 || (poll(&first, 1, 0) == 1 &&
                                                     (first.revents & (POLLRDHUP | POLLHUP)));
                return closed ? 0 : EBUSY;
            }
            case kHangUp:
                close(connections_[index].sock);
                connections_[index].sock = -1;
                return -1;
            default:
                return EINVAL;
        }
    }

    static void reply(int sock, const rpc::RequestHeader& request, int error,
                      const void* body = nullptr, size_t size = 0) {
        rpc::ReplyHeader header{};
        header.magic = rpc::kMagic;
        header.version = rpc::kVersion;
        header.op = request.op;
        header.seq = request.seq;
        header.error = error;
        size = error ? 0 : size;  // as uroced: an error reply has no body
        header.length = static_cast<uint32_t>(sizeof(header) + size);
        iovec iov[2] = {{&header, sizeof(header)}, {const_cast<void*>(body), size}};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = 2;
        EXPECT_EQ(sendmsg(sock, &msg, MSG_NOSIGNAL), static_cast<ssize_t>(header.length));
    }

    const int refuse_open_;
    int listener_ = -1;
    int stop_[2] = {-1, -1};
    std::thread thread_;
    std::vector<Connection> connections_;  // the thread's only
    std::optional<Clock::time_point> arm_at_;
    size_t armed_ = 0;
    std::mutex mutex_;
    Seen seen_;
};

using Env = std::map<std::string, std::optional<std::string>>;  // nullopt: unset

struct Outcome {
    int status = -1;
    std::string output;  // stdout and stderr
};

Outcome run_helper(std::string mode, const Env& env) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) {
        const std::string var = *e;
        if (!env.contains(var.substr(0, var.find('=')))) {
            vars.push_back(var);
        }
    }
    for (const auto& [name, value] : env) {
        if (value) {
            vars.push_back(name + "=" + *value);
        }
    }
    std::vector<char*> envp;
    for (std::string& var : vars) {
        envp.push_back(var.data());
    }
    envp.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        return {};
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, out[1], 2);
    std::string helper = BRIDGE_RDMA_CM_HELPER;
    char* argv[] = {helper.data(), mode.data(), nullptr};
    pid_t pid;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    Outcome r;
    char buf[4096];
    ssize_t n;
    while (spawned == 0 && (n = read(out[0], buf, sizeof(buf))) > 0) {
        r.output.append(buf, static_cast<size_t>(n));
    }
    close(out[0]);
    int status = 0;
    if (spawned == 0 && waitpid(pid, &status, 0) == pid) {
        r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return r;
}

// Every open of the helper's "open" mode failing with `error`.
std::string open_failures(const char* error) {
    const std::string e = std::string("errno ") + error + "\n";
    return "open " + e + "open64 " + e + "openat " + e + "openat64 " + e + "fstatat " + e +
           "__fxstat " + e + "flags " + e + "flags " + e;
}

class bridgeRdmaCm : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "uroce-rdma-cm-XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        root_ = tmpl;
        uroce::bridge::write_tree(sysfs(), {}, socket());
    }
    void TearDown() override { fs::remove_all(root_); }

    fs::path sysfs() const { return root_ / "sysfs"; }
    fs::path socket() const { return root_ / "uroced.sock"; }

    // Sanitizer builds preload the sanitizer runtimes ahead of our libraries.
    Env uroce() const {
        return {{"LD_PRELOAD", UROCE_SANITIZER_PRELOAD UROCE_BRIDGE_PATH},
                {"SYSFS_PATH", sysfs().string()}};
    }

    fs::path root_;
};

TEST_F(bridgeRdmaCm, OpensAChannelOfTheDaemon) {
    FakeDaemon daemon(socket());
    Outcome r = run_helper("open", uroce());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output,
              "open chr 10:58\nopen64 chr 10:58\nopenat chr 10:58\nopenat64 chr 10:58\n"
              "fstatat chr 10:58\n__fxstat chr 10:58\nflags nonblock -\nflags - cloexec\n");
    EXPECT_EQ(daemon.seen().tokens.size(), 8u);
}

TEST_F(bridgeRdmaCm, OnlyInAUroceEnvironment) {
    ASSERT_FALSE(fs::exists(kNode)) << kNode << " exists: the kernel would answer";
    FakeDaemon daemon(socket());
    const std::string none = open_failures("ENOENT");

    Env env = uroce();
    env["SYSFS_PATH"] = std::nullopt;
    EXPECT_EQ(run_helper("open", env).output, none);

    uroce::bridge::write_tree(root_ / "plain", {});  // a tree without rdma_cm
    env["SYSFS_PATH"] = (root_ / "plain").string();
    EXPECT_EQ(run_helper("open", env).output, none);

    env = uroce();
    const std::string runtimes = UROCE_SANITIZER_PRELOAD;
    env["LD_PRELOAD"] = runtimes.empty() ? std::nullopt : std::optional(runtimes);
    EXPECT_EQ(run_helper("open", env).output, none);

    EXPECT_TRUE(daemon.seen().tokens.empty());
}

TEST_F(bridgeRdmaCm, OpenFailsAsTheDaemonAnswers) {
    EXPECT_EQ(run_helper("open", uroce()).output, open_failures("ENOENT"));  // no daemon
    FakeDaemon daemon(socket(), EPERM);
    EXPECT_EQ(run_helper("open", uroce()).output, open_failures("EPERM"));
}

TEST_F(bridgeRdmaCm, CarriesCommandsAsTheKernelWould) {
    FakeDaemon daemon(socket());
    Outcome r = run_helper("commands", uroce());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output,
              "create-id ok\n"
              "id 42\n"
              "short errno EINVAL\n"
              "in-past-len errno EINVAL\n"
              "too-long errno EINVAL\n"
              "unreadable errno EFAULT\n"
              "half-readable errno EFAULT\n"
              "unwritable errno EFAULT\n"
              "destroy-id errno ENOENT\n"
              "set-option ok\n"
              "set-option-unreadable errno EFAULT\n"
              "set-option-long errno EINVAL\n"
              "get-event-nonblock errno EAGAIN\n"
              "arm ok\n"
              "get-event ok\n"
              "event 9 id 7 uid 0xabc\n"
              "migrate ok\n"
              "events-reported 5\n"
              "migrate-closed errno ENOENT\n"
              "migrate-other errno EINVAL\n"
              "plain-write\n"
              "plain-write ok\n"
              "close 0\n"
              "write-after-close errno EBADF\n"
              "first-closed ok\n"
              "hang-up errno ENODEV\n"
              "close-other 0\n");

    const Seen seen = daemon.seen();
    EXPECT_EQ(seen.create_id_length, sizeof(rdma_ucm_cmd_hdr) + sizeof(rdma_ucm_create_id));
    // The value travels with the command; one too long for it, and an
    // unreadable one, do not.
    using Option = std::pair<uint32_t, std::vector<uint8_t>>;
    EXPECT_EQ(seen.options, (std::vector<Option>{{1, {kTos}}, {300, {}}}));
    ASSERT_EQ(seen.tokens.size(), 2u);
    EXPECT_EQ(seen.migrate_tokens, std::vector<uint64_t>{seen.tokens[1]});
    // The O_NONBLOCK attempt and the blocking one's first ask came before
    // the event; then the blocking one waited on the pipe.
    EXPECT_EQ(seen.eagain_answers, 2);
}

}  // namespace
