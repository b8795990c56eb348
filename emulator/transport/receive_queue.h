// Receive WQEs as the responder takes them: from the QP's own receive queue
// or from its SRQ, where taking one may fire the SRQ's limit event.
#pragma once

#include "verbs/objects.h"

namespace uroce::transport {

// Whether a receive WQE waits for the QP.
bool has_receive(Qp& qp);

// Takes the QP's next receive WQE (a UC QP's unused one first); false when
// none is posted.
bool take_receive(Qp& qp, TakenReceive& out);

}  // namespace uroce::transport
