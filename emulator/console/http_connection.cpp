#include "console/http_connection.h"

#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <chrono>

#include "console/assets.h"
#include "console/console.h"
#include "console/page_connection.h"
#include "util/ownership.h"

namespace uroce::console {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string_view content_type(std::string_view path) {
    if (path.ends_with(".js")) {
        return "text/javascript; charset=utf-8";
    }
    if (path.ends_with(".css")) {
        return "text/css; charset=utf-8";
    }
    return "text/html; charset=utf-8";
}

std::string_view path_of(std::string_view target) {
    return target.substr(0, target.find('?'));
}

}  // namespace

HttpConnection::HttpConnection(boost::asio::ip::tcp::socket&& socket,
                               std::weak_ptr<Console> console)
    : stream_(std::move(socket)), console_(std::move(console)) {
    if (auto c = console_.lock()) {
        c->http_opened();
    }
}

HttpConnection::~HttpConnection() {
    if (auto c = console_.lock()) {
        c->http_closed();
    }
}

void HttpConnection::read() {
    parser_.emplace();
    parser_->header_limit(8 * 1024);
    parser_->body_limit(1024);
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_,
                     in_control_turn([self = shared_from_this()](beast::error_code error, size_t) {
                         if (error) {
                             self->close();
                             return;
                         }
                         self->handle(self->parser_->release());
                     }));
}

void HttpConnection::handle(Request request) {
    auto console = console_.lock();
    if (!console) {
        close();
        return;
    }
    Response response{http::status::ok, request.version()};
    response.keep_alive(request.keep_alive());
    response.set(http::field::cache_control, "no-store");
    response.set("X-Content-Type-Options", "nosniff");
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view cookie(request[http::field::cookie].data(),
                                  request[http::field::cookie].size());
    const std::string_view host(request[http::field::host].data(),
                                request[http::field::host].size());
    const std::string_view path = path_of(target);
    // A name that resolves to 127.0.0.1 from another site (DNS rebinding)
    // carries that name as its Host.
    if (!console->host_allowed(host) || !console->authorized(target, cookie)) {
        response.result(http::status::forbidden);
        response.keep_alive(false);  // a refused client is not served again
        response.set(http::field::content_type, "text/plain; charset=utf-8");
        response.body() =
            "403 Forbidden: this console needs its token (the address "
            "`uroce console` printed)\n";
        respond(std::move(response));
        return;
    }
    if (path == "/ws" && beast::websocket::is_upgrade(request)) {
        const auto origin = request[http::field::origin];
        if (!origin.empty() &&
            !console->origin_allowed(std::string_view(origin.data(), origin.size()))) {
            response.result(http::status::forbidden);
            response.keep_alive(false);
            response.set(http::field::content_type, "text/plain; charset=utf-8");
            response.body() = "403 Forbidden: a page of another origin\n";
            respond(std::move(response));
            return;
        }
        auto page = std::make_shared<PageConnection>(std::move(stream_), console_);
        console->add_page(page);
        page->start(std::move(request));
        return;
    }
    const std::string_view asset_path = path == "/" ? "/index.html" : path;
    for (const auto& [name, bytes] : assets()) {
        if (name == asset_path && request.method() == http::verb::get) {
            response.set(http::field::content_type, std::string(content_type(name)));
            response.set("Content-Security-Policy",
                         "default-src 'self'; connect-src 'self' ws://127.0.0.1:" +
                             std::to_string(console->port()) +
                             " ws://localhost:" + std::to_string(console->port()));
            if (target.find("token=") != std::string_view::npos) {
                // The page's own requests (script, style sheet, WebSocket) carry it.
                response.set(http::field::set_cookie, "uroce_token=" + console->token() +
                                                          "; HttpOnly; SameSite=Strict; Path=/");
            }
            response.body() = std::string(bytes);
            respond(std::move(response));
            return;
        }
    }
    response.result(http::status::not_found);
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    response.body() = "404 Not Found\n";
    respond(std::move(response));
}

void HttpConnection::respond(Response response) {
    response.prepare_payload();
    auto message = std::make_shared<Response>(std::move(response));
    http::async_write(
        stream_, *message,
        in_control_turn([self = shared_from_this(), message](beast::error_code error, size_t) {
            if (error || !message->keep_alive()) {
                self->close();
                return;
            }
            self->read();
        }));
}

void HttpConnection::close() {
    beast::error_code ignored;
    stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.close();
}

}  // namespace uroce::console
