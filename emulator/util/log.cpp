#include "util/log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <string>

namespace uroce {
namespace {

uint64_t max_log_bytes = 8 << 20;

// Where stderr is a regular file (`uroce start` sends it to uroced.log),
// starts a new file once it is full.
void rotate_if_full() {
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) < max_log_bytes) {
        return;
    }
    char path[4096];
    const ssize_t n = readlink("/proc/self/fd/2", path, sizeof(path) - 1);
    if (n <= 0) {
        return;
    }
    path[n] = '\0';
    const std::string name(path);
    if (rename(name.c_str(), (name + ".1").c_str()) != 0) {
        return;
    }
    const int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
}

void log_line(const char* level, const char* format, va_list args) {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    tm local;
    localtime_r(&now.tv_sec, &local);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
    char text[512];
    vsnprintf(text, sizeof(text), format, args);
    rotate_if_full();
    fprintf(stderr, "%s.%03ld %s %s\n", stamp, now.tv_nsec / 1000000, level, text);
    fflush(stderr);
}

}  // namespace

void set_log_limit(uint64_t max_bytes) {
    max_log_bytes = max_bytes;
}

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
