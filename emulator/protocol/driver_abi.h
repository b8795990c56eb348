// The part of rdma-core's provider ABI (IBVERBS_PRIVATE_<N>) that uroce uses.
//
// rdma-core does not install libibverbs/driver.h, so the layouts are declared
// here, member for member as in the rdma-core release uroce is built
// against, and pinned by the static_asserts at the end: libibverbs copies
// these structures by layout. Configure (provider/rdma_core_releases.cmake,
// whose UROCE_LAYOUTS rows a new layout is added to) finds the release, its
// private ABI N and its layouts in the installed libibverbs and writes them
// to uroce_abi.h:
//   UROCE_PABI          34 (rdma-core v34-v56), 57 (v57-v58), 59 (v59-v63),
//                       64 (v64), 65 (v65)
//   UROCE_OPS_LAYOUT    the release whose verbs_context_ops members it has:
//                       36 (v36-v58), 59 (v59-v61), 62 (v62-v63), 64, 65
//   UROCE_QP_EX_LAYOUT  the release whose ibv_qp_ex (verbs.h) it has: 36
//                       (up to v43), 44 (v44: wr_atomic_write), 45 (v45 on:
//                       wr_flush). It places verbs_qp's comp_mask, which
//                       libibverbs' ibv_qp_to_qp_ex reads.
// uroce builds from v37 (__verbs_log). Every other structure here is the
// same from v36 to v65; the provider checks at load that the libibverbs
// loading it has the build's layouts (provider/abi_check.h).
#pragma once

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "uroce_abi.h"

