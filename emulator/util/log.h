// The daemon's log: one line per event on stderr, which `uroce start`
// sends to uroced.log in the runtime directory.
#pragma once

#include <stdint.h>

namespace uroce {

// Where stderr is a regular file, a log that reaches max_bytes is renamed to
// <name>.1 (replacing the one before) and a new one begun, so the log never
// holds more than about twice this. Default 8 MiB.
void set_log_limit(uint64_t max_bytes);

__attribute__((format(printf, 1, 2))) void log_info(const char* format, ...);
__attribute__((format(printf, 1, 2))) void log_warn(const char* format, ...);

}  // namespace uroce
