// Protection domains, memory regions, device memory and memory windows.
#include <sys/mman.h>

#include "keys/regions.h"
#include "verbs/context.h"

namespace uroce {
namespace {

constexpr int kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
                                 IBV_ACCESS_HUGETLB;
constexpr int kRemoteAccess =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr int kDmAccess = IBV_ACCESS_LOCAL_WRITE | kRemoteAccess | IBV_ACCESS_ZERO_BASED;
constexpr uint64_t kPageMask = 4095;
// Device memory is page-aligned in the client.
constexpr uint32_t kMaxDmLogAlign = 12;

// ib_check_mr_access(): flags the device lacks, and remote write or atomic
// without local write, are refused. Optional flags may be ignored.
Result check_access(int access) {
    access &= ~IBV_ACCESS_OPTIONAL_RANGE;
    if (access & ~kSupportedAccess) {
        return fail(EINVAL, "access flags 0x%x are not supported", access & ~kSupportedAccess);
    }
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        return fail(EINVAL, "remote write or atomic access requires IBV_ACCESS_LOCAL_WRITE");
    }
    return ok();
}

Result check_range(uint64_t addr, uint64_t length, uint64_t iova) {
    if (length == 0) {
        return fail(EINVAL, "memory region length is 0");
    }
    if (addr + length < addr) {
        return fail(EINVAL, "memory region [0x%llx, +0x%llx) wraps around",
                    (unsigned long long)addr, (unsigned long long)length);
    }
    if ((addr & kPageMask) != (iova & kPageMask)) {
        return fail(EINVAL, "address 0x%llx and iova 0x%llx differ within the page",
                    (unsigned long long)addr, (unsigned long long)iova);
    }
    return ok();
}

}  // namespace

Result Context::alloc_pd(const rpc::Empty&, rpc::AllocPdReply& reply) {
    if (Result r = device_.admit(owner_, ObjectKind::kPd); !r) {
        return r;
    }
    reply.handle = pds_.add(std::make_shared<Pd>())->handle;
    device_.count(owner_, ObjectKind::kPd, 1);
    return ok();
}

Result Context::dealloc_pd(const rpc::HandleRequest& req, rpc::Empty&) {
    auto pd = pds_.find(req.handle);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.handle);
    }
    if (pd->users) {
        return fail(EBUSY, "PD %u is still used by %d objects", req.handle, pd->users);
    }
    pds_.erase(req.handle);
    device_.count(owner_, ObjectKind::kPd, -1);
    return ok();
}

Result Context::reg_mr(const rpc::RegMrRequest& req, rpc::RegMrReply& reply) {
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    if (Result r = check_access(req.access); !r) {
        return r;
    }
    // addr 0 and SIZE_MAX bytes: implicit ODP, the whole address space.
    if (req.addr == 0 && req.length == UINT64_MAX && !(req.access & IBV_ACCESS_ON_DEMAND)) {
        return fail(EINVAL,
                    "the whole address space is registered only on demand "
                    "(IBV_ACCESS_ON_DEMAND: implicit ODP)");
    }
    if (Result r = check_range(req.addr, req.length, req.hca_va); !r) {
        return r;
    }
    return register_region(pd, req.addr, req.length, req.hca_va, req.access, nullptr, reply);
}

Result Context::register_region(const std::shared_ptr<Pd>& pd, uint64_t addr, uint64_t length,
                                uint64_t iova, int access, const std::shared_ptr<Dm>& dm,
                                rpc::RegMrReply& reply) {
    if (Result r = device_.admit(owner_, ObjectKind::kMr); !r) {
        return r;
    }
    auto mr = std::make_shared<Mr>();
    const auto index = device_.keys().add({mr.get(), nullptr});
    if (!index) {
        return fail(ENOMEM, "no memory keys left");
    }
    mr->pd = Ref<Pd>(pd);
    mr->dm = Ref<Dm>(dm);
    mr->addr = addr;
    mr->length = length;
    mr->iova = iova;
    mr->access = access;
    mr->key_index = *index;
    // One key for both uses, as mlx5 and rxe give: what it may do remotely
    // is checked against the MR's access on every use, and ibv_rereg_mr can
    // then grant remote access to the key a peer already holds.
    mr->lkey = mr->rkey = make_key(*index, 0);
    mr->pid = pid_;
    mrs_.add(mr);
    device_.count(owner_, ObjectKind::kMr, 1);
    reply = {mr->handle, mr->lkey, mr->rkey};
    return ok();
}

