// The behaviours that differ among NICs (portability.h), as data: each
// from the providers' sources in rdma-core and the kernel's rxe.
#include "portability.h"

#include <array>
#include <atomic>

namespace uroce::check {
namespace {

struct Row {
    const char* name;
    const char* uroce;   // what uroce does
    const char* others;  // what the NICs do, each named
};

constexpr std::array<Row, static_cast<size_t>(Difference::kCount)> kDifferences = {{
    {"unsignaled-slots",
     "frees a send queue slot when a signaled completion at or after it is polled",
     "mlx5 and bnxt_re the same; rxe frees each slot as its work completes, signaled or not (an "
     "all-unsignaled queue never fills there); EFA refuses unsignaled work requests of "
     "ibv_wr_* with EINVAL"},
    {"inline-granted",
     "grants max_inline_data of at least what the gather list takes (max_send_sge x 16 "
     "bytes), as rxe does",
     "mlx5 rounds up to its WQE size (more than asked, by an amount of its own); EFA and "
     "bnxt_re grant exactly what was asked: a program must read cap.max_inline_data back "
     "from ibv_create_qp and keep to it"},
    {"completions-after-destroy", "takes a destroyed QP's completions out of its CQs",
     "mlx5 and bnxt_re remove them too; rxe and EFA leave them, and a later poll returns "
     "them with the destroyed QP's qp_num and wr_ids"},
    {"destroy-with-unacked-events",
     "destroys an object whose events were not all acknowledged at once",
     "every kernel provider (rxe, mlx5, EFA, bnxt_re) goes through rdma-core's "
     "ibv_cmd_destroy_*, which waits until each event got is acknowledged: for ever"},
    {"mtu-above-active", "lowers a path MTU above the port's active MTU to it",
     "rxe takes any path MTU up to 4096 and sends packets that large whatever the link "
     "carries; on mlx5 they exceed the link and the QP ends with IBV_WC_RETRY_EXC_ERR"},
}};

std::array<std::atomic<bool>, kDifferences.size()> said{};

}  // namespace

std::string differences_line(Difference difference) {
    const Row& row = kDifferences[static_cast<size_t>(difference)];
    if (said[static_cast<size_t>(difference)].exchange(true)) {
        return std::string("  NICs differ (") + row.name + "): as said above\n";
    }
    return std::string("  NICs differ (") + row.name + "): uroce " + row.uroce + "; " + row.others +
           ".\n";
}

}  // namespace uroce::check
