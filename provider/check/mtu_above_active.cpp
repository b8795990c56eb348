// mtu-above-active: ibv_modify_qp sets a path MTU above the active MTU of
// the QP's port. uroce lowers it to the active MTU; a NIC may send packets
// the link cannot carry.
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

int bytes(ibv_mtu mtu) {
    return 128 << static_cast<int>(mtu);  // IBV_MTU_256 is 1
}

class MtuAboveActive : public Checker {
  public:
    void qp_modified(CheckState& state, QpState& qp, ibv_qp_state, const ibv_qp_attr& attr,
                     int mask, const ibv_port_attr* port) override {
        if (!(mask & IBV_QP_PATH_MTU) || !port || attr.path_mtu <= port->active_mtu) {
            return;
        }
        Finding finding{Rule::kMtuAboveActive, qp.qpn,
                        "ibv_modify_qp: path_mtu " + std::to_string(bytes(attr.path_mtu)) +
                            " is above the port's active_mtu " +
                            std::to_string(bytes(port->active_mtu)) +
                            " (ibv_query_port), which the link carries.",
                        "a packet is at most the path MTU: above what the link carries it is "
                        "dropped or refused on the way, and the requester retries until "
                        "IBV_WC_RETRY_EXC_ERR",
                        "set path_mtu to at most the active_mtu of both ends' ports (the "
                        "smaller of the two), as ibv_rc_pingpong and perftest do"};
        finding.differs = Difference::kMtuAboveActive;
        state.report_once(qp, finding);
    }
};

}  // namespace

std::unique_ptr<Checker> make_mtu_above_active() {
    return std::make_unique<MtuAboveActive>();
}

}  // namespace uroce::check
