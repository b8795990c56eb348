// How check mode says what it found: a report in the sanitizers' shape on
// the program's stderr, with the program's own call stack, and a copy to
// the daemon for its log and `uroce check`.
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <string_view>
#include <vector>

#include "check.h"
#include "check/options.h"
#include "check/symbolize.h"
#include "protocol/client.h"

namespace uroce::check {
namespace {

constexpr int kMaxFrames = 32;
constexpr size_t kFramesShown = 8;

// Where a frame is: the verb's insides (the provider, libibverbs, a
// sanitizer's runtime that intercepts backtrace()), libc (exit() running
// the leak report), or the program.
enum class Place { kVerbs, kLibc, kProgram };

Place place_of(const Dl_info& info) {
    static Dl_info self{};
    static const bool known = dladdr(reinterpret_cast<void*>(&mode_for), &self) != 0;
    if (known && info.dli_fbase == self.dli_fbase) {
        return Place::kVerbs;
    }
    const std::string_view file = info.dli_fname ? info.dli_fname : "";
    for (const char* inside :
         {"libibverbs.so", "liburoce-bridge.so", "libasan.so", "libubsan.so", "libtsan.so"}) {
        if (file.find(inside) != std::string_view::npos) {
            return Place::kVerbs;
        }
    }
    return file.find("/libc.so") != std::string_view::npos ? Place::kLibc : Place::kProgram;
}

struct Frame {
    uintptr_t pc;
    Dl_info info;
    std::optional<SourcePlace> source;  // where the debug information says it is
};

// "#0 0x... in main /src/prog.c:12 (/usr/bin/prog+0x1234)" from the debug
// information, else "#0 0x... in main+0x4d (/usr/bin/prog+0x1234)": the
// module's offset is what `addr2line -e MODULE OFFSET` takes.
std::string frame_line(int number, const Frame& frame) {
    char line[1024];
    const uintptr_t pc = frame.pc;
    const Dl_info& info = frame.info;
    const char* module = info.dli_fname ? info.dli_fname : "?";
    const auto module_offset = pc - reinterpret_cast<uintptr_t>(info.dli_fbase);
    if (frame.source) {
        snprintf(line, sizeof(line), "    #%d 0x%zx in %s %s:%d (%s+0x%zx)\n", number, pc,
                 frame.source->function.c_str(), frame.source->file.c_str(), frame.source->line,
                 module, module_offset);
    } else if (info.dli_sname) {
        snprintf(line, sizeof(line), "    #%d 0x%zx in %s+0x%zx (%s+0x%zx)\n", number, pc,
                 info.dli_sname, pc - reinterpret_cast<uintptr_t>(info.dli_saddr), module,
                 module_offset);
    } else {
        snprintf(line, sizeof(line), "    #%d 0x%zx (%s+0x%zx)\n", number, pc, module,
                 module_offset);
    }
    return line;
}

// The program's frames of the stack: after the verb's last inner frame and
// the libc frames right after it, kFramesShown at most.
std::vector<Frame> call_stack(const Symbolizer& symbolizer) {
    void* frames[kMaxFrames];
    const int count = backtrace(frames, kMaxFrames);
    std::vector<Frame> all;
    size_t first = 0;
    for (int i = 0; i < count; ++i) {
        // A return address points after the call: the call is one byte
        // back (after a call that does not return, the next function starts).
        Frame frame{reinterpret_cast<uintptr_t>(frames[i]) - 1, {}, {}};
        if (!dladdr(reinterpret_cast<void*>(frame.pc), &frame.info)) {
            continue;
        }
        all.push_back(frame);
        if (place_of(frame.info) == Place::kVerbs) {
            first = all.size();
        }
    }
    while (first < all.size() && place_of(all[first].info) == Place::kLibc) {
        ++first;
    }
    std::vector<Frame> stack;
    for (size_t i = first; i < all.size() && stack.size() < kFramesShown; ++i) {
        all[i].source = symbolizer.place(all[i].pc);
        // A verb of libibverbs' header compiled into the program and not
        // inlined (at -O0) is the verb's inside too.
        const bool verb_inside =
            all[i].source && all[i].source->file.ends_with("/infiniband/verbs.h");
        if (!(stack.empty() && verb_inside)) {
            stack.push_back(all[i]);
        }
    }
    return stack;
}

std::string stack_text(const std::vector<Frame>& stack) {
    std::string text;
    for (size_t i = 0; i < stack.size(); ++i) {
        text += frame_line(static_cast<int>(i), stack[i]);
    }
    return text.empty() ? "    (no call stack)\n" : text;
}

// The one frame of the program's call of a posting verb, if it is known.
std::optional<Frame> posted_frame(const void* return_address, const Symbolizer& symbolizer) {
    Frame frame{reinterpret_cast<uintptr_t>(return_address) - 1, {}, {}};
    if (!return_address || !dladdr(reinterpret_cast<void*>(frame.pc), &frame.info)) {
        return std::nullopt;
    }
    frame.source = symbolizer.place(frame.pc);
    return frame;
}

std::string posted_at(const std::optional<Frame>& frame, const void* return_address) {
    if (frame) {
        return frame_line(0, *frame);
    }
    char line[64];
    snprintf(line, sizeof(line), "    #0 0x%zx\n", reinterpret_cast<uintptr_t>(return_address) - 1);
    return line;
}

// Whether a suppression of UROCE_CHECK_OPTIONS names the finding's class
// and a function, source file or module of one of its frames.
bool suppressed(const Finding& finding, const std::vector<Frame>& frames) {
    const std::string_view kind = class_name(finding.rule);
    for (const Suppression& s : options().suppressions) {
        if (s.kind != "*" && s.kind != kind) {
            continue;
        }
        for (const Frame& frame : frames) {
            const char* names[] = {frame.info.dli_sname, frame.info.dli_fname,
                                   frame.source ? frame.source->function.c_str() : nullptr,
                                   frame.source ? frame.source->file.c_str() : nullptr};
            for (const char* name : names) {
                if (name && pattern_matches(s.pattern, name)) {
                    return true;
                }
            }
        }
    }
    return false;
}

// Set while this thread makes a report: what the report does itself
// (libdw maps and unmaps the modules' files) is not the program's.
thread_local bool making_report = false;

// Findings (not notes) reported by this process, for exitcode=.
std::atomic<uint32_t> findings_made{0};

// Where reports go: stderr, or log_path=PATH's PATH.PID.
void write_report(const std::string& text) {
    int fd = STDERR_FILENO;
    if (const std::string& path = options().log_path; !path.empty()) {
        const std::string file = path + "." + std::to_string(getpid());
        fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            fd = STDERR_FILENO;  // a report is never lost
        }
    }
    // One write: reports of two threads do not interleave.
    [[maybe_unused]] const ssize_t n = write(fd, text.data(), text.size());
    if (fd != STDERR_FILENO) {
        close(fd);
    }
}

std::string format(const std::string& device, const Finding& finding,
                   const std::vector<Frame>& stack, const std::optional<Frame>& posted) {
    const Entry& rule = entry(finding.rule);
    const bool note = rule.severity == Severity::kNote;
    const std::string pid = std::to_string(getpid());
    std::string text = "==" + pid + (note ? "==NOTE" : "==ERROR") + ": uroce check: " + rule.name +
                       " on " + device;
    if (finding.qpn) {
        char qpn[32];
        snprintf(qpn, sizeof(qpn), ", QP 0x%06x", finding.qpn);
        text += qpn;
    }
    text += "\n  " + finding.what + "\n";
    text += stack_text(stack);
    if (finding.posted_at) {
        text += "  " + std::string(finding.earlier) + ":\n" + posted_at(posted, finding.posted_at);
    }
    text += "  A NIC: " + finding.nic + "\n";
    if (finding.differs) {
        text += differences_line(*finding.differs);
    }
    text += "  Fix: " + finding.fix + "\n";
    text += "  See: " + anchor(finding.rule) + "\n";
    text += "SUMMARY: uroce check: " + std::string(rule.name) + (note ? " (a note)\n" : "\n");
    return text;
}

}  // namespace