extern "C" {

struct uroce_list_node {  // ccan/list.h struct list_node
    struct uroce_list_node* next;
    struct uroce_list_node* prev;
};

struct verbs_match_ent {
    void* driver_data;
    union {
        const char* modalias;
        uint64_t driver_id;
    } u;
    uint16_t vendor;
    uint16_t device;
    uint8_t kind;
};
enum { VERBS_MATCH_SENTINEL = 0, VERBS_MATCH_PCI = 1, VERBS_MATCH_MODALIAS = 2 };

struct verbs_sysfs_dev {
    struct uroce_list_node entry;
    void* provider_data;
    const struct verbs_match_ent* match;
    unsigned int flags;
    char sysfs_name[IBV_SYSFS_NAME_MAX];
    dev_t sysfs_cdev;
    char ibdev_name[IBV_SYSFS_NAME_MAX];
    char ibdev_path[IBV_SYSFS_PATH_MAX];
    char modalias[512];
    uint64_t node_guid;
    uint32_t driver_id;
    enum ibv_node_type node_type;
    int ibdev_idx;
    uint32_t num_ports;
    uint32_t abi_ver;
    struct timespec time_created;
};

struct verbs_device_ops {
    const char* name;
    uint32_t match_min_abi_version;
    uint32_t match_max_abi_version;
    const struct verbs_match_ent* match_table;
    const struct verbs_device_ops** static_providers;
    bool (*match_device)(struct verbs_sysfs_dev* sysfs_dev);
    struct verbs_context* (*alloc_context)(struct ibv_device* device, int cmd_fd,
                                           void* private_data);
    struct verbs_context* (*import_context)(struct ibv_device* device, int cmd_fd);
    struct verbs_device* (*alloc_device)(struct verbs_sysfs_dev* sysfs_dev);
    void (*uninit_device)(struct verbs_device* device);
};

struct verbs_device {
    struct ibv_device device;  // must be first
    const struct verbs_device_ops* ops;
    int refcount;  // atomic_int in rdma-core: same size and alignment
    struct uroce_list_node entry;
    struct verbs_sysfs_dev* sysfs;
    uint64_t core_support;
};

enum ibv_mr_type {
    IBV_MR_TYPE_MR,
    IBV_MR_TYPE_NULL_MR,
    IBV_MR_TYPE_IMPORTED_MR,
    IBV_MR_TYPE_DMABUF_MR,
};

struct verbs_mr {
    struct ibv_mr ibv_mr;
    enum ibv_mr_type mr_type;
    int access;
};

struct verbs_dm {
    struct ibv_dm dm;
    uint32_t handle;
};

enum { VERBS_XRCD_HANDLE = 1 << 0 };
struct verbs_xrcd {
    struct ibv_xrcd xrcd;
    uint32_t comp_mask;
    uint32_t handle;
};

struct verbs_srq {
    struct ibv_srq srq;
    enum ibv_srq_type srq_type;
    struct verbs_xrcd* xrcd;
    struct ibv_cq* cq;
    uint32_t srq_num;
};

struct verbs_qp {
    union {
        struct ibv_qp qp;
        struct ibv_qp_ex qp_ex;
    };
    uint32_t comp_mask;
    struct verbs_xrcd* xrcd;
};
enum { VERBS_QP_XRCD = 1 << 0, VERBS_QP_EX = 1 << 1 };

struct verbs_cq {
    union {
        struct ibv_cq cq;
        struct ibv_cq_ex cq_ex;
    };
};

// An op of a later release that uroce leaves to libibverbs' default: only
// its place in the layout matters.
typedef void (*uroce_default_op)(void);

// Every member in rdma-core's order (sorted by name): verbs_set_ops() copies
// each one that is set. Members later releases added are under their layout.
struct verbs_context_ops {
    int (*advise_mr)(struct ibv_pd*, enum ibv_advise_mr_advice, uint32_t, struct ibv_sge*,
                     uint32_t);
#if UROCE_OPS_LAYOUT >= 64
    uroce_default_op alloc_buf;
#endif
    struct ibv_dm* (*alloc_dm)(struct ibv_context*, struct ibv_alloc_dm_attr*);
#if UROCE_OPS_LAYOUT >= 59
    uroce_default_op alloc_dmah;
#endif
    struct ibv_mw* (*alloc_mw)(struct ibv_pd*, enum ibv_mw_type);
    struct ibv_mr* (*alloc_null_mr)(struct ibv_pd*);
    struct ibv_pd* (*alloc_parent_domain)(struct ibv_context*, struct ibv_parent_domain_init_attr*);
    struct ibv_pd* (*alloc_pd)(struct ibv_context*);
    struct ibv_td* (*alloc_td)(struct ibv_context*, struct ibv_td_init_attr*);
    void (*async_event)(struct ibv_context*, struct ibv_async_event*);
    int (*attach_counters_point_flow)(struct ibv_counters*, struct ibv_counter_attach_attr*,
                                      struct ibv_flow*);
    int (*attach_mcast)(struct ibv_qp*, const union ibv_gid*, uint16_t);
    int (*bind_mw)(struct ibv_qp*, struct ibv_mw*, struct ibv_mw_bind*);
    int (*close_xrcd)(struct ibv_xrcd*);
    void (*cq_event)(struct ibv_cq*);
    struct ibv_ah* (*create_ah)(struct ibv_pd*, struct ibv_ah_attr*);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op create_comp_cntr;
#endif
    struct ibv_counters* (*create_counters)(struct ibv_context*, struct ibv_counters_init_attr*);
    struct ibv_cq* (*create_cq)(struct ibv_context*, int, struct ibv_comp_channel*, int);
    struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context*, struct ibv_cq_init_attr_ex*);
    struct ibv_flow* (*create_flow)(struct ibv_qp*, struct ibv_flow_attr*);
    struct ibv_flow_action* (*create_flow_action_esp)(struct ibv_context*,
                                                      struct ibv_flow_action_esp_attr*);
    struct ibv_qp* (*create_qp)(struct ibv_pd*, struct ibv_qp_init_attr*);
    struct ibv_qp* (*create_qp_ex)(struct ibv_context*, struct ibv_qp_init_attr_ex*);
    struct ibv_rwq_ind_table* (*create_rwq_ind_table)(struct ibv_context*,
                                                      struct ibv_rwq_ind_table_init_attr*);
    struct ibv_srq* (*create_srq)(struct ibv_pd*, struct ibv_srq_init_attr*);
    struct ibv_srq* (*create_srq_ex)(struct ibv_context*, struct ibv_srq_init_attr_ex*);
    struct ibv_wq* (*create_wq)(struct ibv_context*, struct ibv_wq_init_attr*);
#if UROCE_OPS_LAYOUT >= 59
    uroce_default_op dealloc_dmah;
#endif
    int (*dealloc_mw)(struct ibv_mw*);
    int (*dealloc_pd)(struct ibv_pd*);
    int (*dealloc_td)(struct ibv_td*);
    int (*dereg_mr)(struct verbs_mr*);
    int (*destroy_ah)(struct ibv_ah*);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op destroy_comp_cntr;
#endif
    int (*destroy_counters)(struct ibv_counters*);
    int (*destroy_cq)(struct ibv_cq*);
    int (*destroy_flow)(struct ibv_flow*);
    int (*destroy_flow_action)(struct ibv_flow_action*);
    int (*destroy_qp)(struct ibv_qp*);
    int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table*);
    int (*destroy_srq)(struct ibv_srq*);
    int (*destroy_wq)(struct ibv_wq*);
    int (*detach_mcast)(struct ibv_qp*, const union ibv_gid*, uint16_t);
