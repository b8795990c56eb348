#include "keys/regions.h"

#include "device/device.h"
#include "objects/objects.h"

namespace uroce {
namespace {

// The region `key` names, when it is live and the key is current.
const Mr* find_region(const Device& device, uint32_t key, bool remote) {
    const Mr* mr = device.find_mr(key >> 8);
    if (!mr || (remote ? mr->rkey : mr->lkey) != key || (remote && key == 0)) {
        return nullptr;
    }
    return mr;
}

AccessFault check(const Mr* mr, const Pd* pd, uint64_t va, uint64_t length, int access) {
    if (!mr) {
        return AccessFault::kInvalidKey;
    }
    if (mr->pd.get() != pd) {
        return AccessFault::kWrongPd;
    }
    if ((mr->access & access) != access) {
        return AccessFault::kNoPermission;
    }
    if (va < mr->iova || va + length < va || va + length > mr->iova + mr->length) {
        return AccessFault::kOutOfBounds;
    }
    return AccessFault::kNone;
}

Segment to_segment(const Mr* mr, uint64_t va, uint64_t length) {
    return {mr->addr + (va - mr->iova), length};
}

// A window's range starts at 0 when it is zero-based, else at its MR address.
AccessFault check(const Mw& mw, const Qp& qp, const Pd* pd, uint32_t rkey, uint64_t va,
                  uint64_t length, int access) {
    if (mw.rkey != rkey || !mw.valid || mw.length == 0) {
        return AccessFault::kInvalidKey;
    }
    if (mw.pd.get() != pd) {
        return AccessFault::kWrongPd;
    }
    if (mw.type == IBV_MW_TYPE_2 && mw.qp.lock().get() != &qp) {
        return AccessFault::kWrongQp;
    }
    if ((mw.access & access) != access) {
        return AccessFault::kNoPermission;
    }
    const uint64_t start = (mw.access & IBV_ACCESS_ZERO_BASED) ? 0 : mw.addr;
    if (va < start || va + length < va || va + length > start + mw.length) {
        return AccessFault::kOutOfBounds;
    }
    return AccessFault::kNone;
}

}  // namespace

const char* access_fault_text(AccessFault fault) {
    switch (fault) {
        case AccessFault::kNone:
            return "no fault";
        case AccessFault::kInvalidKey:
            return "the key names no memory region";
        case AccessFault::kWrongPd:
            return "the memory region belongs to another protection domain";
        case AccessFault::kWrongQp:
            return "the memory window is bound to another QP";
        case AccessFault::kNoPermission:
            return "the memory region does not allow this access";
        case AccessFault::kOutOfBounds:
            return "the range is outside the memory region";
    }
    return "unknown fault";
}

AccessFault resolve_remote(const Device& device, const Qp& qp, const Pd* pd, uint32_t rkey,
                           uint64_t va, uint64_t length, int access, Extent& out) {
    if (const Mw* mw = device.find_mw(rkey >> 8)) {
        if (AccessFault fault = check(*mw, qp, pd, rkey, va, length, access);
            fault != AccessFault::kNone) {
            return fault;
        }
        const uint64_t offset = va - ((mw->access & IBV_ACCESS_ZERO_BASED) ? 0 : mw->addr);
        out.pid = mw->mr->pid;
        out.segments = {to_segment(mw->mr.get(), mw->addr + offset, length)};
        out.length = length;
        return AccessFault::kNone;
    }
    const Mr* mr = find_region(device, rkey, true);
    if (AccessFault fault = check(mr, pd, va, length, access); fault != AccessFault::kNone) {
        return fault;
    }
    out.pid = mr->pid;
    out.segments = {to_segment(mr, va, length)};
    out.length = length;
    return AccessFault::kNone;
}

AccessFault resolve_local(const Device& device, const Pd* pd, std::span<const ibv_sge> sges,
                          int access, Extent& out) {
    out.segments.clear();
    out.length = 0;
    for (const ibv_sge& sge : sges) {
        if (sge.length == 0) {
            continue;
        }
        const Mr* mr = find_region(device, sge.lkey, false);
        if (AccessFault fault = check(mr, pd, sge.addr, sge.length, access);
            fault != AccessFault::kNone) {
            return fault;
        }
        out.pid = mr->pid;
        out.segments.push_back(to_segment(mr, sge.addr, sge.length));
        out.length += sge.length;
    }
    return AccessFault::kNone;
}

}  // namespace uroce
