// Reads a fixed-layout request body, refusing one of the wrong size, and
// writes a fixed-layout reply body.
#pragma once

#include <string.h>

#include <cstddef>
#include <span>
#include <vector>

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

template <class Reply>
std::vector<std::byte> bytes_of(const Reply& reply) {
    const auto bytes = std::as_bytes(std::span(&reply, 1));
    return {bytes.begin(), bytes.end()};
}

}  // namespace uroce
