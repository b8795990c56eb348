// stranded-completion: ibv_get_cq_event waits on a channel whose armed CQs
// hold completions. A CQ reports an event for completions that come after
// its arm, none for those already in it: a program that re-arms without
// polling once more waits for ever, with its work done.
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

class StrandedCompletion : public Checker {
  public:
    void waiting(CheckState& state, const ChannelWait& wait) override {
        if (reported_ || wait.held_by_armed == 0) {
            return;
        }
        reported_ = true;
        state.report(
            {Rule::kStrandedCompletion, 0,
             "ibv_get_cq_event has waited a second on a completion channel whose " +
                 std::to_string(wait.armed) + " armed CQ(s) hold " +
                 std::to_string(wait.held_by_armed) +
                 " completion(s) not polled: they came before ibv_req_notify_cq armed the CQ, "
                 "and no poll after the arm took them.",
             "an armed CQ reports an event when a completion comes after the arm (IBA "
             "11.4.2.2); those already in it report none, so the wait lasts until some later "
             "work completes, or for ever (rxe, mlx5, and uroce alike)",
             "after ibv_req_notify_cq, poll the CQ once more and handle what it returns before "
             "waiting in ibv_get_cq_event (the order in ibv_get_cq_event(3): get, ack, arm, "
             "poll until empty)"});
    }

  private:
    bool reported_ = false;  // once per context
};

}  // namespace

std::unique_ptr<Checker> make_stranded_completion() {
    return std::make_unique<StrandedCompletion>();
}

}  // namespace uroce::check
