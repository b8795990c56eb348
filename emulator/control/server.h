// The control socket: accepts clients whose credentials match the daemon's
// user, keeps their sessions, and answers status.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "device/device.h"
#include "queues/doorbell.h"

namespace uroce {

class Session;

class Server {
  public:
    Server(boost::asio::io_context& io, const std::filesystem::path& socket_path,
           std::vector<std::unique_ptr<Device>>& devices, const Doorbell& doorbell);
    ~Server();

    Device* find_device(const std::string& name);
    const Doorbell& doorbell() const { return doorbell_; }
    void end(const std::shared_ptr<Session>& session);
    std::string status_text() const;

  private:
    void accept();

    boost::asio::io_context& io_;
    std::filesystem::path socket_path_;
    boost::asio::posix::stream_descriptor listener_;
    std::vector<std::unique_ptr<Device>>& devices_;
    std::set<std::shared_ptr<Session>> sessions_;
    const Doorbell& doorbell_;
};

}  // namespace uroce
