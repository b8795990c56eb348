// How check mode says what it found: a report in the sanitizers' shape on
// the program's stderr, with the program's own call stack, and a copy to
// the daemon for its log and `uroce check`.
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string_view>

#include "check.h"
#include "protocol/client.h"

namespace uroce::check {
namespace {

constexpr int kMaxFrames = 32;
constexpr int kFramesShown = 8;

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

std::string frame_line(int number, uintptr_t pc, const Dl_info& info) {
    char line[512];
    const char* module = info.dli_fname ? info.dli_fname : "?";
    const auto module_offset = pc - reinterpret_cast<uintptr_t>(info.dli_fbase);
    if (info.dli_sname) {
        snprintf(line, sizeof(line), "    #%d 0x%zx in %s+0x%zx (%s+0x%zx)\n", number, pc,
                 info.dli_sname, pc - reinterpret_cast<uintptr_t>(info.dli_saddr), module,
                 module_offset);
    } else {
        snprintf(line, sizeof(line), "    #%d 0x%zx (%s+0x%zx)\n", number, pc, module,
                 module_offset);
    }
    return line;
}

// "#0 0x... in main+0x4d (/usr/bin/prog+0x1234)": the module's offset is
// what `addr2line -e MODULE OFFSET` takes when the program exports no names.
// The stack starts after the verb's last inner frame and the libc frames
// right after it.
std::string call_stack() {
    void* frames[kMaxFrames];
    const int count = backtrace(frames, kMaxFrames);
    uintptr_t pcs[kMaxFrames];
    Dl_info infos[kMaxFrames];
    bool known[kMaxFrames];
    int first = 0;
    for (int i = 0; i < count; ++i) {
        // A return address points after the call: the call is one byte
        // back (after a call that does not return, the next function starts).
        pcs[i] = reinterpret_cast<uintptr_t>(frames[i]) - 1;
        infos[i] = {};
        known[i] = dladdr(reinterpret_cast<void*>(pcs[i]), &infos[i]) != 0;
        if (known[i] && place_of(infos[i]) == Place::kVerbs) {
            first = i + 1;
        }
    }
    while (first < count && known[first] && place_of(infos[first]) == Place::kLibc) {
        ++first;
    }
    std::string text;
    int shown = 0;
    for (int i = first; i < count && shown < kFramesShown; ++i) {
        if (known[i]) {
            text += frame_line(shown++, pcs[i], infos[i]);
        }
    }
    return text.empty() ? "    (no call stack)\n" : text;
}

// The one frame of the program's call of a posting verb.
std::string posted_at(const void* return_address) {
    const uintptr_t pc = reinterpret_cast<uintptr_t>(return_address) - 1;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(pc), &info)) {
        char line[64];
        snprintf(line, sizeof(line), "    #0 0x%zx\n", pc);
        return line;
    }
    return frame_line(0, pc, info);
}

std::string format(const std::string& device, const Finding& finding) {
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
    text += call_stack();
    if (finding.posted_at) {
        text += "  " + std::string(finding.earlier) + ":\n" + posted_at(finding.posted_at);
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
    const std::string text = format(device, finding);
    if (mode != Mode::kLog) {
        // One write: reports of two threads do not interleave.
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, text.data(), text.size());
    }
    rpc::CheckFindingRequest request{};
    snprintf(request.kind, sizeof(request.kind), "%s", class_name(finding.rule));
    request.qpn = finding.qpn;
    snprintf(request.text, sizeof(request.text), "%s", text.c_str());
    rpc::Empty none;
    client.call(request, &none);  // a daemon gone takes nothing from the program's report
    if (mode == Mode::kAbort && entry(finding.rule).severity == Severity::kFinding) {
        static const char kAborting[] = "uroce check: UROCE_CHECK=abort: aborting\n";
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kAborting, sizeof(kAborting) - 1);
        abort();
    }
}

}  // namespace uroce::check
