// fork-unsafe: the parent posts work into an MR it registered before it
// fork()ed, and nothing asked for fork safety (ibv_fork_init,
// RDMAV_FORK_SAFE). On kernels before 5.13 the MR's pages are then shared
// copy-on-write with the child: the parent's next write moves it to a new
// page, while the NIC keeps the old one, now the child's.
#include <set>
#include <string>

#include "checker.h"

namespace uroce::check {
namespace {

class ForkUnsafe : public Checker {
  public:
    void forking(CheckState& state, bool fork_safe) override {
        if (fork_safe || !state.in_opener()) {
            return;
        }
        for (const auto& [lkey, mr] : state.mrs()) {
            if (mr.process_memory && !(mr.access & IBV_ACCESS_ON_DEMAND)) {
                pinned_.insert(lkey);
            }
        }
    }

    void mr_gone(CheckState&, uint32_t lkey) override { pinned_.erase(lkey); }

    void posted_send(CheckState& state, QpState& qp, const ibv_send_wr& wr) override {
        if (!(wr.send_flags & IBV_SEND_INLINE)) {
            check(state, &qp, wr.sg_list, wr.num_sge, "ibv_post_send", wr.wr_id);
        }
    }

    void posted_recv(CheckState& state, QpState* qp, const ibv_recv_wr& wr) override {
        check(state, qp, wr.sg_list, wr.num_sge, qp ? "ibv_post_recv" : "ibv_post_srq_recv",
              wr.wr_id);
    }

  private:
    void check(CheckState& state, QpState* qp, const ibv_sge* sges, int count, const char* verb,
               uint64_t wr_id) {
        if (reported_ || pinned_.empty() || !state.in_opener()) {
            return;
        }
        for (int i = 0; i < count && sges; ++i) {
            const MrKey* mr = pinned_.count(sges[i].lkey) ? state.mr_of(sges[i].lkey) : nullptr;
            if (!mr) {
                continue;
            }
            reported_ = true;
            state.report(
                {Rule::kForkUnsafe, qp ? qp->qpn : 0,
                 std::string(verb) + ": " + element(i, wr_id, sges[i]) +
                     " is in the MR with lkey " + hex(sges[i].lkey) + " (" +
                     std::to_string(mr->length) + " bytes at " + hex(mr->addr) +
                     "), registered before this process called fork(), and neither "
                     "ibv_fork_init nor RDMAV_FORK_SAFE asked for fork safety.",
                 "on kernels before 5.13 an MR's pages are shared copy-on-write with the child "
                 "after fork(): the parent's next write moves it to a new page and the NIC keeps "
                 "the old one, now the child's (receives and READs land where the parent no "
                 "longer looks, sends carry stale bytes). Since 5.13 the kernel copies pinned "
                 "pages for the child (ibv_is_fork_initialized says IBV_FORK_UNNEEDED), and uroce "
                 "pins nothing: it works here",
                 "call ibv_fork_init() before registering memory (or set RDMAV_FORK_SAFE=1), so "
                 "that MRs are not shared with a child; or fork before creating RDMA resources, "
                 "or start children with posix_spawn"});
            return;
        }
    }

    std::set<uint32_t> pinned_;  // lkeys of MRs alive at a fork
    bool reported_ = false;      // once per context
};

}  // namespace

std::unique_ptr<Checker> make_fork_unsafe() {
    return std::make_unique<ForkUnsafe>();
}

}  // namespace uroce::check
