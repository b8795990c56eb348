// beyond-caps: a post the provider refused because a work request asks
// more than the QP was created with: more gather or scatter elements than
// max_send_sge or max_recv_sge, more inline bytes than max_inline_data, or
// more outstanding work than the queue holds. The errno alone (EINVAL,
// ENOMEM) does not say which.
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

// Why the send was refused, or "" when it is not a cap's doing.
std::string send_reason(const QpState& qp, const ibv_send_wr& wr) {
    const ibv_qp_cap& cap = qp.granted;
    if (wr.num_sge > 0 && static_cast<uint32_t>(wr.num_sge) > cap.max_send_sge) {
        return "num_sge " + std::to_string(wr.num_sge) + " is above the QP's max_send_sge " +
               std::to_string(cap.max_send_sge);
    }
    if ((wr.send_flags & IBV_SEND_INLINE) && gathered_length(wr) > cap.max_inline_data) {
        return std::to_string(gathered_length(wr)) +
               " bytes with IBV_SEND_INLINE are above the QP's " + "max_inline_data " +
               std::to_string(cap.max_inline_data);
    }
    return "";
}

std::string recv_reason(const QpState& qp, const ibv_recv_wr& wr) {
    const ibv_qp_cap& cap = qp.granted;
    if (wr.num_sge > 0 && static_cast<uint32_t>(wr.num_sge) > cap.max_recv_sge) {
        return "num_sge " + std::to_string(wr.num_sge) + " is above the QP's max_recv_sge " +
               std::to_string(cap.max_recv_sge);
    }
    return "";
}

class BeyondCaps : public Checker {
  public:
    void refused(CheckState& state, QpState& qp, const Refusal& refusal) override {
        const bool send = refusal.send != nullptr;
        const std::string why = refusal.error != EINVAL ? ""
                                : send                  ? send_reason(qp, *refusal.send)
                                                        : recv_reason(qp, *refusal.recv);
        if (why.empty()) {
            return;
        }
        const uint64_t wr_id = send ? refusal.send->wr_id : refusal.recv->wr_id;
        state.report_once(
            qp, {Rule::kBeyondCaps, qp.qpn,
                 std::string(send ? "ibv_post_send" : "ibv_post_recv") +
                     " failed with EINVAL at wr_id " + hex(wr_id) + ": " + why +
                     " (as ibv_create_qp gave them).",
                 "the post is refused at that work request and those after it (bad_wr points "
                 "at it); the ones before it are posted. Devices grant different caps for the "
                 "same request, so a post that fits one fails on another",
                 "ask ibv_create_qp for the caps the program's work requests need and keep "
                 "within the caps it returns in cap"});
    }
};

}  // namespace

std::unique_ptr<Checker> make_beyond_caps() {
    return std::make_unique<BeyondCaps>();
}

}  // namespace uroce::check
