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

// While one lives, the lines this thread logs end with " [case ID]": the
// case (UROCE_CASE, docs/fuzzing.md) of the program they are about. An
// empty or null id tags nothing; scopes nest.
class LogCase {
  public:
    explicit LogCase(const char* id);
    ~LogCase();
    LogCase(const LogCase&) = delete;
    LogCase& operator=(const LogCase&) = delete;

  private:
    const char* outer_;
};

}  // namespace uroce
