/* A program that misuses rdma_cm the ways a fuzzing campaign found to hurt
 * other programs: it drains, closes or replaces its event channel's
 * descriptor behind librdmacm's back, gives the kernel's ABI addresses it
 * cannot write, takes every rdma_cm resource it may hold, or hammers one
 * channel from a parent and its forked child at once.
 *
 *   rdmacm_misuse MODE [COUNT]
 *
 * Modes that misuse and then check their own next call print "ok" and exit
 * 0; "hold" takes all it may of IDs, multicast joins and channels ("ids"
 * only IDs), prints what stopped each ("ids N errno ENOMEM", ...) and waits
 * for its stdin to close. Destinations are uroce1 (127.0.0.2) from uroce0 (127.0.0.1). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kernel's ucma ABI (<rdma/rdma_user_cm.h>, which clashes with
 * <rdma/rdma_cma.h>): what efault() writes itself. */
enum { kCmdCreateId = 0, kCmdGetEvent = 12 };
struct ucma_header {
    uint32_t cmd;
    uint16_t in, out;
};
struct ucma_create_id {
    uint64_t uid, response;
    uint16_t ps;
    uint8_t qp_type, reserved[5];
};
struct ucma_get_event {
    uint64_t response;
};
enum { kCreateIdResponse = 4, kEventResponse = 336 };

static void fail(const char* what) {
    printf("%s failed: %s\n", what, strerror(errno));
    exit(1);
}

static struct sockaddr_in ipv4(const char* ip, uint16_t port) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &address.sin_addr);
    return address;
}

/* Holds what the process has until the test closes its stdin. */
static void wait_for_stdin(void) {
    char byte;
    if (read(0, &byte, 1) < 0) {
        fail("waiting for stdin");
    }
}

/* An ID of `channel` with ADDR_RESOLVED waiting, not taken. */
static struct rdma_cm_id* resolving_id(struct rdma_event_channel* channel) {
    struct rdma_cm_id* id;
    if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) {
        fail("rdma_create_id");
    }
    struct sockaddr_in dst = ipv4("127.0.0.2", 7000);
    if (rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, 2000)) {
        fail("rdma_resolve_addr");
    }
    return id;
}

static int readable(int fd, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* The channel still works: an ID resolves, and its event comes. */
static void check_channel(struct rdma_event_channel* channel) {
    struct rdma_cm_id* id = resolving_id(channel);
    if (!readable(channel->fd, 5000)) {
        fail("waiting for ADDR_RESOLVED");
    }
    struct rdma_cm_event* event;
    if (rdma_get_cm_event(channel, &event)) {
        fail("rdma_get_cm_event");
    }
    if (event->event != RDMA_CM_EVENT_ADDR_RESOLVED || event->id != id) {
        errno = EPROTO;
        fail("ADDR_RESOLVED");
    }
    rdma_ack_cm_event(event);
    if (rdma_destroy_id(id)) {
        fail("rdma_destroy_id");
    }
}

/* Takes the byte that says events wait, then destroys the ID whose event it was. */
static int drain(void) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    struct rdma_cm_id* id = resolving_id(channel);
    if (!readable(channel->fd, 5000)) {
        fail("waiting for ADDR_RESOLVED");
    }
    char bytes[64];
    if (read(channel->fd, bytes, sizeof(bytes)) != -1 || errno != EINVAL) {
        fail("read(2) of the channel (EINVAL expected)");
    }
    if (syscall(SYS_read, channel->fd, bytes, sizeof(bytes)) <= 0) {
        fail("a raw read of the channel");
    }
    if (rdma_destroy_id(id)) {
        fail("rdma_destroy_id");
    }
    check_channel(channel);
    rdma_destroy_event_channel(channel);
    puts("ok");
    return 0;
}

/* Writes to its descriptor with raw system calls, as one would to fill an eventfd. */
static int fill(void) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    const uint64_t most = UINT64_MAX - 1;
    struct iovec iov = {(void*)&most, sizeof(most)};
    if (syscall(SYS_writev, channel->fd, &iov, 1) != -1) {
        fail("a raw writev of the channel (an error expected)");
    }
    if (syscall(SYS_write, channel->fd, &most, sizeof(most)) != -1) {
        fail("a raw write of the channel (an error expected)");
    }
    check_channel(channel);
    rdma_destroy_event_channel(channel);
    puts("ok");
    return 0;
}

/* Closes its descriptor behind librdmacm's back with events waiting, or
 * puts another file on its number; then exits without cleaning up. */
static int close_behind(int replace) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    resolving_id(channel);
    resolving_id(channel);
    if (replace) {
        const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0 || syscall(SYS_dup2, null, channel->fd) != channel->fd) {
            fail("dup2 over the channel");
        }
    } else if (syscall(SYS_close, channel->fd) != 0) {
        fail("a raw close of the channel");
    }
    struct rdma_event_channel* another = rdma_create_event_channel();
    if (!another) {
        fail("rdma_create_event_channel after");
    }
    check_channel(another);
    puts("ok");
    return 0;
}

