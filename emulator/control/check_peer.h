// Check mode's look at both ends of a connection between QPs of this
// daemon (docs/check.md, peer-mismatch): the attributes each end set that
// the other contradicts.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace uroce {

class Device;
struct Qp;

// How `qp` and its peer disagree, one sentence each, or "" (no peer of
// this daemon connected back to it, or both agree).
std::string peer_mismatch(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices);

// Why `qp`'s peer refused its last remote access, or "".
std::string peer_refusal(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices);

}  // namespace uroce
