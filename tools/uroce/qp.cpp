// uroce qp: every QP's state, PSNs, queues and timers, from the daemon's
// snapshot (one kQpSnapshot report, JSON): as a table, as everything about
// one QP, as the JSON itself, or redrawn in place until `q`.
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "uroce.h"

// Last, and without its macros (erase, timeout, ...), which would rewrite C++ names.
#define NCURSES_NOMACROS
#include <curses.h>

namespace uroce::tool {
namespace {

using nlohmann::json;

struct QpOptions {
    rpc::ReportRequest selection{};
    bool json = false;
    bool watch = false;
    double interval_s = 0.5;
};

std::string text_of(const json& value) {
    if (value.is_null()) {
        return "-";
    }
    return value.is_string() ? value.get<std::string>() : value.dump();
}

// "4/2/130": queued, in flight, completed; "srq 5"; "-".
std::string queue_text(const json& queue) {
    if (queue.is_null()) {
        return "-";
    }
    if (queue.contains("srq")) {
        return "srq " + text_of(queue["srq"]);
    }
    return text_of(queue["queued"]) + "/" + text_of(queue["in_flight"]) + "/" +
           text_of(queue["completed"]);
}

std::string duration_text(int64_t us) {
    std::ostringstream out;
    const int64_t magnitude = us < 0 ? -us : us;
    if (magnitude < 10'000) {
        out << magnitude << "us";
    } else if (magnitude < 10'000'000) {
        out << magnitude / 1000 << "ms";
    } else {
        out << magnitude / 1'000'000 << "s";
    }
    return out.str();
}

std::string timer_text(const json& timer) {
    if (timer.is_null()) {
        return "-";
    }
    const std::string what = timer["for"].get<std::string>();
    return what.substr(0, what.find(':')) + " in " + duration_text(timer["in_us"].get<int64_t>());
}

std::string nak_text(const json& nak) {
    std::string text = nak["kind"].get<std::string>() + " " + nak["direction"].get<std::string>();
    if (nak.contains("code")) {
        text += " (" + nak["code"].get<std::string>() + ")";
    }
    return text + " psn " + text_of(nak["psn"]) + ", " +
           duration_text(nak["in_us"].get<int64_t>()) + " ago";
}

std::string last_text(const json& qp) {
    if (!qp["last_error"].is_null()) {
        return qp["last_error"]["what"].get<std::string>();
    }
    return qp["last_nak"].is_null() ? "-" : nak_text(qp["last_nak"]);
}

std::string peer_text(const json& peer) {
    return peer.is_null() ? "-" : peer["address"].get<std::string>() + "/" + text_of(peer["qpn"]);
}

std::string state_text(const json& qp) {
    std::string text = qp["state"].get<std::string>();
    if (!qp["previous_state"].is_null()) {
        text += "<" + qp["previous_state"].get<std::string>();
    }
    return text;
}

std::string unacked_text(const json& qp) {
    if (!qp.contains("unacked")) {
        return "-";
    }
    return text_of(qp["unacked"]["count"]);
}

std::string reads_text(const json& qp) {
    if (!qp.contains("max_rd_atomic")) {
        return "-";
    }
    return text_of(qp["reads_outstanding"]) + "/" + text_of(qp["max_rd_atomic"]);
}

std::string retries_text(const json& qp) {
    if (!qp.contains("retries_left")) {
        return "-";
    }
    return text_of(qp["retries_left"]) + "/" + text_of(qp["rnr_retries_left"]);
}

// One line per QP under a header, columns as wide as their widest cell.
std::vector<std::string> table(const json& snapshot) {
    std::vector<std::vector<std::string>> rows = {
        {"DEVICE", "QPN", "TYPE", "STATE<FROM", "PID", "COMM", "PEER", "MTU", "SQ_PSN", "RQ_PSN",
         "UNACKED", "SQ q/f/c", "RQ q/f/c", "RD/AT", "RETRY/RNR", "TIMER", "LAST NAK OR ERROR"}};
    for (const json& qp : snapshot["qps"]) {
        rows.push_back({qp["device"].get<std::string>(), text_of(qp["qpn"]),
                        qp["type"].get<std::string>(), state_text(qp), text_of(qp["pid"]),
                        text_of(qp["comm"]), peer_text(qp["peer"]), text_of(qp["path_mtu"]),
                        text_of(qp["sq_psn"]), text_of(qp["expected_psn"]), unacked_text(qp),
                        queue_text(qp["send_queue"]), queue_text(qp["receive_queue"]),
                        reads_text(qp), retries_text(qp), timer_text(qp["timer"]), last_text(qp)});
    }
    std::vector<size_t> widths(rows.front().size(), 0);
    for (const auto& row : rows) {
        for (size_t i = 0; i < row.size(); ++i) {
            widths[i] = std::max(widths[i], row[i].size());
        }
    }
    std::vector<std::string> lines;
    for (const auto& row : rows) {
        std::ostringstream line;
        for (size_t i = 0; i < row.size(); ++i) {
            line << row[i];
            if (i + 1 < row.size()) {
                line << std::string(widths[i] - row[i].size() + 2, ' ');
            }
        }
        lines.push_back(line.str());
    }
    return lines;
}

// Everything about one QP, a fact per line, then its transitions.
std::vector<std::string> details(const json& qp) {
    std::vector<std::string> lines;
    auto add = [&lines](const std::string& name, const std::string& value) {
        std::ostringstream line;
        line << std::left << std::setw(22) << (name + ":") << value;
        lines.push_back(line.str());
    };
    add("device", qp["device"].get<std::string>());
    add("qpn", text_of(qp["qpn"]));
    add("type", qp["type"].get<std::string>());
    add("state", state_text(qp));
    add("process", text_of(qp["pid"]) + " (" + text_of(qp["comm"]) + ")");
    add("port", text_of(qp["port"]));
    add("peer", peer_text(qp["peer"]));
    add("path mtu", text_of(qp["path_mtu"]));
    add("sq psn (next)", text_of(qp["sq_psn"]));
    add("rq psn (expected)", text_of(qp["expected_psn"]));
    if (qp.contains("unacked")) {
        add("unacknowledged", text_of(qp["unacked"]["count"]) + " PSNs from " +
                                  text_of(qp["unacked"]["first"]) + " to before " +
                                  text_of(qp["unacked"]["end"]));
        add("reads/atomics out",
            text_of(qp["reads_outstanding"]) + " of max_rd_atomic " + text_of(qp["max_rd_atomic"]));
        add("retries left", text_of(qp["retries_left"]) + " of retry_cnt " +
                                text_of(qp["retry_cnt"]) + ", timeout " + text_of(qp["timeout"]));
        add("rnr retries left",
            text_of(qp["rnr_retries_left"]) + " of rnr_retry " + text_of(qp["rnr_retry"]));
    }
    if (qp.contains("max_dest_rd_atomic")) {
        add("responder resources", text_of(qp["responder_resources"]) + " of max_dest_rd_atomic " +
                                       text_of(qp["max_dest_rd_atomic"]) + ", min_rnr_timer " +
                                       text_of(qp["min_rnr_timer"]));
    }
    add("send queue", queue_text(qp["send_queue"]) + " queued/in flight/completed of " +
                          (qp["send_queue"].is_null() ? "-" : text_of(qp["send_queue"]["size"])));
    add("receive queue", qp["receive_queue"].is_null() || qp["receive_queue"].contains("srq")
                             ? queue_text(qp["receive_queue"])
                             : queue_text(qp["receive_queue"]) + " queued/in flight/completed of " +
                                   text_of(qp["receive_queue"]["size"]));
    add("next timer", qp["timer"].is_null()
                          ? "-"
                          : qp["timer"]["for"].get<std::string>() + ", in " +
                                duration_text(qp["timer"]["in_us"].get<int64_t>()));
    add("last NAK", qp["last_nak"].is_null() ? "-" : nak_text(qp["last_nak"]));
    add("last error", qp["last_error"].is_null()
                          ? "-"
                          : qp["last_error"]["what"].get<std::string>() + ", " +
                                duration_text(qp["last_error"]["in_us"].get<int64_t>()) + " ago");
    lines.push_back("transitions (" + text_of(qp["transition_count"]) + ", newest last):");
    for (const json& t : qp["transitions"]) {
        lines.push_back("  " + duration_text(t["in_us"].get<int64_t>()) + " ago  " +
                        t["from"].get<std::string>() + " -> " + t["to"].get<std::string>() + "  " +
                        t["cause"].get<std::string>() +
                        (t["attr_mask"].get<int>() ? "  " + t["attrs"].get<std::string>() : ""));
    }
    return lines;
}

std::vector<std::string> render(const json& snapshot, const QpOptions& options) {
    if (options.selection.has_qpn) {
        std::vector<std::string> lines;
        for (const json& qp : snapshot["qps"]) {
            if (!lines.empty()) {
                lines.push_back("");
            }
            for (std::string& line : details(qp)) {
                lines.push_back(std::move(line));
            }
        }
        return lines;
    }
    return table(snapshot);
}

// The snapshot, or nullopt after saying why not.
std::optional<json> fetch(ControlClient& client, const QpOptions& options) {
    std::string text;
    if (client.call_report(rpc::Op::kQpSnapshot, options.selection, text) != 0) {
        refused(client);
        return std::nullopt;
    }
    json snapshot = json::parse(text, nullptr, false);
    if (snapshot.is_discarded() || !snapshot.contains("qps")) {
        std::cerr << "uroce: uroced sent a QP snapshot that is not JSON\n";
        return std::nullopt;
    }
    return snapshot;
}

// Redraws the view every interval until `q` (or the daemon goes).
int watch(ControlClient& client, const QpOptions& options) {
    if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
        std::cerr << "uroce: qp --watch needs a terminal\n";
        return kExitFailure;
    }
    initscr();
    cbreak();
    noecho();
    curs_set(0);
    wtimeout(stdscr, static_cast<int>(options.interval_s * 1000));
    int status = 0;
    for (;;) {
        const std::optional<json> snapshot = fetch(client, options);
        if (!snapshot) {
            status = kExitFailure;
            break;
        }
        werase(stdscr);
        const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        std::ostringstream title;
        title << "uroce qp: " << (*snapshot)["qps"].size() << " QPs at "
              << std::put_time(std::localtime(&now), "%T") << "  (q quits)";
        mvwaddnstr(stdscr, 0, 0, title.str().c_str(), COLS);
        int row = 2;
        for (const std::string& line : render(*snapshot, options)) {
            if (row >= LINES) {
                break;
            }
            mvwaddnstr(stdscr, row++, 0, line.c_str(), COLS);
        }
        wrefresh(stdscr);
        const int key = wgetch(stdscr);
        if (key == 'q' || key == 'Q') {
            break;
        }
    }
    endwin();
    return status;
}

}  // namespace

