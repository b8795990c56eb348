// One HTTP connection to the console: the page and its assets, for a
// request that carries the token; the WebSocket upgrade, handed to a
// PageConnection; 403 or 404 for everything else.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <memory>
#include <optional>

namespace uroce::console {

class Console;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
  public:
    HttpConnection(boost::asio::ip::tcp::socket&& socket, std::weak_ptr<Console> console);
    ~HttpConnection();
    void start() { read(); }
    void close();

  private:
    using Request = boost::beast::http::request<boost::beast::http::string_body>;
    using Response = boost::beast::http::response<boost::beast::http::string_body>;

    void read();
    void handle(Request request);
    void respond(Response response);

    boost::beast::tcp_stream stream_;
    std::weak_ptr<Console> console_;
    boost::beast::flat_buffer buffer_;
    std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
};

}  // namespace uroce::console
