// inline-beyond-asked (a note): IBV_SEND_INLINE with more bytes than the
// max_inline_data the program asked ibv_create_qp for, within what this
// device granted. It works where a device grants more than asked and fails
// with EINVAL (or ENOMEM) where it grants what was asked.
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

class InlineBeyondAsked : public Checker {
  public:
    void posted_send(CheckState& state, QpState& qp, const ibv_send_wr& wr) override {
        if (!(wr.send_flags & IBV_SEND_INLINE)) {
            return;
        }
        const uint64_t length = gathered_length(wr);
        if (length <= qp.asked.max_inline_data || length > qp.granted.max_inline_data) {
            return;  // within what was asked, or beyond-caps' (the post is refused)
        }
        Finding note{Rule::kInlineBeyondAsked, qp.qpn,
                     "ibv_post_send: wr_id " + hex(wr.wr_id) + " carries " +
                         std::to_string(length) +
                         " bytes inline, and ibv_create_qp was asked "
                         "for max_inline_data " +
                         std::to_string(qp.asked.max_inline_data) + " (this device granted " +
                         std::to_string(qp.granted.max_inline_data) + ").",
                     "a device may grant more inline data than asked (it says how much in "
                     "cap.max_inline_data on return), or exactly what was asked: there the "
                     "post fails with EINVAL",
                     "ask ibv_create_qp for the inline size the program posts, or read "
                     "cap.max_inline_data back after it and keep each inline send within it"};
        note.differs = Difference::kInlineGranted;
        state.report_once(qp, note);
    }
};

}  // namespace

std::unique_ptr<Checker> make_inline_beyond_asked() {
    return std::make_unique<InlineBeyondAsked>();
}

}  // namespace uroce::check
