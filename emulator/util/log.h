// The daemon's log: one line per event on stderr, which `uroce start`
// sends to uroced.log in the runtime directory.
#pragma once

namespace uroce {

__attribute__((format(printf, 1, 2))) void log_info(const char* format, ...);
__attribute__((format(printf, 1, 2))) void log_warn(const char* format, ...);

}  // namespace uroce
