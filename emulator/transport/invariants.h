// The daemon's own invariants about a QP (uroced --paranoid): what its
// requester and responder keep must always hold, whatever a program or a
// peer sent. They are checked after every step the engine takes on a QP; a
// broken one is a daemon bug, reported with the QP's case and the daemon
// aborted, so that it is never taken for a bug of the program.
#pragma once

#include <string>

#include "device/device.h"
#include "objects/objects.h"

namespace uroce::transport {

// The first invariant of `qp` that does not hold, in a sentence; empty when
// all hold.
std::string broken_invariant(const Device& device, const Qp& qp);

// A test build's planted daemon bug (tests/system/planted_bug.cpp), run on
// each send WQE the requester takes; null in uroced.
extern void (*planted_bug)(Device& device, Qp& qp, SendWork& work);

}  // namespace uroce::transport
