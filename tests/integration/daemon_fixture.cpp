#include "daemon_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "protocol/client.h"

#if defined(__SANITIZE_ADDRESS__)
// ctest preloads the bridge into every integration test, ahead of ASan's
// runtime, which would refuse to start; $ASAN_OPTIONS still applies on top.
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
    return "verify_asan_link_order=0";
}
// The same for the daemon and the programs the tests start, which inherit
// the preload.
[[maybe_unused]] static const bool asan_options_for_children = [] {
    const char* given = getenv("ASAN_OPTIONS");
    const std::string options = std::string(given && *given ? given : "") +
                                (given && *given ? ":" : "") + "verify_asan_link_order=0";
    return setenv("ASAN_OPTIONS", options.c_str(), 1) == 0;
}();
#endif

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr auto kStopTimeout = std::chrono::seconds(5);
constexpr auto kPollInterval = std::chrono::milliseconds(10);
constexpr int kStartAttempts = 5;
constexpr const char* kLastDevice = "uverbs-uroce1";

// A connection to the daemon as the uroce tool makes it, bound to no device;
// null, with `why` filled, when the daemon does not answer.
std::unique_ptr<ControlClient> connect_tool(const std::filesystem::path& dir, std::string& why) {
    return std::unique_ptr<ControlClient>(
        ControlClient::connect((dir / "uroced.sock").c_str(), "", -1, why));
}

// True once the child has exited (and is reaped).
bool reaped(pid_t pid) {
    int status;
    return waitpid(pid, &status, WNOHANG) == pid;
}

class DaemonEnvironment : public ::testing::Environment {
  public:
    void SetUp() override { test_daemon().start(); }
    void TearDown() override { test_daemon().stop(); }
};

}  // namespace

Daemon& test_daemon() {
    static Daemon daemon;
    return daemon;
}

// A UDP port free on loopback now, so that test daemons running side by
// side do not collide on 4791.
uint16_t free_udp_port() {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
}

void Daemon::start() {
    char dir[] = "/tmp/uroce-it.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr) << strerror(errno);
    dir_ = dir;
    const auto sysfs = dir_ / "sysfs";
    for (int attempt = 1;; ++attempt) {
        launch(free_udp_port());
        const auto deadline = Clock::now() + kStartTimeout;
        std::string why;
        while (!std::filesystem::exists(sysfs / "class/infiniband_verbs" / kLastDevice) ||
               !connect_tool(dir_, why)) {
            if (reaped(pid_)) {
                pid_ = -1;
                break;
            }
            if (Clock::now() > deadline) {
                FAIL() << UROCED_PATH << " was not ready within 10 s; its log:\n" << log();
            }
            std::this_thread::sleep_for(kPollInterval);
        }
        if (pid_ > 0) {
            break;
        }
        // Another program may have taken the port in between: try another.
        if (attempt == kStartAttempts) {
            FAIL() << UROCED_PATH << " exited during startup; its log:\n" << log();
        }
    }
    // The readiness variant (tests/integration/CMakeLists.txt) must test
    // the readiness loop, not io_uring.
    if (const char* no = getenv("UROCE_NO_IO_URING"); no && *no && std::string(no) != "0") {
        ASSERT_NE(status().find("\nnetwork readiness loop"), std::string::npos)
            << "UROCE_NO_IO_URING is set but the daemon does not say it runs the readiness "
               "loop:\n"
            << status();
    }
    // Read by libibverbs once, on its first call. The provider logs the
    // daemon's reason for each refusal, which a release libibverbs writes
    // only to a named file.
    setenv("SYSFS_PATH", sysfs.c_str(), 1);
    setenv("RDMAV_DRIVERS", UROCE_PROVIDER_PATH, 1);
    setenv("VERBS_LOG_LEVEL", "1", 0);
    setenv("VERBS_LOG_FILE", "/dev/stderr", 0);
}

void Daemon::launch(uint16_t udp_port) {
    const std::string log_path = dir_ / "daemon.log";
    const std::string port = std::to_string(udp_port);
    pid_ = fork();
    ASSERT_GE(pid_, 0) << strerror(errno);
    if (pid_ == 0) {
        // The daemon must not outlive a test binary that is killed.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(log, STDOUT_FILENO);
        dup2(log, STDERR_FILENO);
        execl(UROCED_PATH, UROCED_PATH, "--runtime-dir", dir_.c_str(), "--udp-port", port.c_str(),
              shortcut_ ? nullptr : "--no-shortcut", nullptr);
        _exit(127);
    }
}

