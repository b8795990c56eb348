// Registration with libibverbs, device and context lifetime.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "abi_check.h"
#include "check/process_memory.h"
#include "protocol/bridge_abi.h"
#include "provider.h"

namespace uroce {
namespace {

const verbs_match_ent kMatchTable[] = {
    {nullptr, {"rdma_device:*Nuroce*"}, 0, 0, VERBS_MATCH_MODALIAS},
    {},
};

void free_context(ibv_context* ibctx);

const verbs_context_ops kContextOps = [] {
    verbs_context_ops ops{};
    ops.advise_mr = advise_mr;
    ops.alloc_dm = alloc_dm;
    ops.alloc_mw = alloc_mw;
    ops.alloc_parent_domain = alloc_parent_domain;
    ops.alloc_pd = alloc_pd;
    ops.import_dm = import_dm;
    ops.import_mr = import_mr;
    ops.import_pd = import_pd;
    ops.unimport_dm = unimport_dm;
    ops.unimport_mr = unimport_mr;
    ops.unimport_pd = unimport_pd;
    ops.attach_mcast = attach_mcast;
    ops.bind_mw = bind_mw;
    ops.close_xrcd = close_xrcd;
    ops.async_event = async_event;
    ops.cq_event = cq_event;
    ops.create_ah = create_ah;
    ops.create_cq = create_cq;
    ops.create_cq_ex = create_cq_ex;
    ops.create_flow = create_flow;
    ops.create_qp = create_qp;
    ops.create_qp_ex = create_qp_ex;
    ops.create_rwq_ind_table = create_rwq_ind_table;
    ops.create_srq = create_srq;
    ops.create_srq_ex = create_srq_ex;
    ops.create_wq = create_wq;
    ops.dealloc_mw = dealloc_mw;
    ops.dealloc_pd = dealloc_pd;
    ops.dereg_mr = dereg_mr;
    ops.destroy_ah = destroy_ah;
    ops.destroy_cq = destroy_cq;
    ops.destroy_flow = destroy_flow;
    ops.destroy_qp = destroy_qp;
    ops.destroy_rwq_ind_table = destroy_rwq_ind_table;
    ops.destroy_srq = destroy_srq;
    ops.destroy_wq = destroy_wq;
    ops.detach_mcast = detach_mcast;
    ops.free_context = free_context;
    ops.free_dm = free_dm;
    ops.get_srq_num = get_srq_num;
    ops.modify_cq = modify_cq;
    ops.modify_qp = modify_qp;
    ops.modify_srq = modify_srq;
    ops.modify_wq = modify_wq;
    ops.open_qp = open_qp;
    ops.open_xrcd = open_xrcd;
    ops.poll_cq = poll_cq;
    ops.post_recv = post_recv;
    ops.post_send = post_send;
    ops.post_srq_recv = post_srq_recv;
    ops.query_device_ex = query_device_ex;
    ops.query_port = query_port;
    ops.query_rt_values = query_rt_values;
    ops.query_qp = query_qp;
    ops.query_srq = query_srq;
    ops.reg_dm_mr = reg_dm_mr;
    ops.reg_mr = reg_mr;
    ops.req_notify_cq = req_notify_cq;
    ops.rereg_mr = rereg_mr;
    ops.resize_cq = resize_cq;
    return ops;
}();

verbs_device* alloc_device(verbs_sysfs_dev*) {
    auto* device = static_cast<ProviderDevice*>(calloc(1, sizeof(ProviderDevice)));
    return device ? &device->ibv : nullptr;
}

void uninit_device(verbs_device* device) {
    free(reinterpret_cast<ProviderDevice*>(device));
}

// The daemon's socket path is published in the device's own sysfs directory.
bool socket_path_of(ibv_device* ibdev, std::string& path) {
    verbs_sysfs_dev* sysfs = reinterpret_cast<verbs_device*>(ibdev)->sysfs;
    char buf[256];
    if (!sysfs ||
        ibv_read_ibdev_sysfs_file(buf, sizeof(buf), sysfs, UROCE_SYSFS_SOCKET_FILE) <= 0) {
        return false;
    }
    path = buf;
    return true;
}

// The hello reply carries [doorbell eventfd, doorbell page].
int open_doorbell(ReceivedFds& received, ProviderDoorbell& out, std::string& why) {
    const int error = received.fds.size() == 2
                          ? ProviderDoorbell::open(received.fds[0], received.fds[1], out)
                          : EPROTO;
    if (error) {
        why = "uroced sent no usable doorbell";
        return error;
    }
    received.take(0);
    return 0;
}

// The contexts this process has open, for ibv_import_device.
std::mutex open_contexts_lock;
std::vector<ProviderContext*> open_contexts;

// At exit, check mode reports what each open context still holds.
void report_leaks_at_exit() {
    std::lock_guard lock(open_contexts_lock);
    for (ProviderContext* c : open_contexts) {
        if (c->check) {
            c->check->report_leaks(false);
        }
    }
    check::exit_if_found();
}

// The bridge's watch over memory the program gives back (bridge_abi.h):
// every checking context hears of it.
void memory_given_back(const void* addr, size_t length, const char* call, const void* caller) {
    if (check::reporting()) {
        return;  // libdw unmapping what it read for a report, under the check state's lock
    }
    const auto start = reinterpret_cast<uintptr_t>(addr);
    std::lock_guard lock(open_contexts_lock);
    for (ProviderContext* c : open_contexts) {
        if (c->check) {
            c->check->memory_given_back({start, start + length}, call, caller);
        }
    }
}

// Before fork(), each checking context hears whether the program asked for
// fork safety: ibv_fork_init (the bridge saw the call) or the variables
// that make libibverbs call it.
void about_to_fork() {
    const auto called = reinterpret_cast<decltype(&uroce_bridge_fork_init_called)>(
        dlsym(RTLD_DEFAULT, "uroce_bridge_fork_init_called"));
    const bool fork_safe =
        getenv("RDMAV_FORK_SAFE") || getenv("IBV_FORK_SAFE") || (called && called());
    std::lock_guard lock(open_contexts_lock);
    for (ProviderContext* c : open_contexts) {
        if (c->check) {
            c->check->forking(fork_safe);
        }
    }
}

decltype(&uroce_bridge_watch_memory) bridge_watch() {
    return reinterpret_cast<decltype(&uroce_bridge_watch_memory)>(
        dlsym(RTLD_DEFAULT, "uroce_bridge_watch_memory"));
}

// Should this library be unloaded, the bridge must not call into it.
__attribute__((destructor)) void stop_watching_memory() {
    if (auto watch = bridge_watch()) {
        watch(nullptr);
    }
}

// Check mode for a context the program opened, when asked (provider/check/check.h).
void start_checking(ProviderContext& context, const char* device) {
    const check::Mode mode = check::mode_for(context.client->daemon_checks());
    if (mode == check::Mode::kOff) {
        return;
    }
    context.check = new check::CheckState(mode, *context.client, device);
    static std::once_flag registered;
    std::call_once(registered, [] {
        atexit(report_leaks_at_exit);
        pthread_atfork(about_to_fork, nullptr, nullptr);
        // The bridge is preloaded wherever uroce runs; without it, memory
        // given back is found only when a post finds it unmapped.
        if (auto watch = bridge_watch()) {
            watch(memory_given_back);
        }
        check::watch_releases();
    });
}

// The open context (not an import) whose command fd is cmd_fd or a
// duplicate of it.
ProviderContext* opened_with(int cmd_fd) {
    std::lock_guard lock(open_contexts_lock);
    const pid_t self = getpid();
    for (ProviderContext* c : open_contexts) {
        if (c->ibv.context.async_fd >= 0 &&
            syscall(SYS_kcmp, self, self, KCMP_FILE, c->ibv.context.cmd_fd, cmd_fd) == 0) {
            return c;
        }
    }
    return nullptr;
}

// The rest of opening a context once the daemon has answered: libibverbs'
// part, then ours. On failure the client and async_fd are let go.
verbs_context* make_context(ibv_device* ibdev, int cmd_fd, ControlClient* client,
                            ProviderDoorbell&& doorbell, int async_fd) {
    auto* context = static_cast<ProviderContext*>(_verbs_init_and_alloc_context(
        ibdev, cmd_fd, sizeof(ProviderContext), &static_cast<ProviderContext*>(nullptr)->ibv,
        0 /* RDMA_DRIVER_UNKNOWN */));
    if (!context) {
        delete client;
        if (async_fd >= 0) {
            close(async_fd);
        }
        return nullptr;
    }
    context->client = client;
    new (&context->doorbell) ProviderDoorbell(std::move(doorbell));
    new (&context->local_memory) LocalMemory();
    new (&context->refusals) RefusalLog();
    context->check = nullptr;
    context->ibv.context.async_fd = async_fd;
    context->ibv.context.num_comp_vectors = 1;
    verbs_set_ops(&context->ibv, &kContextOps);
    std::lock_guard lock(open_contexts_lock);
    open_contexts.push_back(context);
    return &context->ibv;
}

verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void*) {
    std::string socket_path;
    if (!socket_path_of(ibdev, socket_path)) {
        fprintf(stderr, "uroce: %s has no " UROCE_SYSFS_SOCKET_FILE " file in its sysfs tree\n",
                ibdev->name);
        close(cmd_fd);
        errno = ENODEV;
        return nullptr;
    }
    int async_pipe[2];
    if (pipe2(async_pipe, O_CLOEXEC) != 0) {
        close(cmd_fd);
        return nullptr;
    }
    std::string why;
    ReceivedFds received;
    ControlClient* client =
        ControlClient::connect(socket_path.c_str(), ibdev->name, async_pipe[1], why, &received.fds);
    close(async_pipe[1]);
    ProviderDoorbell doorbell;
    if (int error = client ? open_doorbell(received, doorbell, why) : errno) {
        fprintf(stderr, "uroce: cannot open %s: %s\n", ibdev->name, why.c_str());
        delete client;
        close(async_pipe[0]);
        close(cmd_fd);
        errno = error;
        return nullptr;
    }
    verbs_context* context =
        make_context(ibdev, cmd_fd, client, std::move(doorbell), async_pipe[0]);
    if (context) {
        start_checking(*to_context(&context->context), ibdev->name);
    }
    return context;
}

// ibv_import_device(3): the descriptor must be (a duplicate of) the command
// descriptor of a context this process opened; the new context attaches to
// the same daemon context, so PDs, MRs and DM can be imported on it. Across
// processes uroce cannot tell whose descriptor it is: EOPNOTSUPP.
verbs_context* import_context(ibv_device*, int cmd_fd) {
    ProviderContext* original = opened_with(cmd_fd);
    if (!original) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    ibv_device* ibdev = original->ibv.context.device;
    std::string socket_path;
    std::string why;
    ReceivedFds received;
    ControlClient* client =
        socket_path_of(ibdev, socket_path)
            ? ControlClient::attach(socket_path.c_str(), ibdev->name,
                                    original->client->attach_token(), why, &received.fds)
            : nullptr;
    ProviderDoorbell doorbell;
    if (int error = client ? open_doorbell(received, doorbell, why) : ENODEV) {
        fprintf(stderr, "uroce: cannot import a context of %s: %s\n", ibdev->name, why.c_str());
        delete client;
        errno = error;
        return nullptr;
    }
    // libibverbs asks for the async fd itself (uroce_import_async_fd).
    return make_context(ibdev, cmd_fd, client, std::move(doorbell), -1);
}

void free_context(ibv_context* ibctx) {
    ProviderContext* context = to_context(ibctx);
    {
        std::lock_guard lock(open_contexts_lock);
        std::erase(open_contexts, context);
    }
    if (context->check) {
        context->check->report_leaks(true);
        delete context->check;
    }
    delete context->client;  // the daemon destroys whatever is left
    std::destroy_at(&context->doorbell);
    std::destroy_at(&context->local_memory);
    std::destroy_at(&context->refusals);
    verbs_uninit_context(&context->ibv);  // closes cmd_fd and async_fd
    free(context);
}

const verbs_device_ops kDeviceOps = {
    .name = "uroce",
    .match_min_abi_version = UROCE_UVERBS_ABI_VERSION,
    .match_max_abi_version = UROCE_UVERBS_ABI_VERSION,
    .match_table = kMatchTable,
    .static_providers = nullptr,
    .match_device = nullptr,
    .alloc_context = alloc_context,
    .import_context = import_context,
    .alloc_device = alloc_device,
    .uninit_device = uninit_device,
};

// Registers with libibverbs, unless it has other layouts than this build
// (abi_check.h): then it says so and libibverbs goes on without uroce.
__attribute__((constructor)) void register_driver() {
    constexpr abi::BuiltFor kBuiltFor{UROCE_PABI, UROCE_RDMA_CORE_FIRST, UROCE_RDMA_CORE_END,
                                      UROCE_RDMA_CORE_RELEASE};
    const abi::Found found =
        abi::probe(reinterpret_cast<const void*>(&uroce_register_driver), UROCE_PABI);
    if (std::optional<std::string> why = abi::refusal(kBuiltFor, found)) {
        fprintf(stderr, "%s\n", why->c_str());
        return;
    }
    uroce_register_driver(&kDeviceOps);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int uroce_import_async_fd(int cmd_fd) {
    ProviderContext* original = opened_with(cmd_fd);
    if (!original) {
        errno = EBADF;
        return -1;
    }
    return fcntl(original->ibv.context.async_fd, F_DUPFD_CLOEXEC, 0);
}

int report(ibv_context* context, const char* verb, int error) {
    __verbs_log(&to_context(context)->ibv, VERBS_LOG_ERR, "uroce: %s: %s: %s\n", verb,
                strerror(error), client_of(context).last_error().c_str());
    errno = error;
    return error;
}

int refuse(ibv_context* context, const char* verb, int error, const char* why) {
    __verbs_log(&to_context(context)->ibv, VERBS_LOG_ERR, "uroce: %s: %s: %s\n", verb,
                strerror(error), why);
    errno = error;
    return error;
}

int report_ring(ibv_context* context, const char* verb, int error) {
    __verbs_log(&to_context(context)->ibv, VERBS_LOG_ERR,
                "uroce: %s: cannot map the queue uroced sent: %s\n", verb, strerror(error));
    errno = error;
    return error;
}

}  // namespace uroce
