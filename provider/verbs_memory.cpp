// Device and port queries, protection domains, memory regions, device
// memory and memory windows.
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "provider.h"

namespace uroce {

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
    if (input && input->comp_mask) {
        return EINVAL;
    }
    if (attr_size < sizeof(attr->orig_attr)) {
        return EINVAL;
    }
    rpc::QueryDeviceReply reply;
    if (int error = client_of(context).call(rpc::QueryDeviceRequest{}, &reply)) {
        return report(context, "query_device", error);
    }
    memcpy(attr, &reply.attr, std::min(attr_size, sizeof(reply.attr)));
    return 0;
}

// The device clock is this host's CLOCK_MONOTONIC: no need to ask the daemon.
// As mlx5, the raw clock's cycles are in tv_nsec.
int query_rt_values(ibv_context*, ibv_values_ex* values) {
    if (values->comp_mask & ~IBV_VALUES_MASK_RAW_CLOCK) {
        return EINVAL;
    }
    if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
        values->raw_clock.tv_sec = 0;
        values->raw_clock.tv_nsec = static_cast<long>(queues::clock_ns(CLOCK_MONOTONIC));
    }
    return 0;
}

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr) {
    rpc::QueryPortReply reply;
    if (int error = client_of(context).call(rpc::QueryPortRequest{port_num}, &reply)) {
        return report(context, "query_port", error);
    }
    *attr = reply.attr;
    return 0;
}

ibv_pd* alloc_pd(ibv_context* context) {
    rpc::AllocPdReply reply;
    rpc::Empty none;
    if (int error = client_of(context).call(rpc::Op::kAllocPd, &none, sizeof(none), &reply,
                                            sizeof(reply))) {
        report(context, "alloc_pd", error);
        return nullptr;
    }
    auto* pd = new (std::nothrow) ProviderPd;
    if (!pd) {
        client_of(context).call_op(rpc::Op::kDeallocPd, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    pd->ibv.context = context;
    pd->ibv.handle = reply.handle;
    // librdmacm's own PD of a device, which it frees with the last rdma_cm
    // ID on it, is the library's state, not the program's objects.
    if (check::CheckState* check = checking(context);
        check && !check::called_from("librdmacm.so")) {
        check->created(pd, "PD");
    }
    return &pd->ibv;
}

// ibv_alloc_parent_domain(3). Thread domains cannot be allocated here, so
// none can be given; the PD must be a protection domain of this context.
// rdma-core v65's IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC
// (buffers shared with the host of a Confidential Computing guest) is a
// feature the device lacks, EOPNOTSUPP as its tests expect; bits no release
// defines are EINVAL.
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_alloc_parent_domain", "attr");
        return nullptr;
    }

    constexpr uint32_t kAllowCcUnprotectedAlloc = 1u << 2;
    constexpr uint32_t kDefined = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
                                  IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT | kAllowCcUnprotectedAlloc;
    const char* wrong = !attr->pd                            ? "no protection domain"
                        : attr->pd->context != context       ? "a PD of another context"
                        : to_pd(attr->pd)->protection_domain ? "a parent domain as its PD"
                        : attr->td                           ? "a thread domain"
                        : (attr->comp_mask & ~kDefined)      ? "unknown comp_mask bits"
                        : ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
                           (!attr->alloc || !attr->free))
                            ? "an allocator without its free"
                            : nullptr;
    if (wrong) {
        refuse(context, "alloc_parent_domain", EINVAL, wrong);
        return nullptr;
    }
    if (attr->comp_mask & kAllowCcUnprotectedAlloc) {
        refuse(context, "alloc_parent_domain", EOPNOTSUPP,
               "unprotected allocation for Confidential Computing is not supported");
        return nullptr;
    }
    auto* parent = new (std::nothrow) ProviderPd;
    if (!parent) {
        errno = ENOMEM;
        return nullptr;
    }
    ProviderPd* pd = to_pd(attr->pd);
    parent->ibv.context = context;
    parent->ibv.handle = pd->ibv.handle;
    parent->protection_domain = pd;
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) {
        parent->pd_context = attr->pd_context;
    }
    ++pd->parent_domains;
    return &parent->ibv;
}

