/* Small verbs programs with one bug each, and a correct twin of each, for
 * check mode (test_check.py, docs/check.md). Usage: check_programs DEVICE
 * CASE, CASE one of those in kCases; exits 0 once its work is done (a bug
 * uroce does not stop is still done), 1 when a verb fails unexpectedly.
 * Each bug sits in a function of its own, which the report's call stack
 * must name (the program is linked with -rdynamic). */
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEPTH 16
#define BYTES 4096

struct rig {
    struct ibv_context *context;
    struct ibv_comp_channel *channel;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buffer;
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* An RC QP of DEPTH sends and DEPTH receives on `cq`. */
static struct ibv_qp *create_qp(struct rig *rig, struct ibv_cq *cq) {
    struct ibv_qp_init_attr attr = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(rig->pd, &attr);
    if (!qp) die("ibv_create_qp");
    return qp;
}

static void open_rig(const char *name, struct rig *rig) {
    int count;
    struct ibv_device **devices = ibv_get_device_list(&count);
    if (!devices) die("ibv_get_device_list");
    for (int i = 0; i < count && !rig->context; ++i)
        if (!strcmp(ibv_get_device_name(devices[i]), name)) rig->context = ibv_open_device(devices[i]);
    ibv_free_device_list(devices);
    if (!rig->context) die("ibv_open_device");
    if (!(rig->pd = ibv_alloc_pd(rig->context))) die("ibv_alloc_pd");
    if (!(rig->channel = ibv_create_comp_channel(rig->context))) die("ibv_create_comp_channel");
    if (!(rig->cq = ibv_create_cq(rig->context, 4 * DEPTH, NULL, rig->channel, 0)))
        die("ibv_create_cq");
    rig->qp = create_qp(rig, rig->cq);
    if (!(rig->buffer = calloc(1, BYTES))) die("calloc");
    rig->mr = ibv_reg_mr(rig->pd, rig->buffer, BYTES,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!rig->mr) die("ibv_reg_mr");
}

static void qp_to_init(struct ibv_qp *qp) {
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                                                  IBV_ACCESS_REMOTE_READ};
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("ibv_modify_qp INIT");
}

static void to_init(struct rig *rig) {
    qp_to_init(rig->qp);
}

/* How one end of a connection is set up. */
struct end {
    uint32_t sq_psn;
    enum ibv_mtu mtu;
    uint8_t depth; /* max_rd_atomic and max_dest_rd_atomic */
    int gives_up;  /* rnr_retry 0 rather than 7 (for ever) */
    int slow_rnr;  /* min_rnr_timer 0 (655.36 ms, as rdma_cm sets) rather than 12 */
};

/* INIT, RTR and RTS, connected to QP `dest` of the same device. */
static void connect_qp(struct rig *rig, struct ibv_qp *qp, uint32_t dest, struct end end) {
    qp_to_init(qp);
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR, .path_mtu = end.mtu,
                               .dest_qp_num = dest, .rq_psn = 0,
                               .max_dest_rd_atomic = end.depth,
                               .min_rnr_timer = end.slow_rnr ? 0 : 12,
                               .ah_attr = {.is_global = 1, .port_num = 1}};
    if (ibv_query_gid(rig->context, 1, 0, &attr.ah_attr.grh.dgid)) die("ibv_query_gid");
    attr.ah_attr.grh.hop_limit = 1;
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("ibv_modify_qp RTR");
    attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                                .rnr_retry = end.gives_up ? 0 : 7, .sq_psn = end.sq_psn,
                                .max_rd_atomic = end.depth};
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("ibv_modify_qp RTS");
}

/* Connected to itself, sending from `sq_psn` (and expecting 0). */
static void connect_self_from(struct rig *rig, uint32_t sq_psn) {
    connect_qp(rig, rig->qp, rig->qp->qp_num, (struct end){sq_psn, IBV_MTU_1024, 1});
}

static void connect_self(struct rig *rig) {
    connect_self_from(rig, 0);
}

__attribute__((noinline)) void close_rig(struct rig *rig) {
    if (ibv_destroy_qp(rig->qp) || ibv_dereg_mr(rig->mr) || ibv_destroy_cq(rig->cq) ||
        ibv_destroy_comp_channel(rig->channel) || ibv_dealloc_pd(rig->pd) ||
        ibv_close_device(rig->context))
        die("destroying");
    free(rig->buffer);
}

__attribute__((noinline)) int post_write(struct rig *rig, uint64_t wr_id, int signaled) {
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = signaled ? IBV_SEND_SIGNALED : 0,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = rig->mr->rkey}};
    struct ibv_send_wr *bad;
    return ibv_post_send(rig->qp, &wr, &bad);
}

__attribute__((noinline)) void post_receive_at(struct rig *rig, uint64_t wr_id, size_t offset) {
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer + offset, .length = 1024,
                          .lkey = rig->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(rig->qp, &wr, &bad)) die("ibv_post_recv");
}

static void post_receive(struct rig *rig, uint64_t wr_id) {
    post_receive_at(rig, wr_id, 0);
}

/* The next completion, whatever its status. */
static struct ibv_wc next_completion(struct rig *rig) {
    struct ibv_wc wc;
    while (ibv_poll_cq(rig->cq, 1, &wc) == 0) continue;
    return wc;
}

/* Polls until `count` completions, each successful. */
static void poll_completions(struct rig *rig, int count) {
    struct ibv_wc wc;
    while (count > 0) {
        int n = ibv_poll_cq(rig->cq, 1, &wc);
        if (n < 0) die("ibv_poll_cq");
        if (n == 1 && wc.status != IBV_WC_SUCCESS) {
            fprintf(stderr, "completion %s\n", ibv_wc_status_str(wc.status));
            exit(1);
        }
        count -= n;
    }
}

/* post-in-wrong-state: a send on a QP left in INIT. */
__attribute__((noinline)) void send_before_rts(struct rig *rig) {
    to_init(rig);
    if (post_write(rig, 1, 1) == 0) {
        fprintf(stderr, "ibv_post_send in INIT succeeded\n");
        exit(1);
    }
}

/* The twin of post-in-wrong-state and of bad-local-key: a write within its
 * MR on a connected QP. */
__attribute__((noinline)) void write_after_rts(struct rig *rig) {
    connect_self(rig);
    if (post_write(rig, 1, 1)) die("ibv_post_send");
    poll_completions(rig, 1);
}

/* send-queue-unsignaled: four queues' worth of writes, none signaled. */
__attribute__((noinline)) void post_unsignaled_only(struct rig *rig) {
    connect_self(rig);
    for (int i = 0; i < 4 * DEPTH;) {
        if (post_write(rig, i, 0) == 0)
            ++i;
        else
            usleep(100); /* uroce frees slots as it sends, as rxe: no ENOMEM for long */
    }
    while (post_write(rig, 999, 1)) usleep(100);
    poll_completions(rig, 1);
}

/* send-queue-unsignaled while the daemon lags (test_check.py stops it
 * between the two lines it writes): unsignaled writes posted until the ring
 * refuses one, then the count on stdout. */
static void wait_for_a_line(void) {
    char line[16];
    if (!fgets(line, sizeof(line), stdin)) die("reading stdin");
}

