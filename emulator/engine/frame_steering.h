// The receive side of the emulated Ethernet segment: which RAW_PACKET QPs
// (or WQs of RSS QPs) of a device a frame goes to, by the device's flow rules.
#pragma once

#include <span>

#include "device/device.h"

namespace uroce {

struct Qp;

// NORMAL rules take a frame by priority (the lowest value first); a rule
// with IBV_FLOW_ATTR_FLAGS_DONT_TRAP lets it go on to the next priority and
// to the defaults. What no NORMAL rule traps goes to the ALL_DEFAULT rules,
// and, when multicast, the MC_DEFAULT ones; SNIFFER rules see every frame.
// A drop action among the rules that take it drops it for them all. Each
// QP receives a frame once. The QP `sender`, when given, takes nothing (it
// sent the frame). False when no rule took the frame (or it does not
// parse): the caller says what becomes of it.
bool steer_frame(Device& device, std::span<const std::byte> frame, const Qp* sender = nullptr);

}  // namespace uroce