int dealloc_pd(ibv_pd* ibpd) {
    ProviderPd* pd = to_pd(ibpd);
    if (ProviderPd* under = pd->protection_domain) {
        --under->parent_domains;
        delete pd;
        return 0;
    }
    if (pd->parent_domains) {
        return refuse(ibpd->context, "dealloc_pd", EBUSY, "parent domains use it");
    }
    if (int error = client_of(ibpd->context)
                        .call_op(rpc::Op::kDeallocPd, rpc::HandleRequest{ibpd->handle})) {
        return report(ibpd->context, "dealloc_pd", error);
    }
    if (check::CheckState* check = checking(ibpd->context)) {
        check->destroyed(pd);
    }
    delete pd;
    return 0;
}

namespace {

// The provider's half of registering: the daemon has answered `reply`.
ibv_mr* new_mr(ibv_pd* pd, void* addr, size_t length, int access, const rpc::RegMrReply& reply) {
    auto* vmr = static_cast<verbs_mr*>(calloc(1, sizeof(verbs_mr)));
    if (!vmr) {
        client_of(pd->context).call_op(rpc::Op::kDeregMr, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    vmr->ibv_mr = {pd->context, pd, addr, length, reply.handle, reply.lkey, reply.rkey};
    vmr->mr_type = IBV_MR_TYPE_MR;
    vmr->access = access;
    return &vmr->ibv_mr;
}

ProviderDm* to_dm(ibv_dm* dm) {
    return reinterpret_cast<ProviderDm*>(dm);
}

// ibv_memcpy_to_dm/ibv_memcpy_from_dm, as mlx5 (whose device memory is
// read and written in 32-bit words): a range past the end is EFAULT, an
// offset or length that is not a multiple of 4 is EINVAL, and either way
// nothing is copied.
int dm_access_error(const ProviderDm& dm, uint64_t offset, size_t length) {
    if (offset > dm.length || length > dm.length - offset) {
        return EFAULT;
    }
    return (offset % 4 || length % 4) ? EINVAL : 0;
}

int memcpy_to_dm(ibv_dm* ibdm, uint64_t offset, const void* host, size_t length) {
    ProviderDm& dm = *to_dm(ibdm);
    if (int error = dm_access_error(dm, offset, length)) {
        return error;
    }
    memcpy(dm.memory + offset, host, length);
    return 0;
}

int memcpy_from_dm(void* host, ibv_dm* ibdm, uint64_t offset, size_t length) {
    ProviderDm& dm = *to_dm(ibdm);
    if (int error = dm_access_error(dm, offset, length)) {
        return error;
    }
    memcpy(host, dm.memory + offset, length);
    return 0;
}

}  // namespace

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access) {
    rpc::RegMrRequest request{pd->handle, access, reinterpret_cast<uintptr_t>(addr), length,
                              hca_va};
    rpc::RegMrReply reply;
    if (int error = client_of(pd->context).call(request, &reply)) {
        report(pd->context, "reg_mr", error);
        return nullptr;
    }
    ibv_mr* mr = new_mr(pd, addr, length, access, reply);
    if (check::CheckState* check = checking(pd->context); check && mr) {
        check->mr_created(mr, hca_va, access);
    }
    // On-demand paging may name memory not mapped yet (an implicit MR all of it).
    if (mr && !(access & IBV_ACCESS_ON_DEMAND)) {
        to_context(pd->context)->local_memory.add(mr->lkey, hca_va, addr, length);
    }
    return mr;
}

// As the kernel's: addr is NULL, the MR is addressed from 0.
ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned int access) {
    rpc::RegDmMrRequest request{pd->handle, to_dm(dm)->ibv.handle, offset, length, access};
    rpc::RegMrReply reply;
    if (int error = client_of(pd->context).call(request, &reply)) {
        report(pd->context, "reg_dm_mr", error);
        return nullptr;
    }
    ibv_mr* mr = new_mr(pd, nullptr, length, static_cast<int>(access), reply);
    if (check::CheckState* check = checking(pd->context); check && mr) {
        check->mr_created(mr, 0, static_cast<int>(access), false);  // zero-based, device memory
    }
    return mr;
}

ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_alloc_dm", "attr");
        return nullptr;
    }

    auto* dm = static_cast<ProviderDm*>(calloc(1, sizeof(ProviderDm)));
    if (!dm) {
        errno = ENOMEM;
        return nullptr;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    dm->length = attr->length;
    dm->mapped = (attr->length + page - 1) / page * page;
    void* memory = dm->mapped ? mmap(nullptr, dm->mapped, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                              : nullptr;
    if (memory == MAP_FAILED) {
        free(dm);
        errno = ENOMEM;
        return nullptr;
    }
    dm->memory = static_cast<std::byte*>(memory);
    rpc::AllocDmRequest request{attr->length, attr->log_align_req, attr->comp_mask,
                                reinterpret_cast<uintptr_t>(memory)};
    rpc::AllocDmReply reply;
    if (int error = client_of(context).call(request, &reply)) {
        if (memory) {
            munmap(memory, dm->mapped);
        }
        free(dm);
        report(context, "alloc_dm", error);
        return nullptr;
    }
    dm->ibv.handle = reply.handle;
    dm->ibv.dm.context = context;
    dm->ibv.dm.handle = reply.handle;
    dm->ibv.dm.memcpy_to_dm = memcpy_to_dm;
    dm->ibv.dm.memcpy_from_dm = memcpy_from_dm;
    return &dm->ibv.dm;
}

int free_dm(ibv_dm* ibdm) {
    ProviderDm* dm = to_dm(ibdm);
    ibv_context* context = ibdm->context;
    if (int error =
            client_of(context).call_op(rpc::Op::kFreeDm, rpc::HandleRequest{dm->ibv.handle})) {
        return report(context, "free_dm", error);
    }
    if (dm->mapped) {  // an imported one is the allocator's mapping
        munmap(dm->memory, dm->mapped);
    }
    free(dm);
    return 0;
}

int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
    ibv_mr& mr = vmr->ibv_mr;
    rpc::ReregMrRequest request{
        mr.handle, flags, pd ? pd->handle : 0, access, reinterpret_cast<uintptr_t>(addr), length};
    rpc::ReregMrReply reply;
    if (int error = client_of(mr.context).call(request, &reply)) {
        return report(mr.context, "rereg_mr", error);
    }
    LocalMemory& local = to_context(mr.context)->local_memory;
    LocalMemory::Region region;
    if (local.region(mr.lkey, region)) {
        local.remove(mr.lkey);
        if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {  // addressed from addr, as the kernel's
            region = {reinterpret_cast<uintptr_t>(addr), static_cast<const std::byte*>(addr),
                      length};
        }
        local.add(reply.lkey, region.iova, region.addr, region.length);
    }
    const uint32_t old_lkey = mr.lkey;
    mr.lkey = reply.lkey;
    mr.rkey = reply.rkey;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
        vmr->access = access;
    }
    if (check::CheckState* check = checking(mr.context)) {
        check->mr_reregistered(old_lkey, mr.lkey, flags, pd, reinterpret_cast<uintptr_t>(addr),
                               length, access);
    }
    return 0;
}

