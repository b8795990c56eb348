// Completions and events as the application receives them.
#pragma once

#include <infiniband/verbs.h>

#include <optional>
#include <span>

#include "keys/regions.h"

#include "objects/objects.h"

namespace uroce::transport {

// A received message's bytes and where they go, carried in its completion.
struct CarriedData {
    uint64_t addr;
    std::span<const std::byte> bytes;
};

// `bytes`, bound for the start of `target`, as the completion on `cq` can
// carry them (queues::Cqe): when they are few and go, in one piece, into
// the process that polls the CQ. Otherwise the caller writes them itself.
std::optional<CarriedData> carried_data(const Cq& cq, const Extent& target,
                                        std::span<const std::byte> bytes);

// Puts `wc` (and `data`, if any) on the CQ and, when the CQ is armed for
// it, signals its completion channel (solicited-only arming lets through
// solicited and error completions). A full CQ has no room for it: false,
// the completion counted as lost (completions_lost), and at the first such
// loss IBV_EVENT_CQ_ERR and a log line.
bool post_completion(Cq& cq, const ibv_wc& wc, bool solicited,
                     const std::optional<CarriedData>& data = std::nullopt);

// post_completion of a completion of `qp`: one its CQ has no room for moves
// the QP to ERR with IBV_EVENT_QP_FATAL, as rxe (RESPST_ERR_CQ_OVERFLOW) and
// mlx5 do, so that its owner hears of every completion lost.
bool complete_for(Qp& qp, Cq& cq, const ibv_wc& wc, bool solicited,
                  const std::optional<CarriedData>& data = std::nullopt);

// Writes the armed CQ's completion event (once per arming), ending any
// moderation period.
void signal_cq_event(Cq& cq);

// A receive WQE that completes with no data to report (a flush, an error).
void complete_receive_without_data(Cq& cq, uint64_t wr_id, uint32_t qp_num, ibv_wc_status status);

// Completes a send WQE with `status` (successes only when signaled).
void complete_send(Qp& qp, const SendWork& w, ibv_wc_status status);

}  // namespace uroce::transport
