// post-loop-in-error: work posted again and again to a QP in ERR. Each
// post completes at once as IBV_WC_WR_FLUSH_ERR; a program that reposts on
// each flushed completion (a receive, most often) loops for ever at full
// speed, and its QP never gets back to work.
#include <algorithm>
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

// Posts after which it is a loop: more than a program drains and reposts
// once on each of its queues.
uint32_t loop_posts(const QpState& qp) {
    constexpr uint32_t kAtLeast = 64;
    const uint32_t depths = qp.granted.max_send_wr + qp.granted.max_recv_wr;
    return std::max(kAtLeast, 2 * depths);
}

class PostLoopInError : public Checker {
  public:
    void posting(CheckState& state, QpState& qp, ibv_qp_state now, bool send) override {
        if (now != IBV_QPS_ERR) {
            qp.posts_in_error = 0;
            return;
        }
        if (++qp.posts_in_error != loop_posts(qp)) {
            return;
        }
        state.report_once(
            qp, {Rule::kPostLoopInError, qp.qpn,
                 std::string(send ? "ibv_post_send" : "ibv_post_recv") + " on a QP in ERR: " +
                     std::to_string(qp.posts_in_error) + " posts since it went to ERR" +
                     (qp.error_cause.empty() ? "" : " (" + qp.error_cause + ")") +
                     ", each flushed at once.",
                 "a QP in ERR executes nothing: each work request posted completes at once with "
                 "IBV_WC_WR_FLUSH_ERR. A program that posts again at each flushed completion "
                 "spins at full speed for ever",
                 "at a completion with IBV_WC_WR_FLUSH_ERR (or any error), stop posting to the "
                 "QP: drain it, then reset it (RESET, INIT, RTR, RTS) or destroy it"});
    }

    void qp_modified(CheckState&, QpState& qp, ibv_qp_state, const ibv_qp_attr& attr, int mask,
                     const ibv_port_attr*) override {
        if ((mask & IBV_QP_STATE) && attr.qp_state != IBV_QPS_ERR) {
            qp.posts_in_error = 0;
        }
    }
};

}  // namespace

std::unique_ptr<Checker> make_post_loop_in_error() {
    return std::make_unique<PostLoopInError>();
}

}  // namespace uroce::check