struct waiter {
    struct rdma_event_channel* channel;
    int tid; /* atomic */
    int got; /* atomic: the waiter took its event */
};

static void* wait_for_an_event(void* arg) {
    struct waiter* w = arg;
    __atomic_store_n(&w->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    struct rdma_cm_event* event;
    if (rdma_get_cm_event(w->channel, &event)) {
        printf("rdma_get_cm_event failed with %s while another thread closed the channel\n",
               strerror(errno));
        exit(1);
    }
    rdma_ack_cm_event(event);
    __atomic_store_n(&w->got, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Whether thread `tid` of this process sleeps in the write(2) of its
 * GET_EVENT (the kernel's file), or in the poll the bridge waits in. */
static int asleep_in_get_event(int tid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
    FILE* file = fopen(path, "r");
    long number = -1;
    if (!file) {
        fail("reading the waiter's syscall");
    }
    if (fscanf(file, "%ld", &number) != 1) {
        number = -1; /* "running" */
    }
    fclose(file);
#ifdef SYS_poll
    if (number == SYS_poll) {
        return 1;
    }
#endif
    return number == SYS_write || number == SYS_ppoll;
}

/* Destroys an ID whose event is on its way and closes the channel while
 * another thread sleeps in rdma_get_cm_event, as rping's client does on its
 * way out, `rounds` times with the event a little later each round. On the
 * kernel the waiter takes the event, or sleeps on (its write(2) holds the
 * file) until the process ends; it never fails. */
static int close_under_waiter(int rounds) {
    for (int round = 0; round < rounds; ++round) {
        struct waiter* w = calloc(1, sizeof(*w)); /* kept: a sleeping waiter holds it */
        w->channel = rdma_create_event_channel();
        if (!w->channel) {
            fail("rdma_create_event_channel");
        }
        pthread_t thread;
        if (pthread_create(&thread, NULL, wait_for_an_event, w)) {
            fail("pthread_create");
        }
        for (int ms = 0;; ++ms) {
            const int tid = __atomic_load_n(&w->tid, __ATOMIC_ACQUIRE);
            if (tid && asleep_in_get_event(tid)) {
                break;
            }
            if (ms == 10 * 1000) {
                fail("waiting for the waiter to sleep in rdma_get_cm_event");
            }
            usleep(1000);
        }
        struct rdma_cm_id* id = resolving_id(w->channel);
        usleep((round % 20) * 25);
        if (rdma_destroy_id(id)) {
            fail("rdma_destroy_id");
        }
        if (close(w->channel->fd)) { /* rdma_destroy_event_channel, less its free() */
            fail("close");
        }
        for (int ms = 0; ms < 20 && !__atomic_load_n(&w->got, __ATOMIC_ACQUIRE); ++ms) {
            usleep(1000); /* time for a waiter woken to fail, if it would */
        }
    }
    puts("ok");
    fflush(stdout);
    _exit(0);
}

/* A raw ucma command, as librdmacm writes them. */
static int ucma_write(int fd, uint32_t cmd, void* body, size_t in, size_t out) {
    char buf[sizeof(struct ucma_header) + 512];
    struct ucma_header hdr = {cmd, (uint16_t)in, (uint16_t)out};
    memcpy(buf, &hdr, sizeof(hdr));
    memcpy(buf + sizeof(hdr), body, in);
    return write(fd, buf, sizeof(hdr) + in) == (ssize_t)(sizeof(hdr) + in) ? 0 : errno;
}

/* Commands whose response address cannot be written: EFAULT, and nothing
 * kept (CREATE_ID) or lost (GET_EVENT), as on the kernel. */
static int efault(void) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    void* unwritable = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (unwritable == MAP_FAILED) {
        fail("mmap");
    }
    for (int i = 0; i < 100; ++i) {
        struct ucma_create_id create = {
            .uid = 1, .response = (uintptr_t)unwritable, .ps = RDMA_PS_TCP, .qp_type = IBV_QPT_RC};
        const int error =
            ucma_write(channel->fd, kCmdCreateId, &create, sizeof(create), kCreateIdResponse);
        if (error != EFAULT) {
            errno = error;
            fail("CREATE_ID with an unwritable response (EFAULT expected)");
        }
    }
    struct rdma_cm_id* id = resolving_id(channel);
    if (!readable(channel->fd, 5000)) {
        fail("waiting for ADDR_RESOLVED");
    }
    struct ucma_get_event get = {.response = (uintptr_t)unwritable};
    const int error = ucma_write(channel->fd, kCmdGetEvent, &get, sizeof(get), kEventResponse);
    if (error != EFAULT) {
        errno = error;
        fail("GET_EVENT with an unwritable response (EFAULT expected)");
    }
    struct rdma_cm_event* event;
    if (rdma_get_cm_event(channel, &event) || event->event != RDMA_CM_EVENT_ADDR_RESOLVED ||
        event->id != id) {
        fail("the event a GET_EVENT could not deliver");
    }
    rdma_ack_cm_event(event);
    printf("ids-held pid %d\n", getpid()); /* the test counts this process's IDs now */
    fflush(stdout);
    wait_for_stdin();
    puts("ok");
    return 0;
}

/* Parent and child issue commands on one inherited channel at once: each
 * call must succeed and each reply reach its own caller. */
static int fork_hammer(int rounds) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    struct rdma_cm_id* mine;
    if (rdma_create_id(channel, &mine, NULL, RDMA_PS_TCP)) {
        fail("rdma_create_id");
    }
    struct sockaddr_in src = ipv4("127.0.0.1", 0);
    if (rdma_bind_addr(mine, (struct sockaddr*)&src)) {
        fail("rdma_bind_addr");
    }
    const pid_t child = fork();
    if (child < 0) {
        fail("fork");
    }
    int failures = 0;
    for (int i = 0; i < rounds; ++i) {
        if (child == 0) {
            /* The child: IDs of its own, each bound and checked. */
            struct rdma_cm_id* id;
            struct sockaddr_in any = ipv4("127.0.0.1", 0);
            if (rdma_create_id(channel, &id, NULL, RDMA_PS_UDP) ||
                rdma_bind_addr(id, (struct sockaddr*)&any) || rdma_get_src_port(id) == 0 ||
                rdma_destroy_id(id)) {
                ++failures;
            }
        } else {
            /* The parent: its own ID's address again and again (QUERY). */
            struct sockaddr_in again = ipv4("127.0.0.1", 0);
            struct rdma_cm_id* id;
            if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP) ||
                rdma_bind_addr(id, (struct sockaddr*)&again) || rdma_destroy_id(id) ||
                rdma_get_src_port(mine) == 0) {
                ++failures;
            }
        }
    }
    if (child == 0) {
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child) {
        fail("waitpid");
    }
    const int child_failures = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (failures || child_failures) {
        printf("parent failures %d, child %s\n", failures, child_failures ? "failed" : "ok");
        return 1;
    }
    /* The channel is still the parent's after the child's end. */
    check_channel(channel);
    puts("ok");
    return 0;
}

