// A QP's peer is the QP of this daemon that its address vector and
// dest_qp_num name, if that QP names it back. Each rule compares what one
// end sends with what the other takes, once both ends have set them.
#include "control/check_peer.h"

#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "objects/objects.h"
#include "wire/headers.h"

namespace uroce {
namespace {

// QP `qpn` of the device of this daemon that has GID `dgid`.
const Qp* find_qp(const ibv_gid& dgid, uint32_t qpn,
                  const std::vector<std::unique_ptr<Device>>& devices, const Device** where) {
    for (const auto& device : devices) {
        for (const ibv_gid& gid : device->gids()) {
            if (memcmp(gid.raw, dgid.raw, sizeof(gid.raw)) == 0) {
                *where = device.get();
                return device->qps().find(qpn);
            }
        }
    }
    return nullptr;
}

const Qp* find_peer(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices,
                    const Device** where) {
    const Qp* peer = find_qp(qp.attr.ah_attr.grh.dgid, qp.attr.dest_qp_num, devices, where);
    return peer && peer->attr.dest_qp_num == qp.qpn ? peer : nullptr;
}

int mtu_bytes(ibv_mtu mtu) {
    return 128 << static_cast<int>(mtu);
}

std::string format(const char* pattern, auto... values) {
    char text[512];
    snprintf(text, sizeof(text), pattern, values...);
    return text;
}

// What `sender` sends that `receiver` does not take; `here`: whether the
// sender is the QP asked about.
void compare(const Qp& sender, const Qp& receiver, bool here, std::string& out) {
    if (sender.attr.qp_state < IBV_QPS_RTS || receiver.attr.qp_state < IBV_QPS_RTR) {
        return;
    }
    const char* from = here ? "this QP" : "the peer";
    const char* to = here ? "the peer" : "this QP";
    if (sender.attr.sq_psn != receiver.attr.rq_psn) {
        out += format(
            "%s sends from PSN 0x%x (sq_psn) and %s expects PSN 0x%x (rq_psn): its first "
            "packets are out of sequence, NAKed or dropped as duplicates. ",
            from, sender.attr.sq_psn, to, receiver.attr.rq_psn);
    }
    if (sender.attr.max_rd_atomic > receiver.attr.max_dest_rd_atomic) {
        out += format(
            "%s keeps up to %u RDMA READs and atomics outstanding (max_rd_atomic) and %s takes "
            "%u (max_dest_rd_atomic): the ones beyond are NAKed (invalid request) and the QP "
            "goes to ERR. ",
            from, sender.attr.max_rd_atomic, to, receiver.attr.max_dest_rd_atomic);
    }
}

}  // namespace

std::string ud_qkey_mismatch(const Qp& qp, const ibv_ah_attr& route, uint32_t remote_qpn,
                             uint32_t remote_qkey,
                             const std::vector<std::unique_ptr<Device>>& devices) {
    const Device* where = nullptr;
    const Qp* target = find_qp(route.grh.dgid, remote_qpn, devices, &where);
    // A Q_Key with its high bit set means "the sender's own" (IBA 10.2.5).
    const uint32_t sent = (remote_qkey & wire::kControlledQkey) ? qp.attr.qkey : remote_qkey;
    if (!target || target->type != IBV_QPT_UD || target->attr.qp_state < IBV_QPS_RTR ||
        target->attr.qkey == sent) {
        return "";
    }
    return format(
        "QP 0x%x of %s, where these datagrams go, has Q_Key 0x%x and they carry 0x%x%s: it "
        "drops every one (rcvd_qkey_err), and the sender's completions say success",
        target->qpn, where->name().c_str(), target->attr.qkey, sent,
        (remote_qkey & wire::kControlledQkey) ? " (this QP's own, as remote_qkey's high bit asks)"
                                              : "");
}

std::string peer_refusal(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices) {
    const Device* where = nullptr;
    const Qp* peer = find_peer(qp, devices, &where);
    if (!peer || peer->responder.refused.empty()) {
        return "";
    }
    return format("QP 0x%x of %s, its peer, refused %s", peer->qpn, where->name().c_str(),
                  peer->responder.refused.c_str());
}

std::string peer_mismatch(const Qp& qp, const std::vector<std::unique_ptr<Device>>& devices) {
    const bool connected = qp.type == IBV_QPT_RC || qp.type == IBV_QPT_UC ||
                           qp.type == IBV_QPT_XRC_SEND || qp.type == IBV_QPT_XRC_RECV;
    if (!connected || qp.attr.qp_state < IBV_QPS_RTR || qp.attr.qp_state > IBV_QPS_SQE) {
        return "";
    }
    const Device* where = nullptr;
    const Qp* peer = find_peer(qp, devices, &where);
    if (!peer || peer->attr.qp_state < IBV_QPS_RTR || peer->attr.qp_state > IBV_QPS_SQE) {
        return "";
    }
    std::string out;
    if (qp.attr.path_mtu != peer->attr.path_mtu) {
        out += format(
            "this QP's path MTU is %d bytes and its peer's %d: packets longer than the "
            "receiving end's MTU are rejected (rxe: a length error), so messages longer than "
            "the smaller MTU fail. ",
            mtu_bytes(qp.attr.path_mtu), mtu_bytes(peer->attr.path_mtu));
    }
    compare(qp, *peer, true, out);
    if (peer != &qp) {  // a QP connected to itself is both ends
        compare(*peer, qp, false, out);
    }
    if (out.empty()) {
        return "";
    }
    return format("QP 0x%x is connected to QP 0x%x of %s, which names it back: ", qp.qpn, peer->qpn,
                  where->name().c_str()) +
           out.substr(0, out.size() - 1);
}

}  // namespace uroce