int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
    rpc::AdviseMrRequest request{pd->handle, advice, flags, num_sge, {}};
    if (num_sge > rpc::kMaxAdviseSges || (num_sge && !sg_list)) {
        return EINVAL;
    }
    std::copy_n(sg_list, num_sge, request.sges);
    rpc::Empty none;
    if (int error = client_of(pd->context).call(request, &none)) {
        report(pd->context, "advise_mr", error);
        return error;
    }
    return 0;
}

int dereg_mr(verbs_mr* vmr) {
    ibv_context* context = vmr->ibv_mr.context;
    check::CheckState* check = checking(context);
    if (check) {
        check->deregistering(&vmr->ibv_mr);
    }
    if (int error =
            client_of(context).call_op(rpc::Op::kDeregMr, rpc::HandleRequest{vmr->ibv_mr.handle})) {
        return report(context, "dereg_mr", error);
    }
    to_context(context)->local_memory.remove(vmr->ibv_mr.lkey);
    if (check) {
        check->mr_destroyed(&vmr->ibv_mr);
    }
    free(vmr);
    return 0;
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
    rpc::AllocMwReply reply;
    if (int error = client_of(pd->context).call(rpc::AllocMwRequest{pd->handle, type}, &reply)) {
        report(pd->context, "alloc_mw", error);
        return nullptr;
    }
    auto* mw = static_cast<ibv_mw*>(calloc(1, sizeof(ibv_mw)));
    if (!mw) {
        client_of(pd->context).call_op(rpc::Op::kDeallocMw, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    *mw = {pd->context, pd, reply.rkey, reply.handle, type};
    if (check::CheckState* check = checking(pd->context)) {
        check->created(mw, "MW");
    }
    return mw;
}

// ibv_bind_mw(3), for type 1 windows (libibverbs has checked the type, the
// MR and its PD): a BIND_MW work request on `qp` with the window's next
// rkey, which the window takes at once (the application restores it if the
// bind completes in error), as Soft-RoCE does.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
    const ibv_mw_bind_info& info = mw_bind->bind_info;
    // libibverbs' ibv_bind_mw checks these two from v39 on; before, each
    // provider did (rxe's rxe_bind_mw of v37).
    if (!info.mr && (info.addr || info.length)) {
        return EINVAL;
    }
    if (info.mr && info.mr->pd != mw->pd) {
        return EPERM;
    }
    if (info.mw_access_flags & IBV_ACCESS_ZERO_BASED) {
        return EINVAL;  // o10-36.2.2: type 1 windows are never zero-based
    }
    ibv_send_wr wr{};
    wr.wr_id = mw_bind->wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = mw_bind->send_flags;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = info;
    ibv_send_wr* bad = nullptr;
    if (int error = post_send(qp, &wr, &bad)) {
        return error;
    }
    mw->rkey = wr.bind_mw.rkey;
    return 0;
}

int dealloc_mw(ibv_mw* mw) {
    if (check::CheckState* check = checking(mw->context)) {
        check->deallocating_mw(mw);
    }
    if (int error =
            client_of(mw->context).call_op(rpc::Op::kDeallocMw, rpc::HandleRequest{mw->handle})) {
        return report(mw->context, "dealloc_mw", error);
    }
    if (check::CheckState* check = checking(mw->context)) {
        check->destroyed(mw);
    }
    free(mw);
    return 0;
}

// Imports (ibv_import_pd/mr/dm(3)) on a context imported from another's
// command descriptor: the objects are that context's, which the daemon
// shares; unimporting frees only this process's view of them.
ibv_pd* import_pd(ibv_context* context, uint32_t handle) {
    if (int error = client_of(context).call_op(rpc::Op::kImportPd, rpc::HandleRequest{handle})) {
        report(context, "import_pd", error);
        return nullptr;
    }
    auto* pd = new (std::nothrow) ProviderPd;
    if (!pd) {
        errno = ENOMEM;
        return nullptr;
    }
    pd->ibv.context = context;
    pd->ibv.handle = handle;
    return &pd->ibv;
}

void unimport_pd(ibv_pd* pd) {
    delete to_pd(pd);
}

ibv_mr* import_mr(ibv_pd* pd, uint32_t handle) {
    rpc::ImportMrReply reply;
    if (int error = client_of(pd->context)
                        .call(rpc::Op::kImportMr, &handle, sizeof(handle), &reply, sizeof(reply))) {
        report(pd->context, "import_mr", error);
        return nullptr;
    }
    auto* vmr = static_cast<verbs_mr*>(calloc(1, sizeof(verbs_mr)));
    if (!vmr) {
        errno = ENOMEM;
        return nullptr;
    }
    vmr->ibv_mr = {pd->context,  pd,     reinterpret_cast<void*>(reply.addr),
                   reply.length, handle, reply.lkey,
                   reply.rkey};
    vmr->mr_type = IBV_MR_TYPE_IMPORTED_MR;
    vmr->access = reply.access;
    return &vmr->ibv_mr;
}

void unimport_mr(ibv_mr* mr) {
    free(mr);
}

// Device memory is a mapping of the process that allocated it; the import
// reaches the same mapping (imports stay within that process).
ibv_dm* import_dm(ibv_context* context, uint32_t handle) {
    rpc::ImportDmReply reply;
    if (int error = client_of(context).call(rpc::Op::kImportDm, &handle, sizeof(handle), &reply,
                                            sizeof(reply))) {
        report(context, "import_dm", error);
        return nullptr;
    }
    auto* dm = static_cast<ProviderDm*>(calloc(1, sizeof(ProviderDm)));
    if (!dm) {
        errno = ENOMEM;
        return nullptr;
    }
    dm->memory = reinterpret_cast<std::byte*>(reply.addr);
    dm->length = reply.length;
    dm->mapped = 0;  // not this object's to unmap
    dm->ibv.handle = handle;
    dm->ibv.dm.context = context;
    dm->ibv.dm.handle = handle;
    dm->ibv.dm.memcpy_to_dm = memcpy_to_dm;
    dm->ibv.dm.memcpy_from_dm = memcpy_from_dm;
    return &dm->ibv.dm;
}

void unimport_dm(ibv_dm* dm) {
    free(to_dm(dm));
}

}  // namespace uroce
