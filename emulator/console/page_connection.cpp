#include "console/page_connection.h"

#include <string.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>

#include "console/console.h"
#include "util/log.h"
#include "util/ownership.h"

namespace uroce::console {
namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

}  // namespace

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using nlohmann::json;

PageConnection::PageConnection(beast::tcp_stream&& stream, std::weak_ptr<Console> console)
    : ws_(std::move(stream)), console_(std::move(console)) {}

void PageConnection::start(beast::http::request<beast::http::string_body> upgrade) {
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(64 * 1024);
    ws_.async_accept(upgrade, in_control_turn([self = shared_from_this()](beast::error_code error) {
                         auto console = self->console_.lock();
                         if (error || !console) {
                             return;
                         }
                         self->open_ = true;
                         self->ws_.text(true);
                         self->send(console->hello().dump());
                         self->read();
                     }));
}

void PageConnection::read() {
    ws_.async_read(in_,
                   in_control_turn([self = shared_from_this()](beast::error_code error, size_t) {
                       if (error) {
                           self->on_closed();
                           return;
                       }
                       const std::string text = beast::buffers_to_string(self->in_.data());
                       self->in_.consume(self->in_.size());
                       self->on_message(text);
                       if (self->open_) {
                           self->read();
                       }
                   }));
}

void PageConnection::on_message(const std::string& text) {
    auto console = console_.lock();
    if (!console) {
        return;
    }
    const json command = json::parse(text, nullptr, false);
    json result = {{"type", "result"}, {"id", nullptr}, {"ok", false}};
    if (command.is_object() && command.contains("id")) {
        result["id"] = command["id"];
    }
    Result r = uroce::ok();
    if (!command.is_object() || !command.contains("command") || !command["command"].is_string()) {
        r = uroce::fail(EINVAL, "a command is a JSON object with a \"command\" string");
    } else if (command["command"] == "decode") {
        r = decode(*console, command, result);  // changes nothing: read-only pages too
    } else if (console->read_only()) {
        r = uroce::fail(EPERM, "this console is read-only");
    } else {
        r = console->source().command(command);
    }
    result["ok"] = r.error == 0;
    if (r.error != 0) {
        const char* name = strerrorname_np(r.error);
        result["error"] = name ? name : std::to_string(r.error);
        result["message"] = r.message;
    }
    if (out_.size() >= kMaxQueued) {
        log_warn("console: a page sent commands faster than it read their results; closed");
        close();
        return;
    }
    send(result.dump());
}

// {"command": "decode", "packets": [{"bytes": HEX, "total": N}, ...]}: the
// packets of a pcap file the page replays, each its first bytes in hex and
// its length; the result carries them decoded, in order ("packets").
Result PageConnection::decode(const Console& console, const json& command, json& result) {
    if (!command.contains("packets") || !command["packets"].is_array() ||
        command["packets"].size() > kMaxDecodedPackets) {
        return uroce::fail(EINVAL, "decode takes \"packets\", an array of at most %zu",
                           kMaxDecodedPackets);
    }
    json decoded = json::array();
    std::vector<uint8_t> bytes;
    for (const json& packet : command["packets"]) {
        const bool shaped = packet.is_object() && packet.contains("bytes") &&
                            packet["bytes"].is_string() && packet.contains("total") &&
                            packet["total"].is_number_unsigned();
        const std::string hex = shaped ? packet["bytes"].get<std::string>() : "";
        const uint64_t total = shaped ? packet["total"].get<uint64_t>() : 0;
        if (!shaped || hex.size() % 2 || hex.size() / 2 > kMaxDecodedBytes ||
            total < hex.size() / 2 || total > kMaxUdpPayload) {
            return uroce::fail(EINVAL,
                               "a packet to decode is {\"bytes\": at most %zu bytes in hex, "
                               "\"total\": its length, at most %zu}",
                               kMaxDecodedBytes, kMaxUdpPayload);
        }
        bytes.resize(hex.size() / 2);
        for (size_t i = 0; i < bytes.size(); ++i) {
            const int high = hex_digit(hex[2 * i]);
            const int low = hex_digit(hex[2 * i + 1]);
            if (high < 0 || low < 0) {
                return uroce::fail(EINVAL, "\"bytes\" is hex");
            }
            bytes[i] = static_cast<uint8_t>(high << 4 | low);
        }
        decoded.push_back(console.source().decode(bytes, total));
    }
    result["packets"] = std::move(decoded);
    return uroce::ok();
}

void PageConnection::tick(const std::string* snapshot) {
    auto console = console_.lock();
    if (!console || !open_ || writing_ || !out_.empty()) {
        return;  // busy: this page takes the next one
    }
    if (snapshot) {
        send(*snapshot);
        return;
    }
    uint64_t missed = 0;
    const auto records = console->log().since(last_seq_, missed);
    if (records.empty() && missed == 0) {
        return;
    }
    json list = json::array();
    const size_t count = std::min(records.size(), kMaxRecordsPerMessage);
    for (size_t i = 0; i < count; ++i) {
        json record = console->source().record(*records[i]);
        record["t_us"] = std::chrono::duration_cast<std::chrono::microseconds>(records[i]->at -
                                                                               console->started())
                             .count();
        list.push_back(std::move(record));
    }
    last_seq_ = count ? records[count - 1]->seq : last_seq_ + missed;
    send(json{{"type", "packets"}, {"records", std::move(list)}, {"missed", missed}}.dump());
}

void PageConnection::send(std::string text) {
    out_.push_back(std::move(text));
    if (!writing_) {
        write_next();
    }
}

void PageConnection::write_next() {
    if (out_.empty() || !open_) {
        writing_ = false;
        return;
    }
    writing_ = true;
    ws_.async_write(boost::asio::buffer(out_.front()),
                    in_control_turn([self = shared_from_this()](beast::error_code error, size_t) {
                        if (error) {
                            self->on_closed();
                            return;
                        }
                        self->out_.pop_front();
                        self->write_next();
                    }));
}

void PageConnection::close() {
    if (!open_) {
        beast::get_lowest_layer(ws_).close();
        return;
    }
    open_ = false;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both,
                                                   ignored);
    beast::get_lowest_layer(ws_).close();
}

void PageConnection::on_closed() {
    open_ = false;
    writing_ = false;
    out_.clear();
    if (auto console = console_.lock()) {
        console->remove_page(this);
    }
}

}  // namespace uroce::console
