// The web console the tool starts (console/console.h), one at a time: what
// its pages see (devices, QPs, step gates, packet records) and the
// commands they send (step, fault), which go to the wire controls as the
// tool's do. The console belongs to the session that started it and stops
// when that session ends.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "console/console.h"
#include "net/packet_log.h"
#include "protocol/messages.h"
#include "util/result.h"

namespace uroce {

class Server;
class Session;
class WireControls;

class ConsoleHost {
  public:
    ConsoleHost(boost::asio::io_context& io, const Server& server, WireControls& wire,
                PacketLog& packet_log)
        : io_(io), server_(server), wire_(wire), packet_log_(packet_log) {}
    ~ConsoleHost() { stop("the daemon stops"); }

    Result start(const Session& session, const rpc::ConsoleStartRequest& request,
                 rpc::ConsoleStartReply& reply);
    void stop(const char* why);
    // The session ended: the console stops if it was the session's.
    void session_ended(const Session& session);
    // uroce status's line, if a console runs.
    std::string status_line() const;

  private:
    console::Source source();
    nlohmann::json snapshot() const;
    nlohmann::json record(const PacketLog::Record& record) const;
    Result command(pid_t caller, const nlohmann::json& command);

    boost::asio::io_context& io_;
    const Server& server_;
    WireControls& wire_;
    PacketLog& packet_log_;
    std::shared_ptr<console::Console> console_;
    const Session* owner_ = nullptr;  // compared, never followed
    pid_t owner_pid_ = 0;
};

}  // namespace uroce
