// Check mode's look at both ends of a connection between QPs of this
// daemon (docs/check.md, peer-mismatch): the attributes each end set that
// the other contradicts.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

namespace uroce {

class Device;
struct Qp;

// How `qp` and its peer disagree, one sentence each, or "" (no peer of
// this daemon connected back to it, or both agree).
std::string peer_mismatch(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices);

// Whether the UD QP `remote_qpn` of this daemon, where `route` leads, drops
// datagrams `qp` sends it with `remote_qkey`: a sentence, or "".
std::string ud_qkey_mismatch(const Qp& qp, const ibv_ah_attr& route, uint32_t remote_qpn,
                             uint32_t remote_qkey,
                             const std::vector<std::unique_ptr<Device>>& devices);

// Why `qp`'s peer refused its last remote access, or "".
std::string peer_refusal(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices);

}  // namespace uroce
