// One console page's WebSocket: hello first, then a snapshot every 500 ms
// and the new packets every 100 ms, each sent only when the previous
// message has gone (a slow page misses snapshots and is told how many
// packets it missed, instead of queueing without end); commands in, one
// result out for each.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "util/result.h"

namespace uroce::console {

class Console;

class PageConnection : public std::enable_shared_from_this<PageConnection> {
  public:
    // Results that may wait to be sent; a page that sends commands faster
    // than it reads their results is disconnected.
    static constexpr size_t kMaxQueued = 8;
    // Packet records in one message; the rest go with the next.
    static constexpr size_t kMaxRecordsPerMessage = 1000;
    // A decode command's bounds: packets, and bytes of each (the rest of a
    // packet only counts by its length), within one 64 KiB message.
    static constexpr size_t kMaxDecodedPackets = 100;
    static constexpr size_t kMaxDecodedBytes = 256;
    static constexpr size_t kMaxUdpPayload = 65535 - 8;

    PageConnection(boost::beast::tcp_stream&& stream, std::weak_ptr<Console> console);
    void start(boost::beast::http::request<boost::beast::http::string_body> upgrade);
    // The console's tick: `snapshot` (shared by every page) when one is due.
    void tick(const std::string* snapshot);
    void close();

  private:
    void read();
    void on_message(const std::string& text);
    static Result decode(const Console& console, const nlohmann::json& command,
                         nlohmann::json& result);
    void send(std::string text);
    void write_next();
    void on_closed();

    boost::beast::websocket::stream<boost::beast::tcp_stream> ws_;
    std::weak_ptr<Console> console_;
    boost::beast::flat_buffer in_;
    std::deque<std::string> out_;
    bool writing_ = false;
    bool open_ = false;
    uint64_t last_seq_ = 0;  // of the packet log, sent so far
};

}  // namespace uroce::console