#if UROCE_OPS_LAYOUT >= 62
    uroce_default_op dm_export_dmabuf_fd;
#endif
#if UROCE_OPS_LAYOUT >= 64
    uroce_default_op free_buf;
#endif
    void (*free_context)(struct ibv_context*);
    int (*free_dm)(struct ibv_dm*);
    int (*get_srq_num)(struct ibv_srq*, uint32_t*);
    struct ibv_dm* (*import_dm)(struct ibv_context*, uint32_t);
    struct ibv_mr* (*import_mr)(struct ibv_pd*, uint32_t);
    struct ibv_pd* (*import_pd)(struct ibv_context*, uint32_t);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op inc_comp_cntr;
    uroce_default_op inc_err_comp_cntr;
#endif
    int (*modify_cq)(struct ibv_cq*, struct ibv_modify_cq_attr*);
    int (*modify_flow_action_esp)(struct ibv_flow_action*, struct ibv_flow_action_esp_attr*);
    int (*modify_qp)(struct ibv_qp*, struct ibv_qp_attr*, int);
    int (*modify_qp_rate_limit)(struct ibv_qp*, struct ibv_qp_rate_limit_attr*);
    int (*modify_srq)(struct ibv_srq*, struct ibv_srq_attr*, int);
    int (*modify_wq)(struct ibv_wq*, struct ibv_wq_attr*);
    struct ibv_qp* (*open_qp)(struct ibv_context*, struct ibv_qp_open_attr*);
    struct ibv_xrcd* (*open_xrcd)(struct ibv_context*, struct ibv_xrcd_init_attr*);
    int (*poll_cq)(struct ibv_cq*, int, struct ibv_wc*);
    int (*post_recv)(struct ibv_qp*, struct ibv_recv_wr*, struct ibv_recv_wr**);
    int (*post_send)(struct ibv_qp*, struct ibv_send_wr*, struct ibv_send_wr**);
    int (*post_srq_ops)(struct ibv_srq*, struct ibv_ops_wr*, struct ibv_ops_wr**);
    int (*post_srq_recv)(struct ibv_srq*, struct ibv_recv_wr*, struct ibv_recv_wr**);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op qp_attach_comp_cntr;
    uroce_default_op query_comp_cntr_caps;
#endif
    int (*query_device_ex)(struct ibv_context*, const struct ibv_query_device_ex_input*,
                           struct ibv_device_attr_ex*, size_t);
    int (*query_ece)(struct ibv_qp*, struct ibv_ece*);
    int (*query_port)(struct ibv_context*, uint8_t, struct ibv_port_attr*);
#if UROCE_OPS_LAYOUT >= 62
    uroce_default_op query_port_speed;
#endif
    int (*query_qp)(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*);
    int (*query_qp_data_in_order)(struct ibv_qp*, enum ibv_wr_opcode, uint32_t);
    int (*query_rt_values)(struct ibv_context*, struct ibv_values_ex*);
    int (*query_srq)(struct ibv_srq*, struct ibv_srq_attr*);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op read_comp_cntr;
#endif
    int (*read_counters)(struct ibv_counters*, uint64_t*, uint32_t, uint32_t);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op read_err_comp_cntr;
#endif
    struct ibv_mr* (*reg_dm_mr)(struct ibv_pd*, struct ibv_dm*, uint64_t, size_t, unsigned int);
    struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int);
    struct ibv_mr* (*reg_mr)(struct ibv_pd*, void*, size_t, uint64_t, int);
#if UROCE_OPS_LAYOUT >= 59
    uroce_default_op reg_mr_ex;
#endif
    int (*req_notify_cq)(struct ibv_cq*, int);
    int (*rereg_mr)(struct verbs_mr*, int, struct ibv_pd*, void*, size_t, int);
    int (*resize_cq)(struct ibv_cq*, int);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op set_comp_cntr;
#endif
    int (*set_ece)(struct ibv_qp*, struct ibv_ece*);
#if UROCE_OPS_LAYOUT >= 65
    uroce_default_op set_err_comp_cntr;
#endif
    void (*unimport_dm)(struct ibv_dm*);
    void (*unimport_mr)(struct ibv_mr*);
    void (*unimport_pd)(struct ibv_pd*);
};