void Daemon::stop() {
    // A daemon that is gone before we stop it died under a test.
    if (pid_ > 0 && reaped(pid_)) {
        ADD_FAILURE() << "uroced died during the tests; its log:\n" << log();
        pid_ = -1;
    }
    if (pid_ > 0) {
        kill(pid_, SIGTERM);
        const auto deadline = Clock::now() + kStopTimeout;
        while (!reaped(pid_)) {
            if (Clock::now() > deadline) {
                ADD_FAILURE() << "uroced ignored SIGTERM; its log:\n" << log();
                kill(pid_, SIGKILL);
                waitpid(pid_, nullptr, 0);
                break;
            }
            std::this_thread::sleep_for(kPollInterval);
        }
        pid_ = -1;
    }
    if (!dir_.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
        dir_.clear();
    }
}

std::string Daemon::log() const {
    std::ifstream in(dir_ / "daemon.log");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string Daemon::status() const {
    std::string why;
    const auto client = connect_tool(dir_, why);
    std::string text;
    if (!client) {
        ADD_FAILURE() << "cannot connect to uroced: " << why;
    } else if (const int error = client->call_status(text); error) {
        ADD_FAILURE() << "status request failed: " << strerror(error) << " "
                      << client->last_error();
    }
    return text;
}

std::map<std::string, uint64_t> Daemon::stats(const std::string& device) const {
    std::string why;
    const auto client = connect_tool(dir_, why);
    if (!client) {
        ADD_FAILURE() << "cannot connect to uroced: " << why;
        return {};
    }
    rpc::DeviceRequest request{};
    snprintf(request.device, sizeof(request.device), "%s", device.c_str());
    auto reply = std::make_unique<rpc::StatsReply>();
    if (const int error =
            client->call(rpc::Op::kStats, &request, sizeof(request), reply.get(), sizeof(*reply))) {
        ADD_FAILURE() << "stats request failed: " << strerror(error) << " " << client->last_error();
        return {};
    }
    reply->text[sizeof(reply->text) - 1] = '\0';
    // A header line, then "  <counter> <value>" lines.
    std::map<std::string, uint64_t> counters;
    std::istringstream lines(reply->text);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string name;
        uint64_t value;
        if (line.rfind("  ", 0) == 0 && fields >> name >> value) {
            counters[name] = value;
        }
    }
    return counters;
}

void Daemon::set_faults(const std::string& device, double drop, double duplicate,
                        double reorder) const {
    std::string why;
    const auto client = connect_tool(dir_, why);
    ASSERT_TRUE(client) << "cannot connect to uroced: " << why;
    rpc::SetFaultsRequest request{};
    snprintf(request.device, sizeof(request.device), "%s", device.c_str());
    request.drop = drop;
    request.duplicate = duplicate;
    request.reorder = reorder;
    rpc::Empty none;
    EXPECT_EQ(client->call(request, &none), 0) << client->last_error();
}

Daemon::Step Daemon::step(const std::string& device, const std::string& action) const {
    static const std::map<std::string, rpc::StepAction> kActions{{"pause", rpc::StepAction::kPause},
                                                                 {"next", rpc::StepAction::kNext},
                                                                 {"drop", rpc::StepAction::kDrop},
                                                                 {"run", rpc::StepAction::kRun}};
    std::string why;
    const auto client = connect_tool(dir_, why);
    EXPECT_TRUE(client) << "cannot connect to uroced: " << why;
    rpc::StepRequest request{};
    snprintf(request.device, sizeof(request.device), "%s", device.c_str());
    request.action = kActions.at(action);
    rpc::StepReply reply{};
    if (client) {
        EXPECT_EQ(client->call(request, &reply), 0) << action << ": " << client->last_error();
    }
    return {reply.packet ? std::string(reply.summary) : std::string(), reply.held};
}

namespace {

constexpr std::string_view kChildOption = "--uroce-child=";

std::map<std::string, ChildMain>& children() {
    static std::map<std::string, ChildMain> registered;
    return registered;
}

}  // namespace

bool register_child(const std::string& name, ChildMain main) {
    children()[name] = main;
    return true;
}

std::string read_line(int fd, std::chrono::steady_clock::duration timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string line;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd ready{fd, POLLIN, 0};
        if (left.count() <= 0 || poll(&ready, 1, static_cast<int>(left.count())) <= 0) {
            return line;
        }
        char c;
        if (read(fd, &c, 1) != 1 || c == '\n') {
            return line;
        }
        line += c;
    }
}

