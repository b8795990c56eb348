#include "console/console.h"

#include <sys/random.h>

#include "console/http_connection.h"
#include "console/page_connection.h"
#include "device/stats.h"
#include "qp/qp_transitions.h"
#include "util/log.h"
#include "util/ownership.h"
#include "wire/headers.h"
#include "wire/opcode.h"
#include "wire/rnr_timer.h"

namespace uroce::console {

namespace {

using tcp = boost::asio::ip::tcp;
using nlohmann::json;
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr unsigned kTicksPerSnapshot = 5;

// 128 random bits as hex.
std::string random_token() {
    uint8_t bytes[16];
    size_t filled = 0;
    while (filled < sizeof(bytes)) {
        const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
        if (n > 0) {
            filled += static_cast<size_t>(n);
        }
    }
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string token;
    for (uint8_t b : bytes) {
        token += kDigits[b >> 4];
        token += kDigits[b & 15];
    }
    return token;
}

// The value of `name` in a query string or a Cookie header ("a=1&b=2", "a=1; b=2").
std::string_view value_of(std::string_view text, std::string_view name, char separator) {
    while (!text.empty()) {
        const size_t end = std::min(text.find(separator), text.size());
        std::string_view pair = text.substr(0, end);
        while (!pair.empty() && pair.front() == ' ') {
            pair.remove_prefix(1);
        }
        if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
            return pair.substr(name.size() + 1);
        }
        text.remove_prefix(std::min(end + 1, text.size()));
    }
    return {};
}

// Compares without stopping at the first difference.
bool same_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) {
        return false;
    }
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    }
    return diff == 0;
}

}  // namespace

Console::Console(boost::asio::io_context& io, bool read_only, PacketLog& log, Source source)
    : io_(io),
      acceptor_(io),
      timer_(io),
      read_only_(read_only),
      log_(log),
      source_(std::move(source)),
      token_(random_token()),
      started_(std::chrono::steady_clock::now()) {}

Result Console::start(boost::asio::io_context& io, uint16_t port, bool read_only, PacketLog& log,
                      Source source, std::shared_ptr<Console>& out) {
    auto console = std::make_shared<Console>(io, read_only, log, std::move(source));
    boost::system::error_code error;
    const tcp::endpoint endpoint(boost::asio::ip::make_address_v4("127.0.0.1"), port);
    console->acceptor_.open(endpoint.protocol(), error);
    if (!error) {
        console->acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
    }
    if (!error) {
        console->acceptor_.bind(endpoint, error);
    }
    if (!error) {
        console->acceptor_.listen(boost::asio::socket_base::max_listen_connections, error);
    }
    if (error) {
        return fail(error.value(), "cannot listen on 127.0.0.1:%u: %s", unsigned(port),
                    error.message().c_str());
    }
    console->port_ = console->acceptor_.local_endpoint().port();
    log.enable();
    console->accept();
    console->tick();
    out = std::move(console);
    return ok();
}

Console::~Console() {
    stop();
}

void Console::stop() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    timer_.cancel();
    for (const auto& page : pages_) {
        page->close();
    }
    pages_.clear();
    for (const auto& weak : http_) {
        if (auto connection = weak.lock()) {
            connection->close();
        }
    }
    http_.clear();
    log_.disable();
}

void Console::accept() {
    acceptor_.async_accept(in_control_turn(
        [weak = weak_from_this()](boost::system::error_code error, tcp::socket socket) {
            auto self = weak.lock();
            if (!self || error == boost::asio::error::operation_aborted) {
                return;
            }
            if (!error) {
                if (self->http_connections_ >= kMaxHttpConnections) {
                    log_warn("console: %zu connections open already; refused one",
                             self->http_connections_);
                } else {
                    auto connection = std::make_shared<HttpConnection>(std::move(socket), weak);
                    std::erase_if(self->http_, [](const auto& w) { return w.expired(); });
                    self->http_.push_back(connection);
                    connection->start();
                }
            }
            self->accept();
        }));
}