// Exported by libibverbs with symbol version IBVERBS_PRIVATE_<UROCE_PABI>:
// verbs_register_driver_34, _57, ... (driver.h's own macro trick).
#define UROCE_REGISTER_DRIVER_(abi) verbs_register_driver_##abi
#define UROCE_REGISTER_DRIVER(abi) UROCE_REGISTER_DRIVER_(abi)
#define uroce_register_driver UROCE_REGISTER_DRIVER(UROCE_PABI)
void uroce_register_driver(const struct verbs_device_ops* ops);
void* _verbs_init_and_alloc_context(struct ibv_device* device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context* context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context* context);
void verbs_set_ops(struct verbs_context* vctx, const struct verbs_context_ops* ops);
int ibv_read_ibdev_sysfs_file(char* buf, size_t size, struct verbs_sysfs_dev* sysfs_dev,
                              const char* fnfmt, ...) __attribute__((format(printf, 4, 5)));
// Weak, so that a libibverbs older than v37 loads the provider and its check
// at load (provider/abi_check.h) can say why it refuses, rather than the
// dynamic linker failing on the symbol.
void __verbs_log(struct verbs_context* ctx, uint32_t level, const char* fmt, ...)
    __attribute__((format(printf, 3, 4), weak));
enum { VERBS_LOG_ERR = 1, VERBS_LOG_WARN = 2, VERBS_LOG_INFO = 3, VERBS_LOG_DEBUG = 4 };

}  // extern "C"

// Layout pins, taken from rdma-core's driver.h of each layout on LP64.
static_assert(sizeof(struct verbs_match_ent) == 24);
static_assert(offsetof(struct verbs_sysfs_dev, sysfs_name) == 36);
static_assert(offsetof(struct verbs_sysfs_dev, ibdev_name) == 112);
static_assert(offsetof(struct verbs_sysfs_dev, ibdev_path) == 176);
static_assert(offsetof(struct verbs_sysfs_dev, modalias) == 432);
static_assert(offsetof(struct verbs_sysfs_dev, node_guid) == 944);
static_assert(sizeof(struct verbs_sysfs_dev) == 992);
static_assert(sizeof(struct verbs_device_ops) == 72);
static_assert(offsetof(struct verbs_device, ops) == sizeof(struct ibv_device));
// The ops' count and three members' places, in slots: (members, alloc_pd,
// query_port, unimport_pd) of each layout.
struct uroce_ops_pins {
    size_t members, alloc_pd, query_port, unimport_pd;
};
constexpr uroce_ops_pins kOpsPins = UROCE_OPS_LAYOUT == 36   ? uroce_ops_pins{76, 5, 60, 75}
                                    : UROCE_OPS_LAYOUT == 59 ? uroce_ops_pins{79, 6, 62, 78}
                                    : UROCE_OPS_LAYOUT == 62 ? uroce_ops_pins{81, 6, 63, 80}
                                    : UROCE_OPS_LAYOUT == 64 ? uroce_ops_pins{83, 7, 65, 82}
                                                             : uroce_ops_pins{93, 7, 71, 92};
static_assert(UROCE_OPS_LAYOUT == 36 || UROCE_OPS_LAYOUT == 59 || UROCE_OPS_LAYOUT == 62 ||
              UROCE_OPS_LAYOUT == 64 || UROCE_OPS_LAYOUT == 65);
static_assert(sizeof(struct verbs_context_ops) == kOpsPins.members * sizeof(void*));
static_assert(offsetof(struct verbs_context_ops, alloc_pd) == kOpsPins.alloc_pd * sizeof(void*));
static_assert(offsetof(struct verbs_context_ops, query_port) ==
              kOpsPins.query_port * sizeof(void*));
static_assert(offsetof(struct verbs_context_ops, unimport_pd) ==
              kOpsPins.unimport_pd * sizeof(void*));
static_assert(offsetof(struct verbs_mr, mr_type) == sizeof(struct ibv_mr));
static_assert(offsetof(struct verbs_qp, comp_mask) == sizeof(struct ibv_qp_ex));
// ibv_qp_ex: 20 operations up to v43, wr_atomic_write from v44, wr_flush from v45.
static_assert(UROCE_QP_EX_LAYOUT == 36 || UROCE_QP_EX_LAYOUT == 44 || UROCE_QP_EX_LAYOUT == 45);
static_assert(sizeof(struct ibv_qp_ex) == (UROCE_QP_EX_LAYOUT == 36   ? 344
                                           : UROCE_QP_EX_LAYOUT == 44 ? 352
                                                                      : 360));