int qp(const RuntimePaths& paths, const Args& args) {
    QpOptions options;
    std::vector<std::string> positional;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--json") {
            options.json = true;
        } else if (args[i] == "--watch") {
            options.watch = true;
        } else if (args[i] == "--interval") {
            char* end = nullptr;
            options.interval_s = i + 1 < args.size() ? strtod(args[++i].c_str(), &end) : 0;
            if (!end || *end != '\0' || options.interval_s < 0.1 || options.interval_s > 60) {
                return usage_error("qp: --interval takes seconds from 0.1 to 60");
            }
        } else if (args[i].starts_with("-")) {
            return usage_error("qp: unknown option " + args[i]);
        } else {
            positional.push_back(args[i]);
        }
    }
    if (positional.size() > 2) {
        return usage_error("qp takes a device and a QP number at most");
    }
    if (options.json && options.watch) {
        return usage_error("qp: --json and --watch do not go together");
    }
    if (!positional.empty() && !set_device_name(options.selection.device, positional[0])) {
        return kExitFailure;
    }
    if (positional.size() == 2) {
        char* end = nullptr;
        errno = 0;
        const unsigned long qpn = strtoul(positional[1].c_str(), &end, 0);
        if (positional[1].empty() || *end != '\0' || errno == ERANGE || qpn > 0xffffff) {
            return usage_error("qp: '" + positional[1] + "' is not a QP number (0x11 or 17)");
        }
        options.selection.qpn = static_cast<uint32_t>(qpn);
        options.selection.has_qpn = 1;
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    if (options.watch) {
        return watch(*client, options);
    }
    const std::optional<json> snapshot = fetch(*client, options);
    if (!snapshot) {
        return kExitFailure;
    }
    if (options.json) {
        std::cout << snapshot->dump(2) << "\n";
        return 0;
    }
    for (const std::string& line : render(*snapshot, options)) {
        std::cout << line << "\n";
    }
    return 0;
}

}  // namespace uroce::tool
