// Run by bridge_rdma_cm_test, usually with liburoce-bridge.so preloaded;
// prints what it observes, one line per call, for the test to judge.
//   open      opens /dev/infiniband/rdma_cm through each open variant
//   commands  drives a channel with ucma commands, against the test's fake daemon
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_user_cm.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "bridge_rdma_cm_script.h"

namespace {

using namespace bridge_rdma_cm;

constexpr char kNode[] = "/dev/infiniband/rdma_cm";

std::string failure() {
    return std::string("errno ") + strerrorname_np(errno);
}

// glibc's fstat before 2.33, which programs built against an older glibc
// (and ThreadSanitizer's fstat) call; version 1 is _STAT_VER_LINUX.
extern "C" int __fxstat(int, int, struct stat*);

// What fstat (or fstatat of the descriptor itself, or glibc's old
// __fxstat) says of an open's result (which it closes).
enum class Stat { kFstat, kFstatat, kOldFxstat };
std::string describe_fd(int fd, Stat how = Stat::kFstat) {
    struct stat st;
    const int r = fd < 0                    ? -1
                  : how == Stat::kFstatat   ? fstatat(fd, "", &st, AT_EMPTY_PATH)
                  : how == Stat::kOldFxstat ? __fxstat(1, fd, &st)
                                            : fstat(fd, &st);
    std::string s = "not-chr";
    if (r != 0) {
        s = failure();
    } else if (S_ISCHR(st.st_mode)) {
        s = "chr " + std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
    }
    close(fd);
    return s;
}

std::string flags_of(int fd) {
    if (fd < 0) {
        return failure();
    }
    const bool nonblock = fcntl(fd, F_GETFL) & O_NONBLOCK;
    const bool cloexec = fcntl(fd, F_GETFD) & FD_CLOEXEC;
    close(fd);
    return std::string(nonblock ? "nonblock" : "-") + (cloexec ? " cloexec" : " -");
}

void open_variants() {
    printf("open %s\n", describe_fd(open(kNode, O_RDWR | O_CLOEXEC)).c_str());
    printf("open64 %s\n", describe_fd(open64(kNode, O_RDWR | O_CLOEXEC)).c_str());
    printf("openat %s\n", describe_fd(openat(AT_FDCWD, kNode, O_RDWR | O_CLOEXEC)).c_str());
    printf("openat64 %s\n", describe_fd(openat64(AT_FDCWD, kNode, O_RDWR | O_CLOEXEC)).c_str());
    printf("fstatat %s\n", describe_fd(open(kNode, O_RDWR), Stat::kFstatat).c_str());
    printf("__fxstat %s\n", describe_fd(open(kNode, O_RDWR), Stat::kOldFxstat).c_str());
    printf("flags %s\n", flags_of(open(kNode, O_RDWR | O_NONBLOCK)).c_str());
    printf("flags %s\n", flags_of(open(kNode, O_RDWR | O_CLOEXEC)).c_str());
}

template <class Cmd>
struct Command {
    rdma_ucm_cmd_hdr hdr;
    Cmd cmd;
};

template <class Cmd>
Command<Cmd> command(uint32_t op, uint16_t out = 0) {
    Command<Cmd> c{};
    c.hdr = {op, sizeof(Cmd), out};
    return c;
}

uint64_t address(const void* p) {
    return reinterpret_cast<uintptr_t>(p);
}

void print_write(const char* what, ssize_t result, size_t expected) {
    if (result < 0) {
        printf("%s %s\n", what, failure().c_str());
    } else {
        printf("%s %s\n", what, size_t(result) == expected ? "ok" : "short-count");
    }
}

template <class Cmd>
void send(const char* what, int fd, const Command<Cmd>& c) {
    print_write(what, write(fd, &c, sizeof(c)), sizeof(c));
}

Command<rdma_ucm_create_id> create_id(const void* response) {
    auto c =
        command<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, sizeof(rdma_ucm_create_id_resp));
    c.cmd.uid = kUid;
    c.cmd.response = address(response);
    c.cmd.ps = RDMA_PS_TCP;
    c.cmd.qp_type = 2;  // IBV_QPT_RC
    return c;
}

void notify(const char* what, int fd, uint32_t action) {
    auto c = command<rdma_ucm_notify>(RDMA_USER_CM_CMD_NOTIFY);
    c.cmd.event = action;
    send(what, fd, c);
}

