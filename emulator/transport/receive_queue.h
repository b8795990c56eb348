// What a request is served from: receive WQEs (from the QP's own receive
// queue, its SRQ, or for XRC the SRQ the request names), where their
// completions go, and the PD that its memory keys must belong to. Taking a
// WQE from an SRQ may fire the SRQ's limit event.
#pragma once

#include "device/device.h"
#include "objects/objects.h"

namespace uroce::transport {

// XRC_TGT: selects the XRC SRQ numbered `srq_num` for the request being
// executed; false when the device has none or it is in another XRC domain.
bool select_xrc_srq(Device& device, Qp& qp, uint32_t srq_num);

// Whether a receive WQE waits for the QP.
bool has_receive(Qp& qp);

// Takes the QP's next receive WQE (a UC QP's unused one first); false when
// none is posted.
bool take_receive(Qp& qp, TakenReceive& out);
// Takes the next receive WQE of a ring (a QP's, an SRQ's or a WQ's).
bool pop_receive(Ring& ring, TakenReceive& out);

// A WQ in ERR completes every receive WQE posted to it with WR_FLUSH_ERR.
// Returns whether there was any.
bool flush_wq(Wq& wq);

// Where the QP's receive completions go; null when nowhere (an XRC SRQ that
// has been destroyed).
Cq* receive_cq(const Qp& qp);

// The PD the requests the QP executes reach memory through: for an XRC_TGT
// QP, which has none, that of the XRC SRQ the request named.
const Pd* request_pd(const Qp& qp);

}  // namespace uroce::transport
