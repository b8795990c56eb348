// completions-after-destroy: a CQ polled after ibv_destroy_qp took out
// completions of the QP that were still in it. uroce (as mlx5) removes
// them; rxe and EFA leave them, and there this poll returns work of a QP
// that is gone, whose wr_ids may name memory the program freed with it.
#include <map>
#include <set>
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

class CompletionsAfterDestroy : public Checker {
  public:
    void qp_destroyed(CheckState&, const QpState& qp, const ibv_cq* cq, uint32_t removed) override {
        if (cq && removed && !reported_.count(cq)) {
            Removed& left = left_[cq];
            left.qpn = qp.qpn;
            left.count += removed;
        }
    }

    void polling(CheckState& state, const ibv_cq* cq) override {
        const auto it = left_.find(cq);
        if (it == left_.end()) {
            return;
        }
        const Removed left = it->second;
        left_.erase(it);
        reported_.insert(cq);
        Finding finding{
            Rule::kCompletionsAfterDestroy, left.qpn,
            "ibv_poll_cq on a CQ that held " + std::to_string(left.count) +
                " completion(s) of QP " + hex(left.qpn) +
                " not polled when ibv_destroy_qp destroyed it.",
            "what a destroy does with them differs: some NICs remove them, others leave them "
            "and this poll returns them, with the destroyed QP's qp_num and wr_ids (a program "
            "that takes its connection's state from the wr_id reads freed memory)",
            "drain a QP before destroying it (move it to ERR and poll until its flushed "
            "completions are in), or, at a completion, check that its qp_num is of a QP still "
            "alive before using its wr_id"};
        finding.differs = Difference::kCompletionsAfterDestroy;
        state.report(finding);
    }

    void destroyed(CheckState&, const void* object) override {
        left_.erase(static_cast<const ibv_cq*>(object));
        reported_.erase(static_cast<const ibv_cq*>(object));
    }

  private:
    struct Removed {
        uint32_t qpn = 0;  // the latest QP destroyed with some
        uint32_t count = 0;
    };
    std::map<const ibv_cq*, Removed> left_;
    std::set<const ibv_cq*> reported_;  // once per CQ
};

}  // namespace

std::unique_ptr<Checker> make_completions_after_destroy() {
    return std::make_unique<CompletionsAfterDestroy>();
}

}  // namespace uroce::check
