// The memory window operations a send queue carries: binding a window to a
// range of an MR (IBV_WR_BIND_MW; ibv_bind_mw posts one for type 1) and
// invalidating a type 2 window (IBV_WR_LOCAL_INV, and the rkey a SEND with
// invalidate names). The checks are the IBA's, made as Soft-RoCE makes them.
#pragma once

#include <stdint.h>

namespace uroce {

class Device;
struct Pd;
struct Qp;
namespace queues {
struct SendWqe;
}

// Binds the window `wqe` names for `qp`; nullptr, or why it cannot be bound.
const char* bind_window(Device& device, const Qp& qp, const queues::SendWqe& wqe);

// Invalidates the window `rkey` names, which must be of `pd`; nullptr, or
// why it cannot be. MR keys cannot be invalidated: there are no
// fast-registration MRs.
const char* invalidate_window(Device& device, const Pd* pd, uint32_t rkey);

}  // namespace uroce