// The length checks and bad addresses, which the bridge answers itself.
void malformed(int fd, char* unreadable, char* readonly) {
    rdma_ucm_create_id_resp resp{};
    auto c = create_id(&resp);
    print_write("short", write(fd, &c, 4), 4);
    c.hdr.in = sizeof(c.cmd) + 8;
    print_write("in-past-len", write(fd, &c, sizeof(c)), sizeof(c));
    static char big[2048];
    const rdma_ucm_cmd_hdr too_long = {RDMA_USER_CM_CMD_CREATE_ID, 2000, 0};
    memcpy(big, &too_long, sizeof(too_long));
    print_write("too-long", write(fd, big, sizeof(big)), sizeof(big));
    print_write("unreadable", write(fd, unreadable, sizeof(c)), sizeof(c));
    // The header readable, the command past it not.
    char* header = unreadable - sizeof(rdma_ucm_cmd_hdr);
    c.hdr.in = sizeof(c.cmd);
    memcpy(header, &c.hdr, sizeof(c.hdr));
    print_write("half-readable", write(fd, header, sizeof(c)), sizeof(c));
    send("unwritable", fd, create_id(readonly));
}

void options(int fd, char* unreadable) {
    auto c = command<rdma_ucm_set_option>(RDMA_USER_CM_CMD_SET_OPTION);
    c.cmd.id = kCreatedId;
    c.cmd.level = RDMA_OPTION_ID;
    c.cmd.optname = RDMA_OPTION_ID_TOS;
    c.cmd.optval = address(&kTos);
    c.cmd.optlen = 1;
    send("set-option", fd, c);
    c.cmd.optval = address(unreadable);
    send("set-option-unreadable", fd, c);
    static char long_value[300];
    c.cmd.optval = address(long_value);
    c.cmd.optlen = sizeof(long_value);
    send("set-option-long", fd, c);
}

void events(int fd) {
    rdma_ucm_event_resp resp{};
    auto c = command<rdma_ucm_get_event>(RDMA_USER_CM_CMD_GET_EVENT, sizeof(resp));
    c.cmd.response = address(&resp);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    send("get-event-nonblock", fd, c);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    notify("arm", fd, kArmEvent);
    send("get-event", fd, c);
    printf("event %u id %u uid 0x%llx\n", resp.event, resp.id,
           static_cast<unsigned long long>(resp.uid));
}

void migrate(int fd, int other) {
    rdma_ucm_migrate_resp resp{};
    auto c = command<rdma_ucm_migrate_id>(RDMA_USER_CM_CMD_MIGRATE_ID, sizeof(resp));
    c.cmd.response = address(&resp);
    c.cmd.id = kCreatedId;
    c.cmd.fd = static_cast<uint32_t>(other);
    send("migrate", fd, c);
    printf("events-reported %u\n", resp.events_reported);
    const int closed = dup(other);
    close(closed);
    c.cmd.fd = static_cast<uint32_t>(closed);
    send("migrate-closed", fd, c);
    c.cmd.fd = 1;  // the test's pipe
    send("migrate-other", fd, c);
}

int commands() {
    const int fd = open(kNode, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        printf("open %s\n", failure().c_str());
        return 1;
    }
    const long page = sysconf(_SC_PAGESIZE);
    auto* pages = static_cast<char*>(
        mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    char* unreadable = pages + page;
    char* readonly = pages + 2 * page;
    mprotect(unreadable, page, PROT_NONE);
    mprotect(readonly, page, PROT_READ);

    rdma_ucm_create_id_resp resp{};
    send("create-id", fd, create_id(&resp));
    printf("id %u\n", resp.id);
    malformed(fd, unreadable, readonly);
    auto destroy =
        command<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_DESTROY_ID, sizeof(rdma_ucm_destroy_id_resp));
    destroy.cmd.response = address(&resp);
    send("destroy-id", fd, destroy);  // the daemon's refusal
    options(fd, unreadable);
    events(fd);

    const int other = open(kNode, O_RDWR | O_CLOEXEC);
    migrate(fd, other);
    fflush(stdout);
    const char plain[] = "plain-write\n";  // other descriptors are not the bridge's
    print_write("plain-write", write(1, plain, sizeof(plain) - 1), sizeof(plain) - 1);
    printf("close %d\n", close(fd));
    print_write("write-after-close", write(fd, &destroy, sizeof(destroy)), sizeof(destroy));
    notify("first-closed", other, kFirstClosed);
    notify("hang-up", other, kHangUp);
    printf("close-other %d\n", close(other));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    alarm(20);  // a wait that never ends fails the test instead of hanging it
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "open") {
        open_variants();
        return 0;
    }
    if (mode == "commands") {
        return commands();
    }
    fprintf(stderr, "usage: %s open | commands\n", argv[0]);
    return 2;
}
