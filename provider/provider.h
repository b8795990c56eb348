// The uroce provider: what libibverbs sees of a uroce device. Every object
// is the libibverbs structure plus the daemon's handle for it (kept in the
// structure's own `handle` field where it has one).
#pragma once

#include <errno.h>

#include <atomic>

#include "check/check.h"
#include "local_memory.h"
#include "protocol/client.h"
#include "protocol/driver_abi.h"
#include "queue.h"
#include "refusal.h"

namespace uroce {

struct ProviderDevice {
    verbs_device ibv;
};

struct ProviderContext {
    verbs_context ibv;
    ControlClient* client;
    ProviderDoorbell doorbell;  // constructed in place: libibverbs allocates the context
    LocalMemory local_memory;   // likewise
    check::CheckState* check;   // in check mode only (check.h)
    RefusalLog refusals;        // constructed in place too
};

// The context's check state, or nullptr when it does not check.
inline check::CheckState* checking(ibv_context* context);

struct ProviderCq {
    verbs_cq ibv;
    std::mutex lock;                       // pollers, and the ring's replacement by resize_cq
    SharedRing ring;                       // Cqe entries, then queues::CqState
    queues::Cqe current;                   // ibv_cq_ex: the completion being read
    std::atomic<uint32_t> empty_polls{0};  // in a row, since the last completion
    std::atomic<uint32_t> events{0};       // completion events ibv_get_cq_event returned
};

// The ibv_wr_* batch under way on a QP, from ibv_wr_start to
// ibv_wr_complete or ibv_wr_abort (with the send queue's lock held). Each
// work request is built here as an ibv_send_wr and written to the ring
// when the next one starts or the batch completes, through the checks of
// ibv_post_send; the first error fails the batch.
struct WrBatch {
    uint32_t start = 0;  // the ring's index at ibv_wr_start
    int error = 0;
    bool building = false;
    ibv_send_wr wr{};
    std::vector<ibv_sge> sges;           // wr.sg_list
    std::vector<std::byte> inline_data;  // copied at once: the caller may reuse its buffers
    uint64_t atomic_write = 0;           // ibv_wr_atomic_write's 8 bytes (wr.sg_list)
    const void* caller = nullptr;        // the program's call of ibv_wr_start
};

// Device memory: a page-aligned mapping of this process that the daemon
// reaches through MRs on it, as a NIC reaches its on-chip memory.
struct ProviderDm {
    verbs_dm ibv;
    std::byte* memory;
    size_t length;
    size_t mapped;  // length rounded up to pages
};

struct ProviderQp {
    verbs_qp ibv;
    uint32_t send_opcodes;  // bit (1 << ibv_wr_opcode) for those this QP type may post
    WorkQueue sq;
    WorkQueue rq;  // unmapped with an SRQ, and for XRC QPs
    WrBatch batch;
};

// A protection domain, or a parent domain over one (ibv_alloc_parent_domain).
// A parent domain carries its PD's handle, so every verb given it acts on
// that PD; the daemon never hears of it. uroce's queues are shared memory
// the daemon makes, so a parent domain's custom allocators are never asked
// for memory (as mlx5 when they answer IBV_ALLOCATOR_USE_DEFAULT).
struct ProviderPd {
    ibv_pd ibv;
    ProviderPd* protection_domain = nullptr;  // set for a parent domain
    void* pd_context = nullptr;
    std::atomic<uint32_t> parent_domains{0};  // over this PD: it stays until they go
};

struct ProviderSrq {
    verbs_srq ibv;
    WorkQueue rq;
};

struct ProviderWq {
    ibv_wq ibv;
    WorkQueue rq;
};

// ibv is ProviderContext's first member; offsetof within ProviderContext
// itself, which is not standard-layout, is refused by g++ 16.
inline ProviderContext* to_context(ibv_context* context) {
    return reinterpret_cast<ProviderContext*>(reinterpret_cast<char*>(context) -
                                              offsetof(verbs_context, context));
}
inline check::CheckState* checking(ibv_context* context) {
    return to_context(context)->check;
}
inline ControlClient& client_of(ibv_context* context) {
    return *to_context(context)->client;
}
inline ProviderCq* to_cq(ibv_cq* cq) {
    return reinterpret_cast<ProviderCq*>(cq);
}
inline ProviderCq* to_cq(ibv_cq_ex* cq) {
    return reinterpret_cast<ProviderCq*>(cq);
}
inline ProviderQp* to_qp(ibv_qp* qp) {
    return reinterpret_cast<ProviderQp*>(qp);
}
inline ProviderPd* to_pd(ibv_pd* pd) {
    return reinterpret_cast<ProviderPd*>(pd);
}
inline ProviderSrq* to_srq(ibv_srq* srq) {
    return reinterpret_cast<ProviderSrq*>(srq);
}
inline ProviderWq* to_wq(ibv_wq* wq) {
    return reinterpret_cast<ProviderWq*>(wq);
}

// Sets errno from a failed call and logs the daemon's reason through
// libibverbs' log (VERBS_LOG_LEVEL=1 shows it). Returns the errno.
int report(ibv_context* context, const char* verb, int error);
// The same for a verb the provider refuses itself, saying why.
int refuse(ibv_context* context, const char* verb, int error, const char* why);
// The same for a queue the daemon sent that cannot be mapped.
int report_ring(ibv_context* context, const char* verb, int error);

// Context-wide ops, grouped as in the files that implement them.
int query_device_ex(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
int query_port(ibv_context*, uint8_t, ibv_port_attr*);
int query_rt_values(ibv_context*, ibv_values_ex*);

ibv_pd* alloc_pd(ibv_context*);
ibv_pd* alloc_parent_domain(ibv_context*, ibv_parent_domain_init_attr*);
ibv_pd* import_pd(ibv_context*, uint32_t);
void unimport_pd(ibv_pd*);
ibv_mr* import_mr(ibv_pd*, uint32_t);
void unimport_mr(ibv_mr*);
ibv_dm* import_dm(ibv_context*, uint32_t);
void unimport_dm(ibv_dm*);
int dealloc_pd(ibv_pd*);
ibv_mr* reg_mr(ibv_pd*, void*, size_t, uint64_t, int);
int rereg_mr(verbs_mr*, int, ibv_pd*, void*, size_t, int);
int advise_mr(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t);
int dereg_mr(verbs_mr*);
ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type);
int dealloc_mw(ibv_mw*);
ibv_dm* alloc_dm(ibv_context*, ibv_alloc_dm_attr*);
int free_dm(ibv_dm*);
ibv_mr* reg_dm_mr(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int);
int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*);

