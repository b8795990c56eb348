// The daemon's CPU priority: programs busy-poll their CQs, and on a machine
// with few cores the daemon, like a NIC's interrupt work in a kernel, should
// get a CPU as soon as it is woken rather than wait for a time slice.
#pragma once

#include <string>

namespace uroce {

// Runs the calling thread (and the threads it starts later) at `nice`, and,
// when the process leads its own session, that session's autogroup too:
// with autogroup (most distributions' kernels) the scheduler first shares
// a CPU between sessions, so a nice within the daemon's session alone
// would not count against programs of other sessions. Returns what could
// not be done, as sentences for the log; empty when all was.
std::string raise_priority(int nice);

}  // namespace uroce
