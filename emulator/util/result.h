// The outcome of a verb: 0, or an errno with a sentence saying what was wrong.
#pragma once

#include <stdarg.h>
#include <stdio.h>

#include <string>

namespace uroce {

struct [[nodiscard]] Result {
    int error = 0;
    std::string message;
    explicit operator bool() const { return error == 0; }
};

inline Result ok() {
    return {};
}

__attribute__((format(printf, 2, 3))) inline Result fail(int error, const char* format, ...) {
    char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    return {error, text};
}

}  // namespace uroce
