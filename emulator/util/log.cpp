#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

namespace uroce {
namespace {

void log_line(const char* level, const char* format, va_list args) {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    tm local;
    localtime_r(&now.tv_sec, &local);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
    char text[512];
    vsnprintf(text, sizeof(text), format, args);
    fprintf(stderr, "%s.%03ld %s %s\n", stamp, now.tv_nsec / 1000000, level, text);
    fflush(stderr);
}

}  // namespace

void log_info(const char* format, ...) {
    va_list args;
    va_start(args, format);
    log_line("info", format, args);
    va_end(args);
}

void log_warn(const char* format, ...) {
    va_list args;
    va_start(args, format);
    log_line("warn", format, args);
    va_end(args);
}

}  // namespace uroce