// ibv_advise_mr(3). Prefetching reads the ranges, which faults their pages
// into the application as its first access by an operation would (the
// daemon pins nothing); it is always done before returning, as with
// IBV_ADVISE_MR_FLAG_FLUSH.
Result Context::advise_mr(const rpc::AdviseMrRequest& req, rpc::Empty&) {
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    if (req.advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
        req.advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        req.advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
        return fail(EOPNOTSUPP, "advice %u is not supported", req.advice);
    }
    if (req.flags & ~IBV_ADVISE_MR_FLAG_FLUSH) {
        return fail(EINVAL, "unknown advise flags 0x%x", req.flags & ~IBV_ADVISE_MR_FLAG_FLUSH);
    }
    if (req.num_sge == 0 || req.num_sge > rpc::kMaxAdviseSges) {
        return fail(EINVAL, "%u ranges: 1 to %u are allowed", req.num_sge, rpc::kMaxAdviseSges);
    }
    const int access =
        req.advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? IBV_ACCESS_LOCAL_WRITE : 0;
    Extent ranges;
    if (AccessFault fault =
            resolve_local(device_, pd.get(), std::span(req.sges, req.num_sge), access, ranges);
        fault != AccessFault::kNone) {
        return fail(EFAULT, "a range to prefetch: %s", access_fault_text(fault));
    }
    if (req.advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
        return ok();  // only what is present would be mapped: nothing to do
    }
    constexpr uint64_t kChunk = 64 * 1024;
    std::vector<std::byte> chunk(std::min(kChunk, ranges.length));
    for (uint64_t offset = 0; offset < ranges.length; offset += kChunk) {
        const uint64_t bytes = std::min(kChunk, ranges.length - offset);
        if (read_process(ranges.pid, slice(ranges, offset, bytes), std::span(chunk).first(bytes)) !=
            0) {
            return fail(EFAULT, "part of a range to prefetch is not mapped in the process");
        }
    }
    return ok();
}

Result Context::rereg_mr(const rpc::ReregMrRequest& req, rpc::ReregMrReply& reply) {
    auto mr = mrs_.find(req.handle);
    if (!mr) {
        return fail(EINVAL, "no MR with handle %u", req.handle);
    }
    if (mr->dm) {
        return fail(EINVAL, "MR %u is on device memory, which is never re-registered", req.handle);
    }
    constexpr int kAllFlags =
        IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    if (req.flags == 0 || (req.flags & ~kAllFlags)) {
        return fail(EINVAL, "rereg flags 0x%x are invalid", req.flags);
    }
    std::shared_ptr<Pd> pd;
    if (req.flags & IBV_REREG_MR_CHANGE_PD) {
        pd = pds_.find(req.pd);
        if (!pd) {
            return fail(EINVAL, "no PD with handle %u", req.pd);
        }
    }
    int access = mr->access;
    if (req.flags & IBV_REREG_MR_CHANGE_ACCESS) {
        if (Result r = check_access(req.access); !r) {
            return r;
        }
        access = req.access;
    }
    if (req.flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        if (Result r = check_range(req.addr, req.length, req.addr); !r) {
            return r;
        }
    }
    // Everything checked: apply. The keys stay (as mlx5 and rxe keep them):
    // a peer's key reaches the MR as it now is.
    if (pd) {
        mr->pd = Ref<Pd>(pd);
    }
    if (req.flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = req.addr;
        mr->iova = req.addr;
        mr->length = req.length;
    }
    mr->access = access;
    reply = {mr->lkey, mr->rkey};
    return ok();
}

Result Context::dereg_mr(const rpc::HandleRequest& req, rpc::Empty&) {
    auto mr = mrs_.find(req.handle);
    if (!mr) {
        return fail(EINVAL, "no MR with handle %u", req.handle);
    }
    // IBA 10.6.7.2.6; EINVAL as Soft-RoCE says it.
    if (mr->users) {
        return fail(EINVAL, "MR %u still has %d memory windows bound", req.handle, mr->users);
    }
    device_.keys().remove(mr->key_index);
    mrs_.erase(req.handle);
    device_.count(owner_, ObjectKind::kMr, -1);
    return ok();
}

// ibv_alloc_dm(3). The client has mapped `length` bytes; the device hands
// out at most max_dm_size bytes in all.
Result Context::alloc_dm(const rpc::AllocDmRequest& req, rpc::AllocDmReply& reply) {
    if (req.comp_mask) {
        return fail(EINVAL, "unknown ibv_alloc_dm_attr comp_mask 0x%x", req.comp_mask);
    }
    if (req.length == 0) {
        return fail(EINVAL, "device memory length is 0");
    }
    if (req.log_align_req > kMaxDmLogAlign) {
        return fail(EINVAL, "alignment 2^%u: device memory is aligned to at most 2^%u bytes",
                    req.log_align_req, kMaxDmLogAlign);
    }
    const uint64_t size = device_.attr().max_dm_size;
    if (req.length > size - device_.counts().dm_bytes) {
        return fail(ENOMEM, "device %s has %llu of its %llu bytes of device memory free",
                    device_.name().c_str(),
                    static_cast<unsigned long long>(size - device_.counts().dm_bytes),
                    static_cast<unsigned long long>(size));
    }
    auto dm = std::make_shared<Dm>();
    dm->addr = req.addr;
    dm->length = req.length;
    reply.handle = dms_.add(dm)->handle;
    device_.count(owner_, ObjectKind::kDm, 1);
    device_.counts().dm_bytes += dm->length;
    return ok();
}