Child spawn_child(const std::string& name, const std::vector<std::string>& args) {
    // Everything exec needs is made before the fork: the child of a threaded
    // process may only make async-signal-safe calls.
    std::vector<std::string> strings{"/proc/self/exe", std::string(kChildOption) + name};
    strings.insert(strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : strings) {
        argv.push_back(s.data());
    }
    argv.push_back(nullptr);
    int pipe_fds[2];
    Child child;
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        ADD_FAILURE() << "pipe2: " << strerror(errno);
        return child;
    }
    child.pid = fork();
    if (child.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pipe_fds[1], STDOUT_FILENO);
        execv(argv[0], argv.data());
        _exit(127);
    }
    close(pipe_fds[1]);
    if (child.pid < 0) {
        ADD_FAILURE() << "fork: " << strerror(errno);
        close(pipe_fds[0]);
        return child;
    }
    child.output = pipe_fds[0];
    return child;
}

std::map<std::string, int> device_objects(const std::string& status, const std::string& device) {
    // "device NAME address ...", then indented lines, one of them
    // "  objects pd 1, mr 0, ...".
    std::istringstream lines(status);
    std::string line;
    bool in_device = false;
    while (std::getline(lines, line)) {
        if (line.rfind("device ", 0) == 0) {
            in_device = line.rfind("device " + device + " ", 0) == 0;
        } else if (in_device && line.rfind("  objects ", 0) == 0) {
            std::map<std::string, int> counts;
            std::istringstream fields(line.substr(10));
            std::string kind;
            int count;
            char comma;
            while (fields >> kind >> count) {
                counts[kind] = count;
                fields >> comma;
            }
            return counts;
        }
    }
    return {};
}

ContextPtr open_device(const std::string& name) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list) {
        ADD_FAILURE() << "ibv_get_device_list: " << strerror(errno);
        return nullptr;
    }
    ContextPtr context;
    for (int i = 0; i < count; ++i) {
        if (name == ibv_get_device_name(list[i])) {
            context.reset(ibv_open_device(list[i]));
            if (!context) {
                ADD_FAILURE() << "ibv_open_device(" << name << "): " << strerror(errno);
            }
        }
    }
    ibv_free_device_list(list);
    if (!context) {
        ADD_FAILURE() << "cannot open " << name << "; uroced's log:\n" << test_daemon().log();
    }
    return context;
}

WithoutCapNetRaw::WithoutCapNetRaw() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (syscall(SYS_capget, &header, caps) != 0 || !(caps[0].permitted & (1u << CAP_NET_RAW))) {
        ADD_FAILURE() << "the test needs CAP_NET_RAW in its permitted set (run as root)";
        return;
    }
    saved_effective_ = caps[0].effective;
    caps[0].effective &= ~(1u << CAP_NET_RAW);
    dropped_ = syscall(SYS_capset, &header, caps) == 0;
    EXPECT_TRUE(dropped_) << "capset: " << strerror(errno);
}

WithoutCapNetRaw::~WithoutCapNetRaw() {
    if (!dropped_) {
        return;
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    syscall(SYS_capget, &header, caps);
    caps[0].effective = saved_effective_;
    EXPECT_EQ(syscall(SYS_capset, &header, caps), 0) << "capset: " << strerror(errno);
}

void VerbsTest::SetUp() {
    context_ = open_device("uroce0");
    ASSERT_TRUE(context_);
    pd_.reset(ibv_alloc_pd(context()));
    ASSERT_TRUE(pd_) << strerror(errno);
    ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &device_attr_), 0);
    ASSERT_EQ(ibv_query_port(context(), 1, &port_attr_), 0);
}

CqPtr VerbsTest::create_cq(int cqe) const {
    CqPtr cq(ibv_create_cq(context(), cqe, nullptr, nullptr, 0));
    EXPECT_TRUE(cq) << "ibv_create_cq: " << strerror(errno);
    return cq;
}

}  // namespace uroce::test

int main(int argc, char** argv) {
    // A child (spawn_child) uses the daemon its parent started: the
    // environment that points libibverbs at it came along.
    if (argc >= 2 && std::string_view(argv[1]).starts_with(uroce::test::kChildOption)) {
        const std::string name(std::string_view(argv[1]).substr(uroce::test::kChildOption.size()));
        const auto it = uroce::test::children().find(name);
        if (it == uroce::test::children().end()) {
            fprintf(stderr, "no child called %s\n", name.c_str());
            return 2;
        }
        return it->second(std::vector<std::string>(argv + 2, argv + argc));
    }
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new uroce::test::DaemonEnvironment);
    return RUN_ALL_TESTS();
}
