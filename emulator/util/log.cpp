#include "util/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

namespace uroce {
namespace {

uint64_t max_log_bytes = 8 << 20;
thread_local const char* current_case = nullptr;

// Every descriptor that writes the file `old` names (stdout too, under
// `uroce start`) writes `fresh` from now on.
void move_writers(const struct stat& old, int fresh) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) {
        dup2(fresh, STDERR_FILENO);
        return;
    }
    std::vector<int> writers;
    while (const dirent* entry = readdir(dir)) {
        const int fd = atoi(entry->d_name);
        struct stat st;
        const int flags = fcntl(fd, F_GETFL);
        if (entry->d_name[0] != '.' && fd != dirfd(dir) && fd != fresh && flags >= 0 &&
            (flags & O_ACCMODE) != O_RDONLY && fstat(fd, &st) == 0 && st.st_dev == old.st_dev &&
            st.st_ino == old.st_ino) {
            writers.push_back(fd);
        }
    }
    closedir(dir);
    for (int fd : writers) {
        dup2(fresh, fd);
    }
}

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
    // Both names exist throughout, for whoever reads the logs meanwhile:
    // the full file takes the name .1 by a second link renamed over the old
    // .1, then a new file takes the log's name by a rename, each atomic.
    const std::string name(path), rotated = name + ".1", fresh_name = name + ".new";
    const std::string rotated_link = rotated + ".new";
    unlink(rotated_link.c_str());
    unlink(fresh_name.c_str());
    if (link(name.c_str(), rotated_link.c_str()) != 0 ||
        rename(rotated_link.c_str(), rotated.c_str()) != 0) {
        unlink(rotated_link.c_str());
        return;
    }
    const int fd =
        open(fresh_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        return;
    }
    if (rename(fresh_name.c_str(), name.c_str()) == 0) {
        move_writers(st, fd);
    } else {
        unlink(fresh_name.c_str());
    }
    close(fd);
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
    // Engine threads log too: one line, and one rotation, at a time.
    static std::mutex writing;
    std::lock_guard lock(writing);
    rotate_if_full();
    if (current_case && *current_case) {
        fprintf(stderr, "%s.%03ld %s %s [case %s]\n", stamp, now.tv_nsec / 1000000, level, text,
                current_case);
    } else {
        fprintf(stderr, "%s.%03ld %s %s\n", stamp, now.tv_nsec / 1000000, level, text);
    }
    fflush(stderr);
}

}  // namespace

LogCase::LogCase(const char* id) : outer_(current_case) {
    current_case = id;
}

LogCase::~LogCase() {
    current_case = outer_;
}

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
