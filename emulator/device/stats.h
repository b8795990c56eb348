// Per-device counters. Where the kernel's Soft-RoCE has a counter for the
// same event it has the same name, so that tools and habits carry over.
#pragma once

#include <stdint.h>

namespace uroce {

#define UROCE_DEVICE_COUNTERS(X)                                                        \
    X(sent_pkts, "packets sent")                                                        \
    X(send_err, "packets the kernel would not send (above the MTU, no route): lost")    \
    X(rcvd_pkts, "packets received")                                                    \
    X(duplicate_request, "requests received again (answered, not executed again)")      \
    X(out_of_seq_request, "requests past the expected PSN (NAKed)")                     \
    X(rcvd_rnr_err, "RNR NAKs received")                                                \
    X(send_rnr_err, "RNR NAKs sent (no receive WQE)")                                   \
    X(rcvd_seq_err, "PSN sequence NAKs and out-of-order responses received")            \
    X(retry_exceeded_err, "QPs failed after retry_cnt retransmissions")                 \
    X(retry_rnr_exceeded_err, "QPs failed after rnr_retry RNR retries")                 \
    X(completer_retry_err, "error NAKs received (access, invalid request, operation)")  \
    X(rdma_sends, "messages sent")                                                      \
    X(rdma_recvs, "messages received")                                                  \
    X(completions, "send WQEs retired")                                                 \
    X(retransmit_timeouts, "retransmission timer expiries")                             \
    X(duplicate_response, "stale responses ignored")                                    \
    X(rcvd_unsent_psn, "responses for PSNs not yet sent (ignored)")                     \
    X(rcvd_dropped, "packets for a QP in a state that takes none")                      \
    X(rcvd_qkey_err, "UD packets whose Q_Key is not the QP's (dropped)")                \
    X(rcvd_pkey_err, "packets whose P_Key is not the default partition's (dropped)")    \
    X(rcvd_xrc_srq_err, "XRC requests naming no XRC SRQ of the QP's domain (NAKed)")    \
    X(rcvd_length_err, "requests whose payload the path MTU refuses (NAKed, UC: lost)") \
    X(completions_lost, "completions a full CQ had no room for (their QPs go to ERR)")  \
    X(rcvd_msg_dropped, "UC/UD messages lost: a PSN gap, no receive WQE, an error")     \
    X(ud_oversize, "UD sends longer than the MTU (completed, not sent)")                \
    X(rcvd_backlog_full, "requests dropped: too many waiting behind a READ response")   \
    X(rcvd_unknown_qp, "packets for no QP of the device (dropped)")                     \
    X(rcvd_icrc_err, "packets with a bad ICRC (dropped)")                               \
    X(rcvd_malformed, "packets that do not parse (dropped)")                            \
    X(rcvd_foreign, "packets to a loopback device from outside its daemon (dropped)")   \
    X(raw_sent_frames, "Ethernet frames sent by RAW_PACKET QPs")                        \
    X(raw_rcvd_frames, "Ethernet frames received into RAW_PACKET QPs and WQs")          \
    X(raw_unmatched, "Ethernet frames matching no flow rule (dropped)")                 \
    X(raw_steered_drop, "Ethernet frames dropped by a flow rule's drop action")         \
    X(raw_no_receive, "Ethernet frames for a QP or WQ with no receive WQE (dropped)")   \
    X(fault_dropped, "outgoing packets dropped by fault injection")                     \
    X(fault_duplicated, "outgoing packets duplicated by fault injection")               \
    X(cm_mads_sent, "connection manager MADs sent (retries included)")                  \
    X(cm_mads_rcvd, "connection manager MADs received")                                 \
    X(cm_mads_retried, "connection manager MADs sent again for want of an answer")      \
    X(cm_mads_dropped, "connection manager MADs malformed, stale or for no connection")

struct DeviceStats {
#define UROCE_COUNTER_FIELD(name, text) uint64_t name = 0;
    UROCE_DEVICE_COUNTERS(UROCE_COUNTER_FIELD)
#undef UROCE_COUNTER_FIELD
};

}  // namespace uroce