__attribute__((noinline)) void post_unsignaled_while_it_lags(struct rig *rig) {
    connect_self(rig);
    printf("connected\n");
    fflush(stdout);
    wait_for_a_line();
    int posted = 0;
    while (posted < 4 * DEPTH && post_write(rig, posted, 0) == 0) ++posted;
    printf("posted %d\n", posted);
    fflush(stdout);
    wait_for_a_line();
}

__attribute__((noinline)) void post_signaled_every_eighth(struct rig *rig) {
    connect_self(rig);
    for (int i = 1; i <= 4 * DEPTH; ++i) {
        if (post_write(rig, i, i % 8 == 0)) die("ibv_post_send");
        if (i % 8 == 0) poll_completions(rig, 1);
    }
}

/* dereg-in-use: a receive still posted when its MR goes. */
__attribute__((noinline)) void dereg_under_a_receive(struct rig *rig) {
    connect_self(rig);
    post_receive(rig, 7);
    if (ibv_dereg_mr(rig->mr)) die("ibv_dereg_mr");
    rig->mr = ibv_reg_mr(rig->pd, rig->buffer, BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (!rig->mr) die("ibv_reg_mr");
}

__attribute__((noinline)) void dereg_after_the_receive(struct rig *rig) {
    connect_self(rig);
    post_receive(rig, 7);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer + 2048, .length = 8, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    poll_completions(rig, 2); /* the send's and the receive's */
    if (ibv_dereg_mr(rig->mr)) die("ibv_dereg_mr");
    rig->mr = ibv_reg_mr(rig->pd, rig->buffer, BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (!rig->mr) die("ibv_reg_mr");
}

/* bad-local-key: a gather element longer than its MR. */
__attribute__((noinline)) void write_beyond_the_mr(struct rig *rig) {
    connect_self(rig);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = BYTES + 64,
                          .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc = next_completion(rig);
    if (wc.status == IBV_WC_SUCCESS) {
        fprintf(stderr, "a write beyond its MR succeeded\n");
        exit(1);
    }
}

/* bad-local-key, of an SRQ: a receive whose MR is of another PD than the
 * SRQ's. The twin uses an MR of the SRQ's PD. */
static void post_to_an_srq(struct rig *rig, int other_pd) {
    struct ibv_srq_init_attr attr = {.attr = {.max_wr = DEPTH, .max_sge = 1}};
    struct ibv_srq *srq = ibv_create_srq(rig->pd, &attr);
    struct ibv_pd *pd = other_pd ? ibv_alloc_pd(rig->context) : rig->pd;
    if (!srq || !pd) die("ibv_create_srq");
    struct ibv_mr *mr = ibv_reg_mr(pd, rig->buffer, BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) die("ibv_reg_mr");
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 6, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_srq_recv(srq, &wr, &bad)) die("ibv_post_srq_recv");
    if (ibv_destroy_srq(srq) || ibv_dereg_mr(mr)) die("destroying");
    if (other_pd && ibv_dealloc_pd(pd)) die("ibv_dealloc_pd");
}

__attribute__((noinline)) void post_to_an_srq_from_another_pd(struct rig *rig) {
    post_to_an_srq(rig, 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void post_to_an_srq_from_its_pd(struct rig *rig) {
    post_to_an_srq(rig, 0);
    __asm__ volatile("" ::: "memory");
}

/* unacked-events: a completion event taken and never acknowledged when
 * the CQ is destroyed (in close_rig). */
static void take_an_event(struct rig *rig) {
    connect_self(rig);
    if (ibv_req_notify_cq(rig->cq, 0)) die("ibv_req_notify_cq");
    if (post_write(rig, 6, 1)) die("ibv_post_send");
    struct ibv_cq *cq;
    void *cq_context;
    if (ibv_get_cq_event(rig->channel, &cq, &cq_context)) die("ibv_get_cq_event");
    poll_completions(rig, 1);
}

__attribute__((noinline)) void event_not_acknowledged(struct rig *rig) {
    take_an_event(rig);
}

__attribute__((noinline)) void event_acknowledged(struct rig *rig) {
    take_an_event(rig);
    ibv_ack_cq_events(rig->cq, 1);
}

/* unacked-events: the event acknowledged on another CQ than the one
 * ibv_get_cq_event returned; that CQ is destroyed here, the event's own in
 * close_rig. */
__attribute__((noinline)) void ack_on_another_cq(struct rig *rig) {
    struct ibv_cq *other = ibv_create_cq(rig->context, DEPTH, NULL, rig->channel, 0);
    if (!other) die("ibv_create_cq");
    take_an_event(rig);
    ibv_ack_cq_events(other, 1);
    if (ibv_destroy_cq(other)) die("ibv_destroy_cq");
}

/* unacked-events: ibv_get_cq_event on a CQ whose one arm was used by the
 * first event; an alarm ends the wait the bug makes endless. */
static void on_alarm(int signal) {
    (void)signal;
}

/* Whether ibv_get_cq_event returned an event within 3 s. */
static int event_within_seconds(struct rig *rig) {
    struct sigaction action = {.sa_handler = on_alarm}; /* no SA_RESTART: the read ends */
    sigaction(SIGALRM, &action, NULL);
    alarm(3);
    struct ibv_cq *cq;
    void *cq_context;
    const int got = ibv_get_cq_event(rig->channel, &cq, &cq_context) == 0;
    alarm(0);
    return got;
}

static void wait_for_a_second_event(struct rig *rig, int rearm) {
    take_an_event(rig);
    ibv_ack_cq_events(rig->cq, 1);
    if (rearm && ibv_req_notify_cq(rig->cq, 0)) die("ibv_req_notify_cq");
    if (post_write(rig, 7, 1)) die("ibv_post_send");
    const int got = event_within_seconds(rig);
    if (got != rearm) {
        fprintf(stderr, "ibv_get_cq_event %s\n", got ? "returned an event" : "was interrupted");
        exit(1);
    }
    if (got) ibv_ack_cq_events(rig->cq, 1);
    poll_completions(rig, 1);
}

__attribute__((noinline)) void wait_without_rearming(struct rig *rig) {
    wait_for_a_second_event(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void wait_after_rearming(struct rig *rig) {
    wait_for_a_second_event(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* unacked-events: an async event (IBV_EVENT_QP_ACCESS_ERR, from a WRITE
 * with a bad rkey to itself) not acknowledged when the QP is destroyed (in
 * close_rig). The failed WRITE's completion is left unpolled: polled, it
 * is bad-remote-key's. */
static void take_an_async_event(struct rig *rig, struct ibv_async_event *event) {
    connect_self(rig);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 8, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer,
                                         .rkey = rig->mr->rkey ^ 0x77}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    for (;;) {
        if (ibv_get_async_event(rig->context, event)) die("ibv_get_async_event");
        if (event->event_type == IBV_EVENT_QP_ACCESS_ERR) return;
        ibv_ack_async_event(event);
    }
}

__attribute__((noinline)) void async_event_not_acknowledged(struct rig *rig) {
    struct ibv_async_event event;
    take_an_async_event(rig, &event);
}

__attribute__((noinline)) void async_event_acknowledged(struct rig *rig) {
    struct ibv_async_event event;
    take_an_async_event(rig, &event);
    ibv_ack_async_event(&event);
}

/* cq-overrun: DEPTH receives posted on a QP whose CQ holds 4 (7, rounded). */
static void post_receives_on(struct rig *rig, int cq_entries) {
    struct ibv_cq *cq = ibv_create_cq(rig->context, cq_entries, NULL, NULL, 0);
    if (!cq) die("ibv_create_cq");
    struct ibv_qp *qp = create_qp(rig, cq);
    struct ibv_qp *rig_qp = rig->qp;
    rig->qp = qp;
    connect_self(rig);
    for (int i = 0; i < DEPTH; ++i) post_receive(rig, i);
    rig->qp = rig_qp;
    if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq)) die("destroying");
}

__attribute__((noinline)) void post_more_than_the_cq_holds(struct rig *rig) {
    post_receives_on(rig, 4);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
}

__attribute__((noinline)) void post_what_the_cq_holds(struct rig *rig) {
    post_receives_on(rig, DEPTH);
    __asm__ volatile("" ::: "memory");
}

/* overlapping-receives: the second receive's buffer starts inside the first's. */
__attribute__((noinline)) void post_overlapping_receives(struct rig *rig) {
    connect_self(rig);
    post_receive_at(rig, 1, 0);
    post_receive_at(rig, 2, 512);
    __asm__ volatile("" ::: "memory");
}

/* overlapping-receives between QPs: an RDMA READ into the buffer of
 * another QP's READ not yet polled (the same range: one queue's scratch
 * buffer is not reported, two queues' is); the twin polls the first. */
static void read_into_the_buffer(struct rig *rig, struct ibv_qp *qp, struct ibv_mr *mr,
                                 uint64_t wr_id) {
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = mr->rkey}}, *bad;
    if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

static void read_from_two_qps(struct rig *rig, int in_turn) {
    struct ibv_mr *mr = ibv_reg_mr(rig->pd, rig->buffer, BYTES,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr) die("ibv_reg_mr");
    struct ibv_qp *other = create_qp(rig, rig->cq);
    connect_self(rig);
    connect_qp(rig, other, other->qp_num, (struct end){0, IBV_MTU_1024, 1});
    read_into_the_buffer(rig, rig->qp, mr, 20);
    if (in_turn) poll_completions(rig, 1);
    read_into_the_buffer(rig, other, mr, 21);
    poll_completions(rig, in_turn ? 1 : 2);
    if (ibv_destroy_qp(other) || ibv_dereg_mr(mr)) die("destroying");
}

__attribute__((noinline)) void read_from_two_qps_at_once(struct rig *rig) {
    read_from_two_qps(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void read_from_two_qps_in_turn(struct rig *rig) {
    read_from_two_qps(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* Buffers side by side, and one buffer for every receive (a scratch
 * buffer): neither is reported. */
__attribute__((noinline)) void post_receives_side_by_side(struct rig *rig) {
    connect_self(rig);
    post_receive_at(rig, 1, 0);
    post_receive_at(rig, 2, 1024);
    post_receive_at(rig, 3, 2048);
    post_receive_at(rig, 4, 2048);
}

/* send-buffer-changed: the source of a WRITE rewritten before its
 * completion is polled. */
__attribute__((noinline)) void rewrite_before_the_completion(struct rig *rig) {
    connect_self(rig);
    memset(rig->buffer, 'a', 64);
    if (post_write(rig, 3, 1)) die("ibv_post_send");
    memset(rig->buffer, 'b', 64);
    poll_completions(rig, 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void rewrite_after_the_completion(struct rig *rig) {
    connect_self(rig);
    for (int i = 0; i < 2; ++i) {
        memset(rig->buffer, 'a' + i, 64);
        if (post_write(rig, 3, 1)) die("ibv_post_send");
        poll_completions(rig, 1);
    }
}

/* memory-unmapped: an MR's memory unmapped out of the bridge's sight (by
 * the system call itself), then a send from it. */
static void send_from_a_mapping(struct rig *rig, int unmap_first) {
    connect_self(rig);
    /* Large, so that what maps memory meanwhile (the report reading debug
     * information, a sanitizer's allocator) lands in the top of the hole
     * the system call leaves (mappings go top-down), not on the element. */
    const size_t bytes = 16 << 20;
    char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) die("mmap");
    struct ibv_mr *mr = ibv_reg_mr(rig->pd, region, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) die("ibv_reg_mr");
    if (unmap_first && syscall(SYS_munmap, region, bytes)) die("munmap");
    struct ibv_sge sge = {.addr = (uintptr_t)region, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 4, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc = next_completion(rig);
    if ((wc.status == IBV_WC_SUCCESS) == unmap_first) {
        fprintf(stderr, "the write completed with %s\n", ibv_wc_status_str(wc.status));
        exit(1);
    }
    if (ibv_dereg_mr(mr)) die("ibv_dereg_mr");
    if (!unmap_first && munmap(region, bytes)) die("munmap");
}

__attribute__((noinline)) void send_from_unmapped_memory(struct rig *rig) {
    send_from_a_mapping(rig, 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void unmap_after_dereg(struct rig *rig) {
    send_from_a_mapping(rig, 0);
    __asm__ volatile("" ::: "memory");
}

/* memory-unmapped: a block of malloc's large enough to be a mapping of its
 * own registered and sent from, then freed (glibc unmaps it inside free(),
 * by no call the bridge stands in front of) and sent from again: reported,
 * where reading it would crash. The twin deregisters it first. The sends
 * are longer than the provider copies at the post. Says on stdout whether
 * free() unmapped the block (a sanitizer's allocator keeps it). */
static void send_from_a_freed_block(struct rig *rig, int free_first) {
    connect_self(rig);
    /* Above glibc's largest mmap threshold (32 MiB), below the quarantine
     * the sanitizer build gives AddressSanitizer (64 MiB), which keeps it. */
    const size_t bytes = 48 << 20;
    char *block = malloc(bytes);
    if (!block) die("malloc");
    memset(block, 'f', 4096);
    struct ibv_mr *mr = ibv_reg_mr(rig->pd, block, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) die("ibv_reg_mr");
    struct ibv_sge sge = {.addr = (uintptr_t)block, .length = 4096, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc = next_completion(rig);
    if (wc.status != IBV_WC_SUCCESS) die("the first write");
    if (!free_first && ibv_dereg_mr(mr)) die("ibv_dereg_mr");
    const uintptr_t page = (uintptr_t)block & ~(uintptr_t)4095;
    free(block);
    const int unmapped = msync((void *)page, 4096, MS_ASYNC) && errno == ENOMEM;
    printf("free() %s the block\n", unmapped ? "unmapped" : "kept");
    if (!free_first) return;
    wr.wr_id = 6;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    wc = next_completion(rig);
    if (unmapped && wc.status == IBV_WC_SUCCESS) {
        fprintf(stderr, "the write from unmapped memory completed with success\n");
        exit(1);
    }
    if (ibv_dereg_mr(mr)) die("ibv_dereg_mr");
}

__attribute__((noinline)) void send_from_freed_memory(struct rig *rig) {
    send_from_a_freed_block(rig, 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void free_after_dereg(struct rig *rig) {
    send_from_a_freed_block(rig, 0);
    __asm__ volatile("" ::: "memory");
}

/* memory-unmapped: an MR's first page given back with madvise, then a
 * send from it. Pages of a private mapping come back as new zeroed pages,
 * not the MR's; the twin's, of a shared mapping, come back as they were. */
static void send_after_madvise(struct rig *rig, int flags) {
    connect_self(rig);
    const size_t bytes = 1 << 16;
    char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) die("mmap");
    memset(region, 'x', bytes);
    struct ibv_mr *mr = ibv_reg_mr(rig->pd, region, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) die("ibv_reg_mr");
    if (madvise(region, 4096, MADV_DONTNEED)) die("madvise");
    struct ibv_sge sge = {.addr = (uintptr_t)region + 64, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 19, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    poll_completions(rig, 1);
    if (ibv_dereg_mr(mr) || munmap(region, bytes)) die("ibv_dereg_mr/munmap");
}

__attribute__((noinline)) void send_from_memory_given_back(struct rig *rig) {
    send_after_madvise(rig, MAP_PRIVATE);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void send_from_shared_memory_advised(struct rig *rig) {
    send_after_madvise(rig, MAP_SHARED);
    __asm__ volatile("" ::: "memory");
}

/* peer-mismatch: the QP (its own peer) sends from PSN 5 and expects 0. */
__attribute__((noinline)) void send_from_another_psn(struct rig *rig) {
    connect_self_from(rig, 5);
    __asm__ volatile("" ::: "memory");
}

/* peer-mismatch: two QPs connected to each other, one with a path MTU of
 * 4096 and 4 READs outstanding, the other with 1024 and room for 1. */
static void connect_a_pair(struct rig *rig, struct end first, struct end second) {
    struct ibv_qp *other = create_qp(rig, rig->cq);
    connect_qp(rig, rig->qp, other->qp_num, first);
    connect_qp(rig, other, rig->qp->qp_num, second);
    if (ibv_destroy_qp(other)) die("ibv_destroy_qp");
}

__attribute__((noinline)) void connect_a_pair_unevenly(struct rig *rig) {
    connect_a_pair(rig, (struct end){0, IBV_MTU_4096, 4}, (struct end){0, IBV_MTU_1024, 1});
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void connect_a_pair_evenly(struct rig *rig) {
    connect_a_pair(rig, (struct end){0, IBV_MTU_1024, 4}, (struct end){0, IBV_MTU_1024, 4});
    __asm__ volatile("" ::: "memory");
}

/* peer-mismatch: rnr_retry 0, and a send that arrives before its receive
 * is posted (the twin posts the receive first). */
/* A signaled SEND (wr_id 2) of 8 bytes at buffer + 2048, on a QP
 * connected to itself. */
static void post_send_to_self(struct rig *rig) {
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer + 2048, .length = 8, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
}

static void send_before_or_after_the_receive(struct rig *rig, int receive_first) {
    connect_qp(rig, rig->qp, rig->qp->qp_num, (struct end){0, IBV_MTU_1024, 1, 1});
    if (receive_first) post_receive(rig, 1);
    post_send_to_self(rig);
    struct ibv_wc wc = next_completion(rig);
    if ((wc.status == IBV_WC_RNR_RETRY_EXC_ERR) == receive_first) {
        fprintf(stderr, "the send completed with %s\n", ibv_wc_status_str(wc.status));
        exit(1);
    }
}

__attribute__((noinline)) void send_before_the_receive(struct rig *rig) {
    send_before_or_after_the_receive(rig, 0);
    __asm__ volatile("" ::: "memory");
}

/* rnr-settings: a SEND that meets an RNR NAK from a receiver (itself)
 * whose min_rnr_timer is 0: the receive is posted 50 ms late, and the send
 * waits 655.36 ms. The twin's receiver sets 12 (0.64 ms). */
static void send_to_a_late_receive(struct rig *rig, int slow_rnr) {
    connect_qp(rig, rig->qp, rig->qp->qp_num, (struct end){0, IBV_MTU_1024, 1, 0, slow_rnr});
    post_send_to_self(rig);
    usleep(50 * 1000);
    post_receive(rig, 1);
    poll_completions(rig, 2);
}

__attribute__((noinline)) void receive_late_with_a_long_rnr_timer(struct rig *rig) {
    send_to_a_late_receive(rig, 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void receive_late_with_a_short_rnr_timer(struct rig *rig) {
    send_to_a_late_receive(rig, 0);
}

__attribute__((noinline)) void send_after_the_receive(struct rig *rig) {
    send_before_or_after_the_receive(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* bad-remote-key: an RDMA READ of an MR registered without
 * IBV_ACCESS_REMOTE_READ. */
__attribute__((noinline)) void read_without_remote_read(struct rig *rig) {
    /* Between two QPs: a QP that is its own peer goes to ERR as the
     * responder before its request completes, and the request is flushed. */
    struct ibv_qp *other = create_qp(rig, rig->cq);
    connect_qp(rig, rig->qp, other->qp_num, (struct end){0, IBV_MTU_1024, 1});
    connect_qp(rig, other, rig->qp->qp_num, (struct end){0, IBV_MTU_1024, 1});
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 10, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc = next_completion(rig);
    if (wc.status != IBV_WC_REM_ACCESS_ERR) {
        fprintf(stderr, "the READ completed with %s\n", ibv_wc_status_str(wc.status));
        exit(1);
    }
    if (ibv_destroy_qp(other)) die("ibv_destroy_qp");
}

/* peer-mismatch: a UD datagram with another Q_Key than its receiver's. */
static struct ibv_qp *ud_qp(struct rig *rig, uint32_t qkey) {
    struct ibv_qp_init_attr init = {
        .send_cq = rig->cq, .recv_cq = rig->cq, .qp_type = IBV_QPT_UD,
        .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(rig->pd, &init);
    if (!qp) die("ibv_create_qp UD");
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        die("ibv_modify_qp UD INIT");
    attr.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE)) die("ibv_modify_qp UD RTR");
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)) die("ibv_modify_qp UD RTS");
    return qp;
}

static void send_a_datagram(struct rig *rig, uint32_t remote_qkey) {
    struct ibv_qp *sender = ud_qp(rig, 0x1111), *receiver = ud_qp(rig, 0x2222);
    struct ibv_ah_attr route = {.is_global = 1, .port_num = 1, .grh = {.hop_limit = 1}};
    if (ibv_query_gid(rig->context, 1, 0, &route.grh.dgid)) die("ibv_query_gid");
    struct ibv_ah *ah = ibv_create_ah(rig->pd, &route);
    if (!ah) die("ibv_create_ah");
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 8, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 11, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.ud = {.ah = ah, .remote_qpn = receiver->qp_num,
                                       .remote_qkey = remote_qkey}}, *bad;
    if (ibv_post_send(sender, &wr, &bad)) die("ibv_post_send UD");
    poll_completions(rig, 1);
    if (ibv_destroy_qp(sender) || ibv_destroy_qp(receiver) || ibv_destroy_ah(ah))
        die("destroying UD");
}

__attribute__((noinline)) void send_with_another_qkey(struct rig *rig) {
    send_a_datagram(rig, 0x3333);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void send_with_the_receivers_qkey(struct rig *rig) {
    send_a_datagram(rig, 0x2222);
    __asm__ volatile("" ::: "memory");
}

/* write-race: WRITEs of two QPs into overlapping bytes, the second posted
 * before the first completed (the twin polls in between). */
/* A WRITE on `qp` (of the device of `from`, whose buffer is the source)
 * into `to`'s buffer at `offset`. */
static void write_into(struct rig *from, struct ibv_qp *qp, struct rig *to, uint64_t wr_id,
                       size_t offset) {
    struct ibv_sge sge = {.addr = (uintptr_t)from->buffer, .length = 64, .lkey = from->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)to->buffer + offset,
                                         .rkey = to->mr->rkey}}, *bad;
    if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

static void write_from_two_qps(struct rig *rig, int wait_between) {
    struct ibv_qp *other = create_qp(rig, rig->cq);
    connect_qp(rig, rig->qp, other->qp_num, (struct end){0, IBV_MTU_1024, 1});
    connect_qp(rig, other, rig->qp->qp_num, (struct end){0, IBV_MTU_1024, 1});
    write_into(rig, rig->qp, rig, 12, 2048);
    if (wait_between) poll_completions(rig, 1);
    write_into(rig, other, rig, 13, 2048 + 32);
    poll_completions(rig, wait_between ? 1 : 2);
    if (ibv_destroy_qp(other)) die("ibv_destroy_qp");
}

__attribute__((noinline)) void write_from_two_qps_at_once(struct rig *rig) {
    write_from_two_qps(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void write_from_two_qps_in_turn(struct rig *rig) {
    write_from_two_qps(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* dereg-in-use: a memory window deallocated while its bind (a type 2
 * window's IBV_WR_BIND_MW) has not completed. */
static void bind_a_window(struct rig *rig, int poll_first) {
    connect_self(rig);
    struct ibv_mr *mr = ibv_reg_mr(rig->pd, rig->buffer, BYTES,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_MW_BIND);
    struct ibv_mw *mw = ibv_alloc_mw(rig->pd, IBV_MW_TYPE_2);
    if (!mr || !mw) die("ibv_reg_mr/ibv_alloc_mw");
    struct ibv_send_wr wr = {.wr_id = 14, .opcode = IBV_WR_BIND_MW,
                             .send_flags = IBV_SEND_SIGNALED,
                             .bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey),
                                         .bind_info = {.mr = mr, .addr = (uintptr_t)rig->buffer,
                                                       .length = 1024,
                                                       .mw_access_flags =
                                                           IBV_ACCESS_REMOTE_WRITE}}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send bind");
    if (poll_first) poll_completions(rig, 1);
    if (ibv_dealloc_mw(mw)) die("ibv_dealloc_mw");
    if (!poll_first) next_completion(rig); /* the bind's, whatever its status */
    if (ibv_dereg_mr(mr)) die("ibv_dereg_mr");
}

__attribute__((noinline)) void dealloc_a_window_being_bound(struct rig *rig) {
    bind_a_window(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void dealloc_a_window_once_bound(struct rig *rig) {
    bind_a_window(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* write-race across devices: a QP of uroce1 and a QP of the rig's device
 * write into the rig's memory at once. */
__attribute__((noinline)) void write_from_two_devices_at_once(struct rig *rig) {
    struct rig far = {0};
    open_rig("uroce1", &far);
    struct ibv_qp *near_peer = create_qp(rig, rig->cq), *far_peer = create_qp(rig, rig->cq);
    const struct end end = {0, IBV_MTU_1024, 1};
    connect_qp(rig, rig->qp, near_peer->qp_num, end); /* the rig's device to itself */
    connect_qp(rig, near_peer, rig->qp->qp_num, end);
    connect_qp(rig, far.qp, far_peer->qp_num, end);   /* uroce1 to the rig's device */
    connect_qp(&far, far_peer, far.qp->qp_num, end);
    write_into(rig, rig->qp, rig, 15, 2048);
    write_into(&far, far.qp, rig, 16, 2048 + 32);
    poll_completions(rig, 1);
    poll_completions(&far, 1);
    if (ibv_destroy_qp(near_peer) || ibv_destroy_qp(far_peer)) die("ibv_destroy_qp");
    close_rig(&far);
}

/* write-race across programs: a child process, with a context of its own,
 * writes into the rig's memory while the rig's WRITE there has not
 * completed; the twin polls its WRITE before it tells the child to go.
 * The daemon sees both; the child, the second writer, is told. */
static void pipe_io(int fd, void *bytes, size_t length, int writing) {
    ssize_t n = writing ? write(fd, bytes, length) : read(fd, bytes, length);
    if (n != (ssize_t)length) _exit(1); /* the other process died: no leak report */
}

static void write_from_a_child(struct rig *rig, int to_child, int to_parent) {
    struct rig own = {0};
    open_rig(ibv_get_device_name(rig->context->device), &own);
    uint32_t dest, qpn = own.qp->qp_num;
    char go;
    pipe_io(to_parent, &qpn, sizeof(qpn), 1);
    pipe_io(to_child, &dest, sizeof(dest), 0);
    connect_qp(&own, own.qp, dest, (struct end){0, IBV_MTU_1024, 1});
    pipe_io(to_child, &go, 1, 0);
    write_into(&own, own.qp, rig, 18, 2048 + 32); /* the rig's buffer and rkey, as forked */
    poll_completions(&own, 1);
    pipe_io(to_parent, &go, 1, 1);
    close_rig(&own);
    exit(0);
}

static void write_from_two_programs(struct rig *rig, int wait_between) {
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent)) die("pipe");
    struct ibv_qp *near_peer = create_qp(rig, rig->cq), *far_peer = create_qp(rig, rig->cq);
    const struct end end = {0, IBV_MTU_1024, 1};
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        write_from_a_child(rig, to_child[0], to_parent[1]);
    }
    close(to_child[0]); /* each end is one process's: a death reads as EOF */
    close(to_parent[1]);
    uint32_t child_qpn;
    char done = 'g';
    pipe_io(to_parent[0], &child_qpn, sizeof(child_qpn), 0);
    pipe_io(to_child[1], &far_peer->qp_num, sizeof(far_peer->qp_num), 1);
    connect_qp(rig, far_peer, child_qpn, end);
    connect_qp(rig, rig->qp, near_peer->qp_num, end);
    connect_qp(rig, near_peer, rig->qp->qp_num, end);
    /* Its source registered after the fork: one from before, used by the
     * parent now, is fork-unsafe's. */
    struct rig source = *rig;
    if (!(source.buffer = calloc(1, 64))) die("calloc");
    if (!(source.mr = ibv_reg_mr(rig->pd, source.buffer, 64, IBV_ACCESS_LOCAL_WRITE)))
        die("ibv_reg_mr");
    write_into(&source, rig->qp, rig, 17, 2048);
    if (wait_between) poll_completions(rig, 1);
    pipe_io(to_child[1], &done, 1, 1);
    pipe_io(to_parent[0], &done, 1, 0);
    if (!wait_between) poll_completions(rig, 1);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status))
        _exit(1);
    close(to_child[1]);
    close(to_parent[0]);
    if (ibv_destroy_qp(near_peer) || ibv_destroy_qp(far_peer)) die("ibv_destroy_qp");
    if (ibv_dereg_mr(source.mr)) die("ibv_dereg_mr");
    free(source.buffer);
}

__attribute__((noinline)) void write_from_two_programs_at_once(struct rig *rig) {
    write_from_two_programs(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void write_from_two_programs_in_turn(struct rig *rig) {
    write_from_two_programs(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* cq-overrun, found when it happens: receives of an SRQ (which the posted
 * work does not count ahead) complete into a CQ smaller than them; the
 * twin polls each. */
static void receive_through_an_srq(struct rig *rig, int poll_each) {
    struct ibv_cq *small = ibv_create_cq(rig->context, 2, NULL, NULL, 0);
    struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 32, .max_sge = 1}};
    struct ibv_srq *srq = ibv_create_srq(rig->pd, &srq_attr);
    if (!small || !srq || small->cqe >= 32) die("ibv_create_cq/ibv_create_srq");
    struct ibv_qp_init_attr attr = {
        .send_cq = rig->cq, .recv_cq = small, .srq = srq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 32, .max_send_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(rig->pd, &attr);
    if (!qp) die("ibv_create_qp");
    connect_qp(rig, qp, qp->qp_num, (struct end){0, IBV_MTU_1024, 1});
    const int messages = 32; /* more than the CQ's ring holds, whatever its rounding */
    for (int i = 0; i < messages; ++i) {
        struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer + 64 * i, .length = 64,
                              .lkey = rig->mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_srq_recv(srq, &wr, &bad)) die("ibv_post_srq_recv");
    }
    struct ibv_wc wc;
    for (int i = 0; i < messages; ++i) {
        struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer + 3072, .length = 64,
                              .lkey = rig->mr->lkey};
        struct ibv_send_wr wr = {.wr_id = 200 + i, .sg_list = &sge, .num_sge = 1,
                                 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
        if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
        if (!poll_each) continue;
        poll_completions(rig, 1);
        while (ibv_poll_cq(small, 1, &wc) == 0) continue;
    }
    if (!poll_each) {
        struct ibv_async_event event;
        if (ibv_get_async_event(rig->context, &event)) die("ibv_get_async_event");
        if (event.event_type != IBV_EVENT_CQ_ERR) die("not IBV_EVENT_CQ_ERR");
        ibv_ack_async_event(&event);
    }
    if (ibv_destroy_qp(qp) || ibv_destroy_srq(srq) || ibv_destroy_cq(small)) die("destroying");
}

__attribute__((noinline)) void overrun_a_cq_through_an_srq(struct rig *rig) {
    receive_through_an_srq(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void poll_each_srq_receive(struct rig *rig) {
    receive_through_an_srq(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* No bug: batches of the extended send API that are aborted post nothing,
 * so twice the send queue's depth of them leaves it empty. */
__attribute__((noinline)) void abort_batches(struct rig *rig) {
    struct ibv_qp_init_attr_ex attr = {
        .send_cq = rig->cq, .recv_cq = rig->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = rig->pd,
        .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE};
    struct ibv_qp *qp = ibv_create_qp_ex(rig->context, &attr);
    if (!qp) die("ibv_create_qp_ex");
    connect_qp(rig, qp, qp->qp_num, (struct end){0, IBV_MTU_1024, 1});
    struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp);
    for (int i = 0; i <= 2 * DEPTH; ++i) {
        ibv_wr_start(qpx);
        for (int wr = 0; wr < 2; ++wr) { /* the first is written when the second starts */
            qpx->wr_id = 30 + i;
            qpx->wr_flags = i == 2 * DEPTH ? IBV_SEND_SIGNALED : 0;
            ibv_wr_rdma_write(qpx, rig->mr->rkey, (uintptr_t)rig->buffer + 2048);
            ibv_wr_set_sge(qpx, rig->mr->lkey, (uintptr_t)rig->buffer, 64);
        }
        if (i < 2 * DEPTH) {
            ibv_wr_abort(qpx);
        } else if (ibv_wr_complete(qpx)) {
            die("ibv_wr_complete");
        }
    }
    poll_completions(rig, 2);
    if (ibv_destroy_qp(qp)) die("ibv_destroy_qp");
}

/* leak: the program exits with its objects alive. */
__attribute__((noinline)) void exit_without_cleanup(struct rig *rig) {
    (void)rig;
    exit(0);
}

/* stranded-completion: a WRITE completes while the CQ is not armed; the
 * program arms it and waits without polling once more (an alarm ends the
 * wait the bug makes endless). The twin polls after the arm, as
 * ibv_get_cq_event(3) says. */
static void rearm_after_a_completion(struct rig *rig, int poll_after_arm) {
    take_an_event(rig);
    ibv_ack_cq_events(rig->cq, 1);
    if (post_write(rig, 8, 1)) die("ibv_post_send");
    usleep(200 * 1000); /* it completes before the arm */
    if (ibv_req_notify_cq(rig->cq, 0)) die("ibv_req_notify_cq");
    if (poll_after_arm) {
        poll_completions(rig, 1);
        return;
    }
    if (event_within_seconds(rig)) {
        fprintf(stderr, "ibv_get_cq_event returned an event\n");
        exit(1);
    }
    poll_completions(rig, 1);
}

__attribute__((noinline)) void arm_and_wait_without_polling(struct rig *rig) {
    rearm_after_a_completion(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void arm_and_poll_again(struct rig *rig) {
    rearm_after_a_completion(rig, 1);
}

/* The rig's QP replaced by one asked for `max_inline` bytes inline,
 * connected to itself. */
static void recreate_qp(struct rig *rig, uint32_t max_inline) {
    if (ibv_destroy_qp(rig->qp)) die("ibv_destroy_qp");
    struct ibv_qp_init_attr attr = {
        .send_cq = rig->cq, .recv_cq = rig->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = max_inline}};
    if (!(rig->qp = ibv_create_qp(rig->pd, &attr))) die("ibv_create_qp");
    connect_self(rig);
}

/* inline-beyond-asked: 16 bytes inline on a QP asked for none (this
 * device grants 16, a gather element's worth); the twin asks for 16. */
static void write_inline(struct rig *rig, uint32_t asked) {
    recreate_qp(rig, asked);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 16, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = rig->mr->rkey}}, *bad;
    if (ibv_post_send(rig->qp, &wr, &bad)) die("ibv_post_send");
    poll_completions(rig, 1);
}

__attribute__((noinline)) void inline_beyond_what_was_asked(struct rig *rig) {
    write_inline(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void inline_within_what_was_asked(struct rig *rig) {
    write_inline(rig, 16);
}

/* beyond-caps: one gather element more than the QP's max_send_sge, as
 * ibv_query_qp gives it; the post must fail. */
__attribute__((noinline)) void post_more_elements_than_the_cap(struct rig *rig) {
    connect_self(rig);
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    if (ibv_query_qp(rig->qp, &attr, IBV_QP_CAP, &init)) die("ibv_query_qp");
    const int count = (int)init.cap.max_send_sge + 1;
    struct ibv_sge *sges = calloc(count, sizeof(*sges));
    if (!sges) die("calloc");
    for (int i = 0; i < count; ++i)
        sges[i] = (struct ibv_sge){.addr = (uintptr_t)rig->buffer + 8 * i, .length = 8,
                                   .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 4, .sg_list = sges, .num_sge = count,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = rig->mr->rkey}}, *bad;
    const int error = ibv_post_send(rig->qp, &wr, &bad);
    free(sges);
    if (error != EINVAL) {
        fprintf(stderr, "ibv_post_send beyond max_send_sge returned %d\n", error);
        exit(1);
    }
}

/* post-loop-in-error: a QP moved to ERR, and a receive posted again at
 * each flushed completion, 200 times; the twin stops at the first flush. */
static void repost_at_flushes(struct rig *rig, int reposts) {
    connect_self(rig);
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    if (ibv_modify_qp(rig->qp, &attr, IBV_QP_STATE)) die("ibv_modify_qp ERR");
    post_receive(rig, 0);
    for (int i = 1;; ++i) {
        const struct ibv_wc wc = next_completion(rig);
        if (wc.status != IBV_WC_WR_FLUSH_ERR) {
            fprintf(stderr, "completion %s\n", ibv_wc_status_str(wc.status));
            exit(1);
        }
        if (i > reposts) return;
        post_receive(rig, i);
    }
}

__attribute__((noinline)) void repost_each_flushed_receive(struct rig *rig) {
    repost_at_flushes(rig, 200);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void stop_at_the_first_flush(struct rig *rig) {
    repost_at_flushes(rig, 0);
}

/* completions-after-destroy: a QP destroyed with its WRITE's completion
 * still in the CQ, which the program then polls for a new QP's work; the
 * twin polls the completion before the destroy. */
static void destroy_with_a_completion(struct rig *rig, int poll_first) {
    connect_self(rig);
    if (post_write(rig, 1, 1)) die("ibv_post_send");
    usleep(100 * 1000); /* it completes */
    if (poll_first) poll_completions(rig, 1);
    if (ibv_destroy_qp(rig->qp)) die("ibv_destroy_qp");
    rig->qp = create_qp(rig, rig->cq);
    connect_self(rig);
    if (post_write(rig, 2, 1)) die("ibv_post_send");
    poll_completions(rig, 1);
}

__attribute__((noinline)) void poll_after_destroying_a_qp(struct rig *rig) {
    destroy_with_a_completion(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void drain_before_destroying_a_qp(struct rig *rig) {
    destroy_with_a_completion(rig, 1);
}

/* mtu-above-active: a QP connected to itself with path_mtu 4096 on a port
 * whose active_mtu is less (test_check.py runs it on a 1500-byte link);
 * the twin takes the port's. */
static void connect_at_mtu(struct rig *rig, int the_ports) {
    struct ibv_port_attr port;
    if (ibv_query_port(rig->context, 1, &port)) die("ibv_query_port");
    if (port.active_mtu >= IBV_MTU_4096) {
        fprintf(stderr, "the port's active_mtu is 4096: nothing is above it\n");
        exit(1);
    }
    const enum ibv_mtu mtu = the_ports ? port.active_mtu : IBV_MTU_4096;
    connect_qp(rig, rig->qp, rig->qp->qp_num, (struct end){0, mtu, 1});
    if (post_write(rig, 1, 1)) die("ibv_post_send");
    poll_completions(rig, 1);
}

__attribute__((noinline)) void connect_above_the_active_mtu(struct rig *rig) {
    connect_at_mtu(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void connect_at_the_active_mtu(struct rig *rig) {
    connect_at_mtu(rig, 1);
}

/* fork-unsafe: the parent forks a child, which exits at once, and then
 * writes from the MR it registered before; the twin asked for fork safety
 * (ibv_fork_init before opening the device: its kCases entry says so). */
static void write_after_a_fork(struct rig *rig) {
    connect_self(rig);
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) _exit(0);
    if (waitpid(child, NULL, 0) != child) die("waitpid");
    if (post_write(rig, 5, 1)) die("ibv_post_send");
    poll_completions(rig, 1);
}

__attribute__((noinline)) void write_after_forking(struct rig *rig) {
    write_after_a_fork(rig);
    __asm__ volatile("" ::: "memory");
}

/* Not a check-mode case: posts the provider refuses itself, one for each
 * reason it gives (test_refusals.py reads the sentence each one logs);
 * exits 1 when one is not refused with the man page's errno. */
static void expect_refused(const char *what, int got, int want) {
    if (got == want) return;
    fprintf(stderr, "%s: %s, not %s\n", what, got ? strerror(got) : "posted", strerror(want));
    exit(1);
}

__attribute__((noinline)) void refuse_each_post(struct rig *rig) {
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = rig->mr->lkey};
    struct ibv_send_wr send = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                               .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                           .rkey = rig->mr->rkey}}, *bad_send;
    struct ibv_recv_wr recv = {.sg_list = &sge, .num_sge = 1}, *bad_recv;
    expect_refused("a send in RESET", ibv_post_send(rig->qp, &send, &bad_send), EINVAL);
    expect_refused("a receive in RESET", ibv_post_recv(rig->qp, &recv, &bad_recv), EINVAL);
    connect_self(rig);
    struct ibv_send_wr wr = send;
    wr.num_sge = 2;
    expect_refused("2 send elements", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    wr = send;
    wr.sg_list = NULL;
    expect_refused("a NULL gather list", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    struct ibv_recv_wr rwr = recv;
    rwr.num_sge = 2;
    expect_refused("2 receive elements", ibv_post_recv(rig->qp, &rwr, &bad_recv), EINVAL);
    wr = send;
    wr.opcode = (enum ibv_wr_opcode)99;
    expect_refused("opcode 99", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    wr = send;
    wr.send_flags = IBV_SEND_INLINE;
    sge.length = 1024;
    expect_refused("1024 bytes inline", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    sge.length = 8;
    wr.opcode = IBV_WR_RDMA_READ;
    expect_refused("an inline READ", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    wr = send;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic = (typeof(wr.wr.atomic)){.remote_addr = (uintptr_t)rig->buffer + 2049,
                                          .rkey = rig->mr->rkey};
    expect_refused("a misaligned atomic", ibv_post_send(rig->qp, &wr, &bad_send), EINVAL);
    int error = 0;
    for (int i = 0; i < 10 * DEPTH && !error; ++i) error = ibv_post_recv(rig->qp, &recv, &bad_recv);
    expect_refused("a receive beyond the queue", error, ENOMEM);
    error = 0;  /* unsignaled: no completion frees their slots */
    for (int i = 0; i < 10 * DEPTH && !error; ++i) error = ibv_post_send(rig->qp, &send, &bad_send);
    expect_refused("a send beyond the queue", error, ENOMEM);

    struct ibv_qp *ud = ud_qp(rig, 0x1111);
    wr = send;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud = (typeof(wr.wr.ud)){.ah = NULL, .remote_qpn = ud->qp_num, .remote_qkey = 0x1111};
    expect_refused("a UD send without an AH", ibv_post_send(ud, &wr, &bad_send), EINVAL);
    struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = DEPTH, .max_sge = 1}};
    struct ibv_srq *srq = ibv_create_srq(rig->pd, &srq_attr);
    if (!srq) die("ibv_create_srq");
    expect_refused("2 SRQ elements", ibv_post_srq_recv(srq, &rwr, &bad_recv), EINVAL);
    struct ibv_qp_init_attr on_srq = {
        .send_cq = rig->cq, .recv_cq = rig->cq, .srq = srq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = DEPTH, .max_send_sge = 1}};
    struct ibv_qp *shared = ibv_create_qp(rig->pd, &on_srq);
    if (!shared) die("ibv_create_qp with an SRQ");
    qp_to_init(shared);
    expect_refused("a receive of a QP with an SRQ", ibv_post_recv(shared, &recv, &bad_recv),
                   EINVAL);
    if (ibv_destroy_qp(shared) || ibv_destroy_srq(srq) || ibv_destroy_qp(ud))
        die("destroying");
}

/* Not a check-mode case: verbs given NULL where they read an argument
 * (a fuzzer's programs do it): EINVAL, never a crash (test_refusals.py). */
__attribute__((noinline)) void pass_null_arguments(struct rig *rig) {
    struct ibv_qp_init_attr init;
    expect_refused("ibv_modify_qp", ibv_modify_qp(rig->qp, NULL, IBV_QP_STATE), EINVAL);
    expect_refused("ibv_query_qp", ibv_query_qp(rig->qp, NULL, IBV_QP_STATE, &init), EINVAL);
    errno = 0;
    if (ibv_create_qp(rig->pd, NULL)) die("ibv_create_qp took NULL");
    expect_refused("ibv_create_qp's errno", errno, EINVAL);
    errno = 0;
    if (ibv_create_srq(rig->pd, NULL)) die("ibv_create_srq took NULL");
    expect_refused("ibv_create_srq's errno", errno, EINVAL);
    errno = 0;
    if (ibv_create_ah(rig->pd, NULL)) die("ibv_create_ah took NULL");
    expect_refused("ibv_create_ah's errno", errno, EINVAL);
    /* As rxe's provider: no list, or no bad_wr, is EINVAL. */
    struct ibv_send_wr *bad;
    struct ibv_recv_wr *bad_recv;
    expect_refused("no list", ibv_post_send(rig->qp, NULL, &bad), EINVAL);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 8, .lkey = rig->mr->lkey};
    struct ibv_recv_wr recv = {.sg_list = &sge, .num_sge = 1};
    expect_refused("no bad_wr", ibv_post_recv(rig->qp, &recv, NULL), EINVAL);
    expect_refused("no list", ibv_post_recv(rig->qp, NULL, &bad_recv), EINVAL);
}

/* null-argument: a send whose one element's list is NULL (a fuzzer's
 * programs do it): EINVAL, reported. The twin gives the list. */
static void send_with_a_list(struct rig *rig, int give_list) {
    connect_self(rig);
    struct ibv_sge sge = {.addr = (uintptr_t)rig->buffer, .length = 64, .lkey = rig->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 7, .sg_list = give_list ? &sge : NULL, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)rig->buffer + 2048,
                                         .rkey = rig->mr->rkey}}, *bad;
    const int result = ibv_post_send(rig->qp, &wr, &bad);
    if (give_list) {
        if (result) die("ibv_post_send");
        poll_completions(rig, 1);
    } else {
        expect_refused("a NULL sg_list", result, EINVAL);
    }
}

__attribute__((noinline)) void send_without_a_list(struct rig *rig) {
    send_with_a_list(rig, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void send_with_its_list(struct rig *rig) {
    send_with_a_list(rig, 1);
    __asm__ volatile("" ::: "memory");
}

/* Not a check-mode case: 1000 sends in RESET, then one more a second
 * later (test_refusals.py: the log's burst, then the count it held back). */
__attribute__((noinline)) void refuse_in_a_loop(struct rig *rig) {
    for (int i = 0; i < 1000; ++i) post_write(rig, i, 1);
    sleep(1);
    post_write(rig, 1000, 1);
}

struct test_case {
    const char *name;
    void (*run)(struct rig *);
    int fork_init; /* ibv_fork_init before the device is opened */
};

static const struct test_case kCases[] = {
    {"wrong-state", send_before_rts},        {"wrong-state-twin", write_after_rts},
    {"unsignaled", post_unsignaled_only},    {"unsignaled-twin", post_signaled_every_eighth},
    {"dereg-in-use", dereg_under_a_receive}, {"dereg-in-use-twin", dereg_after_the_receive},
    {"bad-key", write_beyond_the_mr},        {"bad-key-twin", write_after_rts},
    {"bad-key-srq", post_to_an_srq_from_another_pd},
    {"bad-key-srq-twin", post_to_an_srq_from_its_pd},
    {"unacked", event_not_acknowledged},     {"unacked-twin", event_acknowledged},
    {"cq-small", post_more_than_the_cq_holds}, {"cq-small-twin", post_what_the_cq_holds},
    {"leak", exit_without_cleanup},          {"leak-twin", NULL},
    {"overlap", post_overlapping_receives},  {"overlap-twin", post_receives_side_by_side},
    {"overlap-qps", read_from_two_qps_at_once}, {"overlap-qps-twin", read_from_two_qps_in_turn},
    {"unsignaled-lagging", post_unsignaled_while_it_lags},
    {"unacked-other-cq", ack_on_another_cq},
    {"changed", rewrite_before_the_completion}, {"changed-twin", rewrite_after_the_completion},
    {"unmapped", send_from_unmapped_memory}, {"unmapped-twin", unmap_after_dereg},
    {"freed", send_from_freed_memory},       {"freed-twin", free_after_dereg},
    {"unarmed", wait_without_rearming},      {"unarmed-twin", wait_after_rearming},
    {"async-unacked", async_event_not_acknowledged},
    {"async-unacked-twin", async_event_acknowledged},
    {"peer", send_from_another_psn},         {"peer-twin", write_after_rts},
    {"peer-pair", connect_a_pair_unevenly},  {"peer-pair-twin", connect_a_pair_evenly},
    {"rnr", send_before_the_receive},        {"rnr-twin", send_after_the_receive},
    {"rnr-wait", receive_late_with_a_long_rnr_timer},
    {"rnr-wait-twin", receive_late_with_a_short_rnr_timer},
    {"bad-rkey", read_without_remote_read},  {"bad-rkey-twin", write_after_rts},
    {"qkey", send_with_another_qkey},        {"qkey-twin", send_with_the_receivers_qkey},
    {"race", write_from_two_qps_at_once},    {"race-twin", write_from_two_qps_in_turn},
    {"race-devices", write_from_two_devices_at_once},
    {"race-devices-twin", write_from_two_qps_in_turn},
    {"mw-in-use", dealloc_a_window_being_bound},
    {"mw-in-use-twin", dealloc_a_window_once_bound},
    {"cq-overrun", overrun_a_cq_through_an_srq},
    {"cq-overrun-twin", poll_each_srq_receive},
    {"aborted-batches", abort_batches},
    {"given-back", send_from_memory_given_back},
    {"given-back-twin", send_from_shared_memory_advised},
    {"race-programs", write_from_two_programs_at_once},
    {"race-programs-twin", write_from_two_programs_in_turn},
    {"stranded", arm_and_wait_without_polling}, {"stranded-twin", arm_and_poll_again},
    {"inline", inline_beyond_what_was_asked}, {"inline-twin", inline_within_what_was_asked},
    {"caps", post_more_elements_than_the_cap}, {"caps-twin", write_after_rts},
    {"flush-loop", repost_each_flushed_receive}, {"flush-loop-twin", stop_at_the_first_flush},
    {"after-destroy", poll_after_destroying_a_qp},
    {"after-destroy-twin", drain_before_destroying_a_qp},
    {"fork", write_after_forking}, {"fork-twin", write_after_forking, 1},
    {"mtu", connect_above_the_active_mtu}, {"mtu-twin", connect_at_the_active_mtu},
    {"refused", refuse_each_post}, {"refused-loop", refuse_in_a_loop},
    {"refused-null", pass_null_arguments},
    {"null", send_without_a_list}, {"null-twin", send_with_its_list},
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: check_programs DEVICE CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
        if (strcmp(argv[2], kCases[i].name)) continue;
        struct rig rig = {0};
        if (kCases[i].fork_init && ibv_fork_init()) die("ibv_fork_init");
        open_rig(argv[1], &rig);
        if (kCases[i].run) kCases[i].run(&rig);
        close_rig(&rig);
        return 0;
    }
    fprintf(stderr, "check_programs: no case '%s'\n", argv[2]);
    return 2;
}