Result Context::free_dm(const rpc::HandleRequest& req, rpc::Empty&) {
    auto dm = dms_.find(req.handle);
    if (!dm) {
        return fail(EINVAL, "no device memory with handle %u", req.handle);
    }
    if (dm->users) {
        return fail(EBUSY, "device memory %u still has %d MRs", req.handle, dm->users);
    }
    device_.count(owner_, ObjectKind::kDm, -1);
    device_.counts().dm_bytes -= dm->length;
    dms_.erase(req.handle);
    return ok();
}

// ibv_reg_dm_mr(3): always zero-based, for the access flags device memory
// allows (no windows, no paging), inside the allocation.
Result Context::reg_dm_mr(const rpc::RegDmMrRequest& req, rpc::RegMrReply& reply) {
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    auto dm = dms_.find(req.dm);
    if (!dm) {
        return fail(EINVAL, "no device memory with handle %u", req.dm);
    }
    const int access = static_cast<int>(req.access);
    if (!(access & IBV_ACCESS_ZERO_BASED)) {
        return fail(EINVAL, "an MR on device memory must be IBV_ACCESS_ZERO_BASED");
    }
    if (access & ~(kDmAccess | IBV_ACCESS_OPTIONAL_RANGE)) {
        return fail(EINVAL, "access flags 0x%x are not allowed on device memory",
                    access & ~(kDmAccess | IBV_ACCESS_OPTIONAL_RANGE));
    }
    if (Result r = check_access(access); !r) {
        return r;
    }
    // As the kernel's DM_MR_REG: inside the allocation; an empty MR is fine.
    if (req.offset > dm->length || req.length > dm->length - req.offset) {
        return fail(EINVAL, "[%llu, +%llu) is not inside the %llu bytes of device memory",
                    static_cast<unsigned long long>(req.offset),
                    static_cast<unsigned long long>(req.length),
                    static_cast<unsigned long long>(dm->length));
    }
    return register_region(pd, dm->addr + req.offset, req.length, 0, access, dm, reply);
}

Result Context::alloc_mw(const rpc::AllocMwRequest& req, rpc::AllocMwReply& reply) {
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    if (req.type != IBV_MW_TYPE_1 && req.type != IBV_MW_TYPE_2) {
        return fail(EINVAL, "memory window type %d is neither 1 nor 2", req.type);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kMw); !r) {
        return r;
    }
    auto mw = std::make_shared<Mw>();
    const auto index = device_.keys().add({nullptr, mw.get()});
    if (!index) {
        return fail(ENOMEM, "no memory keys left");
    }
    mw->pd = Ref<Pd>(pd);
    mw->type = static_cast<ibv_mw_type>(req.type);
    mw->key_index = *index;
    mw->rkey = make_key(*index, 0);
    mw->valid = mw->type == IBV_MW_TYPE_1;
    mws_.add(mw);
    device_.count(owner_, ObjectKind::kMw, 1);
    reply = {mw->handle, mw->rkey};
    return ok();
}

Result Context::dealloc_mw(const rpc::HandleRequest& req, rpc::Empty&) {
    auto mw = mws_.find(req.handle);
    if (!mw) {
        return fail(EINVAL, "no MW with handle %u", req.handle);
    }
    device_.keys().remove(mw->key_index);
    mws_.erase(req.handle);
    device_.count(owner_, ObjectKind::kMw, -1);
    return ok();
}

Result Context::import_pd(const rpc::HandleRequest& req, rpc::Empty&) {
    return pds_.find(req.handle) ? ok() : fail(EINVAL, "no PD with handle %u", req.handle);
}

Result Context::import_mr(const rpc::HandleRequest& req, rpc::ImportMrReply& reply) {
    auto mr = mrs_.find(req.handle);
    if (!mr) {
        return fail(EINVAL, "no MR with handle %u", req.handle);
    }
    reply = {mr->iova, mr->length, mr->lkey, mr->rkey, mr->pd.get()->handle, mr->access};
    return ok();
}

Result Context::import_dm(const rpc::HandleRequest& req, rpc::ImportDmReply& reply) {
    auto dm = dms_.find(req.handle);
    if (!dm) {
        return fail(EINVAL, "no device memory with handle %u", req.handle);
    }
    reply = {dm->addr, dm->length};
    return ok();
}

}  // namespace uroce
