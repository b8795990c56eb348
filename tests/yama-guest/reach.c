// The cases of tools/yama-guest that no rdma-core program shows: what a
// program's own prctl(PR_SET_PTRACER) does to uroce under
// kernel.yama.ptrace_scope = 1, and a child forked after the devices were
// opened moving data (docs/memory-access.md). Run under `uroce exec --` with
// the default devices (an RC QP on uroce0 connected to one on uroce1, in this
// one process); every transfer is 64 KiB, far over the 128 bytes the
// provider copies itself, so the daemon moves it with process_vm_*.
//
//   reach fork              the parent opens the devices and connects the
//                           QPs; a forked child WRITEs its own bytes into the
//                           parent's buffer and READs them back into its own
//   reach named-before PID  prctl(PR_SET_PTRACER, PID), then open: refused
//   reach named-any         prctl(PR_SET_PTRACER, ANY), then open and move data
//   reach named-after PID   open and move data, then prctl(PR_SET_PTRACER,
//                           PID): the next transfer completes with an error
//
// Prints what happened; exits 0 when it is what the case expects.
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kSize = 65536, kWaitSeconds = 60 };

struct side {
    struct ibv_context* context;
    struct ibv_pd* pd;
    struct ibv_cq* cq;
    struct ibv_qp* qp;
    union ibv_gid gid;
};

// The device called `name`, opened; NULL with errno set when it does not open.
static struct ibv_context* open_named(const char* name) {
    int count = 0;
    struct ibv_device** list = ibv_get_device_list(&count);
    if (!list) {
        return NULL;
    }
    struct ibv_context* context = NULL;
    int error = ENODEV;
    for (int i = 0; i < count; ++i) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            context = ibv_open_device(list[i]);
            error = errno;
            break;
        }
    }
    ibv_free_device_list(list);
    errno = error;
    return context;
}

