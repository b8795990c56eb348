#include "keys/windows.h"

#include <infiniband/verbs.h>

#include "device/device.h"
#include "objects/objects.h"
#include "protocol/queues.h"

namespace uroce {
namespace {

// What a bind may ask for. Local flags are accepted and mean nothing for a
// window, as in the kernel's rxe (rdma-core's tests bind with LOCAL_WRITE);
// only the remote flags open anything.
constexpr int kWindowAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND |
                              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;

const char* check_bind(const Mw& mw, const Qp& qp, const Mr* mr, const queues::SendWqe& wqe) {
    const int access = static_cast<int>(wqe.bind_access);
    if (access & ~kWindowAccess) {
        return "a window's access has flags other than local write, MW bind, remote access "
               "and zero-based";
    }
    if (mw.type == IBV_MW_TYPE_1) {
        if (access & IBV_ACCESS_ZERO_BASED) {
            return "a type 1 window cannot be zero-based";  // o10-36.2.2
        }
        if (mr && mr->pd.get() != mw.pd.get()) {
            return "the MR and the type 1 window belong to different PDs";
        }
    } else {
        if (mw.valid) {
            return "the type 2 window is bound: invalidate it first";  // o10-37.2.30
        }
        if (mw.pd.get() != qp.pd.get()) {
            return "the type 2 window belongs to another PD than the QP";  // C10-72
        }
        if (!mr) {
            return "a type 2 window is bound to an MR and a non-empty range";  // o10-37.2.40
        }
    }
    if (!mr) {
        return nullptr;  // a type 1 window unbinds
    }
    if (mr->access & IBV_ACCESS_ZERO_BASED) {
        return "a window cannot be bound to a zero-based MR";
    }
    if (!(mr->access & IBV_ACCESS_MW_BIND)) {
        return "the MR was not registered with IBV_ACCESS_MW_BIND";  // C10-73
    }
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
        return "a writable window needs an MR with local write access";  // C10-74
    }
    if (wqe.bind_addr < mr->iova || wqe.bind_addr + wqe.bind_length < wqe.bind_addr ||
        wqe.bind_addr + wqe.bind_length > mr->iova + mr->length) {
        return "the window's range is outside the MR";  // C10-75
    }
    return nullptr;
}

}  // namespace

const char* bind_window(Device& device, const Qp& qp, const queues::SendWqe& wqe) {
    // The work request names the window (ibv_mw), whose rkey field the
    // application need not keep current for type 2: only its index counts.
    Mw* mw = device.find_mw(wqe.mw_rkey >> 8);
    if (!mw) {
        return "no such memory window";
    }
    if ((wqe.rkey >> 8) != mw->key_index) {
        return "the new rkey keeps the window's index and changes only its low byte";
    }
    Mr* mr = nullptr;
    if (wqe.bind_length) {
        mr = device.find_mr(wqe.bind_lkey >> 8);
        if (!mr || mr->lkey != wqe.bind_lkey) {
            return "the lkey names no memory region";
        }
    }
    if (const char* why = check_bind(*mw, qp, mr, wqe)) {
        return why;
    }
    mw->rkey = wqe.rkey;
    mw->valid = true;
    mw->addr = wqe.bind_addr;
    mw->length = wqe.bind_length;
    mw->access = static_cast<int>(wqe.bind_access);
    mw->mr = mr ? Ref<Mr>(mr->shared_from_this()) : Ref<Mr>();
    if (mw->type == IBV_MW_TYPE_2) {
        mw->qp = qp.weak_from_this();
    }
    return nullptr;
}

const char* invalidate_window(Device& device, const Pd* pd, uint32_t rkey) {
    Mw* mw = device.find_mw(rkey >> 8);
    if (!mw) {
        return device.find_mr(rkey >> 8) ? "an MR's key cannot be invalidated"
                                         : "the rkey names no memory window";
    }
    if (mw->rkey != rkey) {
        return "the rkey is not the window's current one";
    }
    if (mw->type == IBV_MW_TYPE_1) {
        return "a type 1 window cannot be invalidated";  // o10-37.2.26
    }
    if (mw->pd.get() != pd) {
        return "the window belongs to another PD";
    }
    mw->valid = false;
    mw->mr.reset();
    mw->addr = mw->length = 0;
    mw->access = 0;
    mw->qp.reset();
    return nullptr;
}

}  // namespace uroce