/* Every rdma_cm resource this process may hold: multicast joins, then IDs,
 * then event channels, each until refused. Its descriptor limit is raised
 * first, so that the daemon's share of descriptors ends the channels. */
static int hold(void) {
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    /* Joins first, while an ID may still be made. */
    struct rdma_cm_id* ud;
    if (rdma_create_id(channel, &ud, NULL, RDMA_PS_UDP)) {
        fail("rdma_create_id (UDP)");
    }
    struct sockaddr_in src = ipv4("127.0.0.1", 0);
    if (rdma_bind_addr(ud, (struct sockaddr*)&src)) {
        fail("rdma_bind_addr");
    }
    long joins = 0;
    for (;;) {
        struct sockaddr_in group = ipv4("239.0.0.0", 0);
        group.sin_addr.s_addr = htonl(ntohl(group.sin_addr.s_addr) + 1 + joins);
        if (rdma_join_multicast(ud, (struct sockaddr*)&group, NULL)) {
            break;
        }
        ++joins;
        struct rdma_cm_event* event;
        if (rdma_get_cm_event(channel, &event)) {
            fail("rdma_get_cm_event (MULTICAST_JOIN)");
        }
        rdma_ack_cm_event(event);
    }
    printf("joins %ld errno %s\n", joins, strerrorname_np(errno));
    long ids = 1;
    for (;;) {
        struct rdma_cm_id* id;
        if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) {
            break;
        }
        ++ids;
    }
    printf("ids %ld errno %s\n", ids, strerrorname_np(errno));
    long channels = 1;
    while (rdma_create_event_channel()) {
        ++channels;
    }
    printf("channels %ld errno %s\n", channels, strerrorname_np(errno));
    fflush(stdout);
    wait_for_stdin();
    return 0;
}

/* Only IDs, until refused. */
static int hold_ids(void) {
    struct rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) {
        fail("rdma_create_event_channel");
    }
    long ids = 0;
    struct rdma_cm_id* id;
    while (!rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) {
        ++ids;
    }
    printf("ids %ld errno %s\n", ids, strerrorname_np(errno));
    fflush(stdout);
    wait_for_stdin();
    return 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char* mode = argc > 1 ? argv[1] : "";
    const int count = argc > 2 ? atoi(argv[2]) : 1000;
    if (!strcmp(mode, "drain")) {
        return drain();
    }
    if (!strcmp(mode, "fill")) {
        return fill();
    }
    if (!strcmp(mode, "close")) {
        return close_behind(0);
    }
    if (!strcmp(mode, "replace")) {
        return close_behind(1);
    }
    if (!strcmp(mode, "close-under-waiter")) {
        return close_under_waiter(argc > 2 ? count : 100);
    }
    if (!strcmp(mode, "efault")) {
        return efault();
    }
    if (!strcmp(mode, "fork")) {
        return fork_hammer(count);
    }
    if (!strcmp(mode, "hold")) {
        return hold();
    }
    if (!strcmp(mode, "ids")) {
        return hold_ids();
    }
    fprintf(stderr,
            "usage: %s drain|fill|close|replace|close-under-waiter|efault|fork [ROUNDS]|hold|ids\n",
            argv[0]);
    return 2;
}