void Console::tick() {
    if (!pages_.empty()) {
        std::string snapshot;
        if (ticks_ % kTicksPerSnapshot == 0) {
            json message = source_.snapshot();
            message["type"] = "snapshot";
            message["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
            snapshot = message.dump();
        }
        // A copy: a page that fails removes itself from the set.
        const auto pages = pages_;
        for (const auto& page : pages) {
            page->tick(snapshot.empty() ? nullptr : &snapshot);
        }
    }
    ++ticks_;
    timer_.expires_after(kTick);
    timer_.async_wait(in_control_turn([weak = weak_from_this()](boost::system::error_code error) {
        if (auto self = weak.lock(); self && !error) {
            self->tick();
        }
    }));
}

bool Console::authorized(std::string_view target, std::string_view cookie) const {
    const size_t query = target.find('?');
    const std::string_view from_query = query == std::string_view::npos
                                            ? std::string_view{}
                                            : value_of(target.substr(query + 1), "token", '&');
    return same_secret(from_query, token_) ||
           same_secret(value_of(cookie, "uroce_token", ';'), token_);
}

bool Console::host_allowed(std::string_view host) const {
    const std::string port = ":" + std::to_string(port_);
    return host == "127.0.0.1" + port || host == "localhost" + port;
}

bool Console::origin_allowed(std::string_view origin) const {
    const std::string port = ":" + std::to_string(port_);
    return origin == "http://127.0.0.1" + port || origin == "http://localhost" + port;
}

void Console::add_page(const std::shared_ptr<PageConnection>& page) {
    if (pages_.size() >= kMaxPages) {
        log_warn("console: %zu pages open already; refused one", pages_.size());
        page->close();
        return;
    }
    pages_.insert(page);
}

void Console::remove_page(PageConnection* page) {
    std::erase_if(pages_, [page](const auto& p) { return p.get() == page; });
}

// What the page shows of RoCE that packets do not say themselves: opcode
// names by number, each header's size, the RNR NAK timer's codes in
// microseconds (wire/).
json Console::wire_facts() {
    json opcodes = json::object();
    for (unsigned code = 0; code < 256; ++code) {
        if (const wire::OpcodeInfo* info = wire::opcode_info(static_cast<uint8_t>(code))) {
            opcodes[std::to_string(code)] = info->name;
        }
    }
    json header_bytes = {{"BTH", wire::kBthBytes}};
    for (auto h = wire::ExtHeader::kDeth; h <= wire::ExtHeader::kCnpReserved;
         h = static_cast<wire::ExtHeader>(static_cast<uint8_t>(h) + 1)) {
        header_bytes[wire::ext_header_name(h)] = wire::ext_header_bytes(h);
    }
    json rnr_timer_us = json::array();
    for (uint8_t code = 0; code < 32; ++code) {
        rnr_timer_us.push_back(wire::rnr_nak_delay(code).count());
    }
    return {{"opcodes", std::move(opcodes)},
            {"header_bytes", std::move(header_bytes)},
            {"icrc_bytes", wire::kIcrcBytes},
            {"rnr_timer_us", std::move(rnr_timer_us)}};
}

json Console::hello() const {
    static constexpr ibv_qp_state kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                               IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_SQE,
                                               IBV_QPS_ERR};
    static constexpr ibv_qp_type kTypes[] = {
        IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV};
    json states = json::array();
    for (ibv_qp_state s : kStates) {
        states.push_back(qp_state_name(s));
    }
    json transitions = json::object();
    for (ibv_qp_type type : kTypes) {
        json pairs = json::array();
        for (ibv_qp_state from : kStates) {
            for (ibv_qp_state to : kStates) {
                if (qp_transition_rule(from, to, type).valid) {
                    pairs.push_back({qp_state_name(from), qp_state_name(to)});
                }
            }
        }
        transitions[qp_type_name(type)] = std::move(pairs);
    }
    // What each counter counts, from the one list the daemon keeps.
    json counters = json::object();
#define UROCE_COUNTER_TEXT(name, text) counters[#name] = text;
    UROCE_DEVICE_COUNTERS(UROCE_COUNTER_TEXT)
#undef UROCE_COUNTER_TEXT
    return {{"type", "hello"},
            {"read_only", read_only_},
            {"states", std::move(states)},
            {"transitions", std::move(transitions)},
            {"counters", std::move(counters)},
            {"wire", wire_facts()}};
}

}  // namespace uroce::console
