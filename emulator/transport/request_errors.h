// The errors a responder finds in a request (IBA 9.7.5.2.4 to 9.7.5.2.6,
// classes B to D), and what each does: on RC and XRC the NAK it sends and
// the event the QP reports as it moves to ERR; on UC the message is dropped
// and the QP stays (class E). Responder::responder_error applies them,
// nothing else.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "wire/headers.h"

namespace uroce::transport {

enum class RequestError : uint8_t { kInvalidRequest, kRemoteAccess, kRemoteOperational };

struct RequestErrorInfo {
    wire::NakCode nak;
    ibv_event_type event;
};

inline constexpr RequestErrorInfo kRequestErrors[] = {
    /* kInvalidRequest */ {wire::NakCode::kInvalidRequest, IBV_EVENT_QP_REQ_ERR},
    /* kRemoteAccess */ {wire::NakCode::kRemoteAccessError, IBV_EVENT_QP_ACCESS_ERR},
    // A receive buffer the responder cannot write: rxe reports it so too.
    /* kRemoteOperational */ {wire::NakCode::kRemoteOperationalError, IBV_EVENT_QP_ACCESS_ERR},
};

constexpr const RequestErrorInfo& info(RequestError error) {
    return kRequestErrors[static_cast<size_t>(error)];
}

}  // namespace uroce::transport
