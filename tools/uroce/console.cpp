// uroce console: starts the daemon's web console and keeps it open until
// Ctrl-C (the console belongs to this command's connection), printing the
// address with its access token.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>

#include <iostream>

#include "uroce.h"

namespace uroce::tool {

int console(const RuntimePaths& paths, const Args& args) {
    rpc::ConsoleStartRequest request{};
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--read-only") {
            request.read_only = 1;
        } else if (args[i] == "--port" && i + 1 < args.size()) {
            char* end = nullptr;
            errno = 0;
            const unsigned long port = strtoul(args[++i].c_str(), &end, 10);
            if (args[i].empty() || *end != '\0' || errno == ERANGE || port == 0 || port > 65535) {
                return usage_error("console: --port takes a TCP port, 1 to 65535");
            }
            request.port = static_cast<uint32_t>(port);
        } else {
            return usage_error("console: unknown option " + args[i]);
        }
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop_signals, nullptr);

    rpc::ConsoleStartReply reply{};
    if (client->call(request, &reply)) {
        return refused(*client);
    }
    reply.token[sizeof(reply.token) - 1] = '\0';
    std::cout << "uroce console: http://127.0.0.1:" << reply.port << "/?token=" << reply.token
              << (request.read_only ? " (read-only)" : "") << "\n(Ctrl-C stops the console)"
              << std::endl;
    // Until a stop signal, or the daemon closing the connection.
    for (;;) {
        const timespec second{1, 0};
        if (sigtimedwait(&stop_signals, nullptr, &second) >= 0) {
            return 0;
        }
        pollfd daemon{client->fd(), POLLIN | POLLRDHUP, 0};
        if (poll(&daemon, 1, 0) > 0) {
            std::cerr << "uroce: uroced closed the console\n";
            return kExitFailure;
        }
    }
}

}  // namespace uroce::tool
