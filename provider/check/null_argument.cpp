// null-argument: NULL where a verb reads an object: the attributes of a
// create, modify or query, the work request list of a post or its bad_wr,
// a gather list with num_sge elements, a UD send's address handle, a bind's
// window. The provider refuses each with EINVAL (refusal.h); a NIC's
// provider may crash on it instead (mlx5 follows a NULL sg_list).
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

constexpr const char* kNic =
    "the verb returns EINVAL here; many providers (mlx5's among them) follow the pointer "
    "instead, and the program crashes inside the provider";

Finding null_finding(uint32_t qpn, const std::string& what) {
    return {Rule::kNullArgument, qpn, what, kNic,
            "give the verb the object it reads (see its man page), or do not call it"};
}

// The argument of a refused send that is NULL where it is read, or null.
const char* null_in(const ibv_send_wr& wr, ibv_qp_type type) {
    if (wr.num_sge > 0 && !wr.sg_list) {
        return "sg_list";
    }
    if (type == IBV_QPT_UD && !wr.wr.ud.ah) {
        return "wr.ud.ah";
    }
    if (wr.opcode == IBV_WR_BIND_MW && !wr.bind_mw.mw) {
        return "bind_mw.mw";
    }
    return nullptr;
}

class NullArgument : public Checker {
  public:
    void refused(CheckState& state, QpState& qp, const Refusal& refusal) override {
        if (refusal.error != EINVAL) {
            return;
        }
        const bool send = refusal.send != nullptr;
        const char* argument = send ? null_in(*refusal.send, qp.type)
                               : refusal.recv->num_sge > 0 && !refusal.recv->sg_list ? "sg_list"
                                                                                     : nullptr;
        if (!argument) {
            return;
        }
        const uint64_t wr_id = send ? refusal.send->wr_id : refusal.recv->wr_id;
        state.report_once(
            qp, null_finding(qp.qpn, std::string(send ? "ibv_post_send" : "ibv_post_recv") +
                                         ": wr_id " + hex(wr_id) + " has " + argument +
                                         " NULL, which the post reads."));
    }
};

}  // namespace

std::unique_ptr<Checker> make_null_argument() {
    return std::make_unique<NullArgument>();
}

void CheckState::null_argument(const char* verb, const char* argument) {
    Held locked(lock_);
    report(
        null_finding(0, std::string(verb) + " was given " + argument + " NULL, which it reads."));
}

}  // namespace uroce::check