ibv_cq* create_cq(ibv_context*, int, ibv_comp_channel*, int);
ibv_cq_ex* create_cq_ex(ibv_context*, ibv_cq_init_attr_ex*);
int resize_cq(ibv_cq*, int);
int modify_cq(ibv_cq*, ibv_modify_cq_attr*);
int destroy_cq(ibv_cq*);
void cq_event(ibv_cq*);
void async_event(ibv_context*, ibv_async_event*);

ibv_srq* create_srq(ibv_pd*, ibv_srq_init_attr*);
ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*);
int modify_srq(ibv_srq*, ibv_srq_attr*, int);
int query_srq(ibv_srq*, ibv_srq_attr*);
int get_srq_num(ibv_srq*, uint32_t*);
int destroy_srq(ibv_srq*);

ibv_qp* create_qp(ibv_pd*, ibv_qp_init_attr*);
ibv_qp* create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*);
int modify_qp(ibv_qp*, ibv_qp_attr*, int);
int query_qp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
int destroy_qp(ibv_qp*);
ibv_qp* open_qp(ibv_context*, ibv_qp_open_attr*);
int attach_mcast(ibv_qp*, const ibv_gid*, uint16_t);
ibv_flow* create_flow(ibv_qp*, ibv_flow_attr*);
int destroy_flow(ibv_flow*);
int detach_mcast(ibv_qp*, const ibv_gid*, uint16_t);

ibv_wq* create_wq(ibv_context*, ibv_wq_init_attr*);
int modify_wq(ibv_wq*, ibv_wq_attr*);
int destroy_wq(ibv_wq*);
ibv_rwq_ind_table* create_rwq_ind_table(ibv_context*, ibv_rwq_ind_table_init_attr*);
int destroy_rwq_ind_table(ibv_rwq_ind_table*);

int post_send(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
// 0 when the QP's state lets it post sends, else EINVAL with its sentence
// (refused()).
int refuse_send_state(const ibv_qp& qp);
// EINVAL with its sentence for a queue with no ring: a QP type without it,
// or one lost to a failed resize.
int refuse_unmapped();
// Checks one send WR as ibv_post_send does and writes it to the next slot of
// the send queue (not published); 0 or the errno ibv_post_send returns, its
// sentence given to refused().
// `caller`: the program's call of the verb, for check mode's reports.
int post_one_send(ProviderQp& qp, const ibv_send_wr& wr, const void* caller);
// Sets the ibv_wr_* functions of a QP created with send_ops_flags.
void set_qp_ex_ops(ibv_qp_ex* qp);
int post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
int post_wq_recv(ibv_wq*, ibv_recv_wr*, ibv_recv_wr**);
int poll_cq(ibv_cq*, int, ibv_wc*);
int req_notify_cq(ibv_cq*, int);
// Sets the ibv_cq_ex polling functions.
void set_cq_ex_ops(ibv_cq_ex*);

ibv_ah* create_ah(ibv_pd*, ibv_ah_attr*);
int destroy_ah(ibv_ah*);
ibv_xrcd* open_xrcd(ibv_context*, ibv_xrcd_init_attr*);
int close_xrcd(ibv_xrcd*);

}  // namespace uroce