bool called_from(const char* library) {
    void* frames[kMaxFrames];
    const int count = backtrace(frames, kMaxFrames);
    for (int i = 0; i < count; ++i) {
        Dl_info info{};
        if (!dladdr(reinterpret_cast<char*>(frames[i]) - 1, &info)) {
            return false;
        }
        if (place_of(info) != Place::kVerbs) {
            return info.dli_fname && strstr(info.dli_fname, library);
        }
    }
    return false;
}

Mode mode_for(bool daemon_checks) {
    const char* value = getenv("UROCE_CHECK");
    if (!value || !*value) {
        return daemon_checks ? Mode::kReport : Mode::kOff;
    }
    const std::string_view mode = value;
    if (mode == "abort") {
        return Mode::kAbort;
    }
    if (mode == "log") {
        return Mode::kLog;
    }
    if (mode == "off" || mode == "0") {
        return Mode::kOff;
    }
    if (mode != "report" && mode != "1") {
        fprintf(stderr,
                "uroce: UROCE_CHECK=%s is not one of report, log, abort, off: "
                "checking in report mode\n",
                value);
    }
    return Mode::kReport;
}

void deliver(Mode mode, ControlClient& client, const std::string& device, const Finding& finding) {
    making_report = true;
    struct Done {
        ~Done() { making_report = false; }
    } done;
    const Symbolizer symbolizer;
    const std::vector<Frame> stack = call_stack(symbolizer);
    const std::optional<Frame> posted = posted_frame(finding.posted_at, symbolizer);
    std::vector<Frame> frames = stack;
    if (posted) {
        frames.push_back(*posted);
    }
    if (suppressed(finding, frames)) {
        return;
    }
    const bool note = entry(finding.rule).severity == Severity::kNote;
    if (!note) {
        ++findings_made;
    }
    const std::string text = format(device, finding, stack, posted);
    if (mode != Mode::kLog) {
        write_report(text);
    }
    rpc::CheckFindingRequest request{};
    snprintf(request.kind, sizeof(request.kind), "%s", class_name(finding.rule));
    request.qpn = finding.qpn;
    snprintf(request.text, sizeof(request.text), "%s", text.c_str());
    rpc::Empty none;
    client.call(request, &none);  // a daemon gone takes nothing from the program's report
    if (mode == Mode::kAbort && !note) {
        static const char kAborting[] = "uroce check: UROCE_CHECK=abort: aborting\n";
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kAborting, sizeof(kAborting) - 1);
        abort();
    }
}

bool reporting() {
    return making_report;
}

void exit_if_found() {
    if (options().exitcode >= 0 && findings_made > 0) {
        fflush(nullptr);
        _exit(options().exitcode);
    }
}

}  // namespace uroce::check
