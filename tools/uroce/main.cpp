// uroce: the user's handle on the emulated devices.
//
//   uroce start [UROCED OPTIONS]
//   uroce stop | status | env
//   uroce exec [--check] -- COMMAND [ARGS...]
//   uroce stats [DEVICE]
//   uroce fault DEVICE [--drop P] [--duplicate P] [--reorder P] [--delay US] [--seed N]
//   uroce fault DEVICE --replay FILE | --clear
//   uroce trace DEVICE [--pcap FILE] [--faults FILE] [--seconds N] [--count N]
//   uroce qp [DEVICE [QPN]] [--json | --watch [--interval S]]
//   uroce step DEVICE [pause | next [ID] | drop [ID] | duplicate [ID] | run]
//   uroce console [--read-only] [--port N]
//   uroce check [--json]
//   uroce coverage [--json] [--reset] [--case ID]
//   uroce log [--case ID]
#include <iostream>

#include "uroce.h"

namespace uroce::tool {

const char* const kUsage =
    "usage: uroce start [--device NAME=ADDRESS|IFACE]... [--config FILE] [--udp-port N]\n"
    "                   [--no-shortcut] [--nice N] [--threads N] [--check]\n"
    "                   [--gid-layout uroce|rxe|mlx5]\n"
    "       uroce stop\n"
    "       uroce status\n"
    "       uroce env\n"
    "       uroce exec [--check] -- COMMAND [ARGS...]\n"
    "       uroce reset [DEVICE]\n"
    "       uroce stats [DEVICE]\n"
    "       uroce fault DEVICE [--drop P] [--duplicate P] [--reorder P] [--delay US]\n"
    "                   [--seed N]\n"
    "       uroce fault DEVICE --replay FILE\n"
    "       uroce fault DEVICE --clear\n"
    "       uroce trace DEVICE [--pcap FILE] [--faults FILE] [--seconds N] [--count N]\n"
    "       uroce qp [DEVICE [QPN]] [--json | --watch [--interval S]]\n"
    "       uroce step DEVICE [pause | next [ID] | drop [ID] | duplicate [ID] | run]\n"
    "       uroce console [--read-only] [--port N]\n"
    "       uroce check [--json]\n"
    "       uroce coverage [--json] [--reset] [--case ID]\n"
    "       uroce log [--case ID]\n"
    "\n"
    "start: runs uroced in the background with these options (see uroced --help).\n"
    "reset: destroys every client's objects on DEVICE (every device): each\n"
    "  context hears IBV_EVENT_DEVICE_FATAL and its verbs fail with EIO; clears\n"
    "  faults, step mode, counters and check findings. For harnesses that run\n"
    "  many programs against one daemon.\n"
    "stats: the devices' packet and error counters.\n"
    "fault: faults on DEVICE's outgoing packets. P is a probability (0.05) or a\n"
    "  percentage (5%), US a delay in microseconds; options not given become 0.\n"
    "  --seed N: each packet's fate follows from N and the packet, the same in\n"
    "  every run of the same program (after uroce reset). --replay FILE: the\n"
    "  fates a trace's --faults FILE recorded, for the packets it names.\n"
    "trace: records DEVICE's packets (pcap) and its fault decisions (JSON lines)\n"
    "  until Ctrl-C, N seconds or N packets.\n"
    "qp: every QP's state, PSNs, queues, timers and last NAK; with a QPN,\n"
    "  everything about that QP and the transitions it took. --json prints the\n"
    "  daemon's snapshot; --watch redraws it every S seconds (0.5) until q.\n"
    "step: pause holds DEVICE's outgoing packets; next releases one, drop loses\n"
    "  one, duplicate sends a copy of one (the oldest, or packet ID); run lets\n"
    "  them all go. Without an action: the packets held.\n"
    "exec --check: COMMAND checks its use of the verbs (UROCE_CHECK=report) and\n"
    "  reports its bugs on stderr; start --check does so for every program.\n"
    "check: the findings of check mode the daemon kept.\n"
    "coverage: the device behaviours the daemon exercised (QP transitions,\n"
    "  opcodes, responder outcomes, completions, events, CM, refusals) and how\n"
    "  often; --reset clears them; --case ID: only what it did for the programs\n"
    "  run with UROCE_CASE=ID. uroce exec adds a command's to an AFL++ map\n"
    "  (__AFL_SHM_ID).\n"
    "log: the daemon's log; --case ID: only the lines a program run with\n"
    "  UROCE_CASE=ID caused.\n"
    "console: a web console on 127.0.0.1 (devices, QPs, a ladder of the packets,\n"
    "  faults, step mode) until Ctrl-C; prints its address with its token.\n"
    "\n"
    "The runtime directory is $UROCE_RUNTIME_DIR, or a per-user default.\n";

namespace {

int run(const std::string& command, Args rest) {
    const RuntimePaths paths{default_runtime_dir()};
    if (command == "start") {
        return start(paths, rest);
    }
    if (command == "exec") {
        bool checking = false;
        if (!rest.empty() && rest.front() == "--check") {
            checking = true;
            rest.erase(rest.begin());
        }
        if (!rest.empty() && rest.front() == "--") {
            rest.erase(rest.begin());
        }
        return exec(paths, rest, checking);
    }
    if (command == "check") {
        return check(paths, rest);
    }
    if (command == "reset") {
        return reset(paths, rest);
    }
    if (command == "coverage") {
        return coverage(paths, rest);
    }
    if (command == "log") {
        return show_log(paths, rest);
    }
    if (command == "stats") {
        return stats(paths, rest);
    }
    if (command == "fault") {
        return fault(paths, rest);
    }
    if (command == "trace") {
        return trace(paths, rest);
    }
    if (command == "qp") {
        return qp(paths, rest);
    }
    if (command == "step") {
        return step(paths, rest);
    }
    if (command == "console") {
        return console(paths, rest);
    }
    if (command == "--help" || command == "-h" || command == "help") {
        std::cout << kUsage;
        return 0;
    }
    if (command == "stop" || command == "status" || command == "env") {
        if (!rest.empty()) {
            return usage_error(command + " takes no arguments");
        }
        return command == "stop"     ? stop(paths)
               : command == "status" ? status(paths)
                                     : print_env(paths);
    }
    return usage_error("unknown command '" + command + "'");
}

}  // namespace
}  // namespace uroce::tool

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << uroce::tool::kUsage;
        return uroce::tool::kExitUsage;
    }
    return uroce::tool::run(argv[1], uroce::tool::Args(argv + 2, argv + argc));
}
