// Integration tests run unmodified libibverbs calls against a real uroced.
//
// Every test binary linked with uroce_test_daemon starts its own daemon
// (private runtime directory under /tmp) before the first test and stops it
// after the last, so test binaries and ctest's per-test processes can run in
// parallel. The library provides main(). libibverbs must not be called before
// the daemon runs: the environment that points it at the daemon's sysfs tree
// and at the provider is set when the daemon is ready.
#pragma once

#include <errno.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <string.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace uroce::test {

class Daemon {
  public:
    // Starts uroced and waits up to 10 s for its sysfs tree and socket; a
    // fatal test failure, with the daemon's log, otherwise.
    void start();
    // SIGTERM, then SIGKILL when it does not stop; removes the runtime dir.
    void stop();

    const std::filesystem::path& dir() const { return dir_; }
    pid_t pid() const { return pid_; }
    // What the daemon wrote to stdout and stderr so far.
    std::string log() const;
    // The daemon's status report; empty, with a test failure, when it does
    // not answer.
    std::string status() const;

    // Whether packets between the daemon's own devices skip UDP; only
    // before start() (a test binary sets it from a static initialiser).
    void set_shortcut(bool shortcut) { shortcut_ = shortcut; }
    bool shortcut() const { return shortcut_; }

    // The counters of `device` (as `uroce stats`); empty, with a test
    // failure, when the daemon does not answer.
    std::map<std::string, uint64_t> stats(const std::string& device) const;
    // Faults on the packets `device` sends (as `uroce fault`); all zero
    // clears them. A test failure when the daemon refuses.
    void set_faults(const std::string& device, double drop, double duplicate = 0,
                    double reorder = 0) const;
    // Step mode on `device`'s wire (as `uroce step`): `action` is "pause",
    // "next", "drop" or "run", on the oldest held packet. What it acted on
    // (its one-line summary, empty for none) and how many packets stay held.
    struct Step {
        std::string summary;
        uint32_t held = 0;
    };
    Step step(const std::string& device, const std::string& action) const;

  private:
    void launch(uint16_t udp_port);

    std::filesystem::path dir_;
    pid_t pid_ = -1;
    bool shortcut_ = true;
};

// The daemon of this test binary.
Daemon& test_daemon();

// Another process running this test binary, attached to the same daemon:
// started with --uroce-child=NAME, its main() runs the function registered
// under NAME instead of the tests. Its stdout comes back through `output`.
using ChildMain = int (*)(const std::vector<std::string>& args);
// For a static initialiser; returns true.
bool register_child(const std::string& name, ChildMain main);
struct Child {
    pid_t pid = -1;
    int output = -1;  // read end of the child's stdout
};
// Forks and execs the child; a test failure when it cannot.
Child spawn_child(const std::string& name, const std::vector<std::string>& args);
// The next line a child's output gives, without its newline; what came so
// far at the deadline or the end.
std::string read_line(int fd, std::chrono::steady_clock::duration timeout);

// Object counts ("pd", "qp", ...) on the line of `device` in a status report;
// empty when the device is not in the report.
std::map<std::string, int> device_objects(const std::string& status, const std::string& device);

// Destroys a verbs object when its owner goes; a failure there fails the test.
template <auto Destroy>
struct Destroyer {
    template <class T>
    void operator()(T* object) const {
        const int error = Destroy(object);
        EXPECT_EQ(error, 0) << "destroying a verbs object: " << strerror(error);
    }
};
template <class T, auto Destroy>
using Owned = std::unique_ptr<T, Destroyer<Destroy>>;

using ContextPtr = Owned<ibv_context, ibv_close_device>;
using PdPtr = Owned<ibv_pd, ibv_dealloc_pd>;
using MrPtr = Owned<ibv_mr, ibv_dereg_mr>;
using MwPtr = Owned<ibv_mw, ibv_dealloc_mw>;
using DmPtr = Owned<ibv_dm, ibv_free_dm>;
using ChannelPtr = Owned<ibv_comp_channel, ibv_destroy_comp_channel>;
using CqPtr = Owned<ibv_cq, ibv_destroy_cq>;
using SrqPtr = Owned<ibv_srq, ibv_destroy_srq>;
using QpPtr = Owned<ibv_qp, ibv_destroy_qp>;
using WqPtr = Owned<ibv_wq, ibv_destroy_wq>;
using IndTablePtr = Owned<ibv_rwq_ind_table, ibv_destroy_rwq_ind_table>;
using AhPtr = Owned<ibv_ah, ibv_destroy_ah>;
using XrcdPtr = Owned<ibv_xrcd, ibv_close_xrcd>;

// For a creation just made: 0 when it produced an object, else errno.
template <class Ptr>
int error_of(const Ptr& object) {
    return object ? 0 : errno;
}

// While it lives, the process runs without CAP_NET_RAW in its effective set
// (it must be in the permitted set: run as root), as an unprivileged
// application would; `ok()` says whether dropping it worked.
class WithoutCapNetRaw {
  public:
    WithoutCapNetRaw();
    ~WithoutCapNetRaw();
    WithoutCapNetRaw(const WithoutCapNetRaw&) = delete;
    WithoutCapNetRaw& operator=(const WithoutCapNetRaw&) = delete;
    bool ok() const { return dropped_; }

  private:
    bool dropped_ = false;
    uint32_t saved_effective_ = 0;
};

// Opens the device called `name`; null, with a test failure, when it cannot.
ContextPtr open_device(const std::string& name);

// uroce0 opened, with a PD and the device's and port 1's attributes.
class VerbsTest : public ::testing::Test {
  protected:
    void SetUp() override;

    ibv_context* context() const { return context_.get(); }
    ibv_pd* pd() const { return pd_.get(); }
    CqPtr create_cq(int cqe = 16) const;

    ContextPtr context_;
    PdPtr pd_;
    ibv_device_attr_ex device_attr_{};
    ibv_port_attr port_attr_{};
};

}  // namespace uroce::test
