// The web console (docs/console.md): HTTP and WebSocket on 127.0.0.1, served
// on the daemon's own io_context (the engine thread), so it reads devices,
// QPs and the packet log without locks. Every request carries the console's
// random token (query or cookie); a WebSocket's Origin must be the console's
// own address. Each page gets a snapshot every 500 ms and the new packets
// every 100 ms, and sends step and fault commands (refused when read-only).
#pragma once

#include <stdint.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "net/packet_log.h"
#include "util/result.h"

namespace uroce::console {

class PageConnection;
class HttpConnection;

// What the console shows and does, provided by the control server.
struct Source {
    // {"devices": [...], "qps": [...]} as docs/console.md describes them.
    std::function<nlohmann::json()> snapshot;
    // A packet record's JSON (device names, addresses, decoded packet).
    std::function<nlohmann::json(const PacketLog::Record&)> record;
    // Runs a step or fault command; the result says why it was refused.
    std::function<Result(const nlohmann::json& command)> command;
    // A captured packet decoded as `record` decodes the daemon's: its first
    // bytes (the headers among them) and its whole length. For the pcap
    // files a page replays: RoCE is decoded by the daemon alone.
    std::function<nlohmann::json(std::span<const uint8_t> shown, size_t total)> decode;
};

class Console : public std::enable_shared_from_this<Console> {
  public:
    static constexpr size_t kMaxPages = 16;  // WebSocket connections at once
    static constexpr size_t kMaxHttpConnections = 64;

    // Listens on 127.0.0.1:port (0: a free one) and enables the packet log.
    static Result start(boost::asio::io_context& io, uint16_t port, bool read_only, PacketLog& log,
                        Source source, std::shared_ptr<Console>& out);
    ~Console();  // closes every connection and disables the packet log
    Console(const Console&) = delete;
    Console& operator=(const Console&) = delete;

    uint16_t port() const { return port_; }
    const std::string& token() const { return token_; }
    bool read_only() const { return read_only_; }

    // For the connections.
    bool authorized(std::string_view target, std::string_view cookie) const;
    bool origin_allowed(std::string_view origin) const;
    bool host_allowed(std::string_view host) const;
    void add_page(const std::shared_ptr<PageConnection>& page);
    void remove_page(PageConnection* page);
    void http_opened() { ++http_connections_; }
    void http_closed() { --http_connections_; }
    // Stops listening and closes every connection (the destructor does too).
    void stop();
    // The first message to a page: QP states and transitions, counters,
    // and the wire's facts (wire_facts).
    nlohmann::json hello() const;
    static nlohmann::json wire_facts();
    const Source& source() const { return source_; }
    PacketLog& log() { return log_; }
    std::chrono::steady_clock::time_point started() const { return started_; }

    Console(boost::asio::io_context& io, bool read_only, PacketLog& log, Source source);

  private:
    void accept();
    void tick();

    boost::asio::io_context& io_;
    boost::asio::ip::tcp::acceptor acceptor_;
    boost::asio::steady_timer timer_;
    bool read_only_;
    PacketLog& log_;
    Source source_;
    std::string token_;
    uint16_t port_ = 0;
    size_t http_connections_ = 0;
    unsigned ticks_ = 0;
    std::set<std::shared_ptr<PageConnection>> pages_;
    std::vector<std::weak_ptr<HttpConnection>> http_;  // to close when the console stops
    std::chrono::steady_clock::time_point started_;
};

}  // namespace uroce::console
