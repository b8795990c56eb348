// Resolves keys and addresses to application memory, checking what the IBA
// requires on every access: the key names a live region (an rkey for remote
// access: of an MR, or of a memory window bound to one), the region belongs
// to the QP's protection domain (a type 2 window: to the QP itself), its
// access flags allow the operation, and the range lies inside it.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/types.h>

#include <span>
#include <vector>

#include "memory/process_memory.h"

namespace uroce {

class Device;
struct Pd;
struct Qp;

enum class AccessFault { kNone, kInvalidKey, kWrongPd, kWrongQp, kNoPermission, kOutOfBounds };

const char* access_fault_text(AccessFault fault);

// [va, va + length) through `rkey`, for a remote request on `qp`, whose
// memory is that of `pd` (the QP's, or for XRC the SRQ's).
AccessFault resolve_remote(const Device& device, const Qp& qp, const Pd* pd, uint32_t rkey,
                           uint64_t va, uint64_t length, int access, Extent& out);

// A scatter/gather list through lkeys, for a local access on a QP of `pd`.
// `access` is IBV_ACCESS_LOCAL_WRITE when the device writes the buffers.
AccessFault resolve_local(const Device& device, const Pd* pd, std::span<const ibv_sge> sges,
                          int access, Extent& out);

}  // namespace uroce
