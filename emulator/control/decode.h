// Reads a fixed-layout request body, refusing one of the wrong size.
#pragma once

#include <string.h>

#include <cstddef>
#include <span>

#include "util/result.h"

namespace uroce {

template <class Request>
Result decode(std::span<const std::byte> body, Request& request) {
    if (body.size() != sizeof(Request)) {
        return fail(EINVAL, "malformed request: body is %zu bytes, this op takes %zu", body.size(),
                    sizeof(Request));
    }
    memcpy(&request, body.data(), sizeof(Request));
    return ok();
}

}  // namespace uroce