static int open_side(struct side* side, const char* name) {
    side->context = open_named(name);
    if (!side->context) {
        printf("cannot open %s: errno %d (%s)\n", name, errno, strerror(errno));
        return -1;
    }
    side->pd = ibv_alloc_pd(side->context);
    side->cq = side->pd ? ibv_create_cq(side->context, 16, NULL, NULL, 0) : NULL;
    if (!side->cq) {
        printf("%s: no PD or CQ: %s\n", name, strerror(errno));
        return -1;
    }
    struct ibv_qp_init_attr init = {
        .send_cq = side->cq,
        .recv_cq = side->cq,
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    side->qp = ibv_create_qp(side->pd, &init);
    if (!side->qp || ibv_query_gid(side->context, 1, 0, &side->gid)) {
        printf("%s: no QP or GID: %s\n", name, strerror(errno));
        return -1;
    }
    return 0;
}

// Moves `side`'s QP to RTS, connected to `peer`'s.
static int connect_to(struct side* side, const struct side* peer) {
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1};
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(side->qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        return -1;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer->qp->qp_num;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = peer->gid;
    attr.ah_attr.grh.hop_limit = 1;
    attr.ah_attr.port_num = 1;
    if (ibv_modify_qp(side->qp, &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        return -1;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    return ibv_modify_qp(side->qp, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// uroce0 and uroce1 opened, with their QPs connected to each other.
static int open_pair(struct side* a, struct side* b) {
    if (open_side(a, "uroce0") || open_side(b, "uroce1")) {
        return -1;
    }
    if (connect_to(a, b) || connect_to(b, a)) {
        printf("cannot connect the QPs: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static struct ibv_mr* buffer(struct side* side, int fill) {
    void* memory = malloc(kSize);
    if (!memory) {
        return NULL;
    }
    memset(memory, fill, kSize);
    return ibv_reg_mr(side->pd, memory, kSize,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

// Posts one RDMA WRITE or READ of kSize bytes between `local` (of `side`)
// and `remote`, and waits for its completion: the completion's status, or
// -1 when the post fails or no completion comes within kWaitSeconds.
static int transfer(struct side* side, enum ibv_wr_opcode opcode, struct ibv_mr* local,
                    struct ibv_mr* remote) {
    struct ibv_sge sge = {(uintptr_t)local->addr, kSize, local->lkey};
    struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = opcode};
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)remote->addr;
    wr.wr.rdma.rkey = remote->rkey;
    struct ibv_send_wr* bad = NULL;
    if (ibv_post_send(side->qp, &wr, &bad)) {
        printf("ibv_post_send: %s\n", strerror(errno));
        return -1;
    }
    const time_t deadline = time(NULL) + kWaitSeconds;
    struct ibv_wc wc;
    int polled = 0;
    while ((polled = ibv_poll_cq(side->cq, 1, &wc)) == 0 && time(NULL) < deadline) {
        usleep(100);
    }
    if (polled != 1) {
        printf("%s: no completion in %d s\n", opcode == IBV_WR_RDMA_WRITE ? "WRITE" : "READ",
               kWaitSeconds);
        return -1;
    }
    return wc.status;
}

static int all_bytes(const struct ibv_mr* mr, int value) {
    const unsigned char* bytes = mr->addr;
    for (int i = 0; i < kSize; ++i) {
        if (bytes[i] != value) {
            return 0;
        }
    }
    return 1;
}

// WRITEs `from` (filled with `value`) over `to`, READs `to` back into `back`,
// and checks that `back` holds `value`: 0 when it does. (`to` may be
// another process's: a forked child's copy of its bytes is its own.)
static int write_and_read_back(struct side* a, struct ibv_mr* from, struct ibv_mr* to,
                               struct ibv_mr* back, int value) {
    const int wrote = transfer(a, IBV_WR_RDMA_WRITE, from, to);
    const int read = wrote == IBV_WC_SUCCESS ? transfer(a, IBV_WR_RDMA_READ, back, to) : -1;
    if (wrote != IBV_WC_SUCCESS || read != IBV_WC_SUCCESS) {
        printf("WRITE %s, READ %s\n", wrote < 0 ? "failed" : ibv_wc_status_str(wrote),
               read < 0 ? "not done" : ibv_wc_status_str(read));
        return 1;
    }
    return all_bytes(back, value) ? 0 : 2;
}

static int fork_case(void) {
    struct side a = {0}, b = {0};
    if (open_pair(&a, &b)) {
        return 1;
    }
    struct ibv_mr* target = buffer(&b, 0x11);  // the parent's
    if (!target) {
        return 1;
    }
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        // The child's first verb attaches it to the contexts; its MRs
        // describe its own memory, which the daemon must reach too.
        struct ibv_mr* from = buffer(&a, 0x77);
        struct ibv_mr* back = buffer(&a, 0);
        if (!from || !back) {
            printf("child: ibv_reg_mr: %s\n", strerror(errno));
            _exit(3);
        }
        const int result = write_and_read_back(&a, from, target, back, 0x77);
        if (result == 2) {
            printf("child: the bytes read back are not the child's\n");
        }
        _exit(result ? 4 : 0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("fork: the child failed (status %#x)\n", (unsigned)status);
        return 1;
    }
    if (!all_bytes(target, 0x77)) {
        printf("fork: the parent's buffer does not hold the child's bytes\n");
        return 1;
    }
    printf("fork: the child wrote %d bytes into the parent's buffer and read them back\n",
           kSize);
    return 0;
}

static int named_before_case(long ptracer) {
    if (prctl(PR_SET_PTRACER, (unsigned long)ptracer, 0UL, 0UL, 0UL) != 0) {
        printf("prctl(PR_SET_PTRACER, %ld): %s\n", ptracer, strerror(errno));
        return 1;
    }
    struct ibv_context* context = open_named("uroce0");
    if (context) {
        printf("named-before: uroce0 opened, though pid %ld is the ptracer\n", ptracer);
        return 1;
    }
    printf("named-before: ibv_open_device refused: errno %d (%s)\n", errno, strerror(errno));
    return errno == EACCES ? 0 : 1;
}

static int named_any_case(void) {
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0UL, 0UL, 0UL) != 0) {
        printf("prctl(PR_SET_PTRACER, ANY): %s\n", strerror(errno));
        return 1;
    }
    struct side a = {0}, b = {0};
    if (open_pair(&a, &b)) {
        return 1;
    }
    struct ibv_mr* from = buffer(&a, 0x5a);
    struct ibv_mr* to = buffer(&b, 0);
    struct ibv_mr* back = buffer(&a, 0);
    if (!from || !to || !back || write_and_read_back(&a, from, to, back, 0x5a) ||
        !all_bytes(to, 0x5a)) {
        return 1;
    }
    printf("named-any: %d bytes written and read back\n", kSize);
    return 0;
}

static int named_after_case(long ptracer) {
    struct side a = {0}, b = {0};
    if (open_pair(&a, &b)) {
        return 1;
    }
    struct ibv_mr* from = buffer(&a, 0x33);
    struct ibv_mr* to = buffer(&b, 0);
    struct ibv_mr* back = buffer(&a, 0);
    if (!from || !to || !back || write_and_read_back(&a, from, to, back, 0x33) ||
        !all_bytes(to, 0x33)) {
        printf("named-after: the transfer before prctl failed\n");
        return 1;
    }
    printf("named-after: %d bytes written and read back before prctl\n", kSize);
    fflush(stdout);
    if (prctl(PR_SET_PTRACER, (unsigned long)ptracer, 0UL, 0UL, 0UL) != 0) {
        printf("prctl(PR_SET_PTRACER, %ld): %s\n", ptracer, strerror(errno));
        return 1;
    }
    const int status = transfer(&a, IBV_WR_RDMA_WRITE, from, to);
    if (status < 0) {
        return 1;
    }
    printf("named-after: the WRITE after prctl completed: %s\n", ibv_wc_status_str(status));
    return status == IBV_WC_SUCCESS ? 1 : 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char* mode = argc > 1 ? argv[1] : "";
    const long pid = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    if (strcmp(mode, "fork") == 0) {
        return fork_case();
    }
    if (strcmp(mode, "named-before") == 0 && pid > 0) {
        return named_before_case(pid);
    }
    if (strcmp(mode, "named-any") == 0) {
        return named_any_case();
    }
    if (strcmp(mode, "named-after") == 0 && pid > 0) {
        return named_after_case(pid);
    }
    fprintf(stderr, "usage: reach fork | named-before PID | named-any | named-after PID\n");
    return 2;
}
