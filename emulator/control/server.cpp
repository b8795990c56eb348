#include "control/server.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>

#include "control/session.h"
#include "util/log.h"

namespace uroce {
namespace {

int listen_on(const std::filesystem::path& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof(addr.sun_path)) {
        throw std::runtime_error("socket path too long: " + path.native());
    }
    strcpy(addr.sun_path, path.c_str());
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        throw std::runtime_error(std::string("socket: ") + strerror(errno));
    }
    ::unlink(path.c_str());
    // Only the owner may connect; credentials are checked again on accept.
    const mode_t old_mask = umask(0177);
    const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    umask(old_mask);
    if (bound != 0 || listen(fd, 64) != 0) {
        const int error = errno;
        ::close(fd);
        throw std::runtime_error("cannot listen on " + path.native() + ": " + strerror(error));
    }
    return fd;
}

std::string gid_text(const ibv_gid& gid) {
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
    return text;
}

void add_counts(std::ostringstream& out, const ObjectCounts& c) {
    out << "pd " << c.pd << ", mr " << c.mr << ", mw " << c.mw << ", cq " << c.cq << ", qp " << c.qp
        << ", srq " << c.srq << ", wq " << c.wq << ", rwq_ind_table " << c.rwq_ind_table << ", ah "
        << c.ah << ", xrcd " << c.xrcd << ", comp_channel " << c.comp_channel;
}

}  // namespace

Server::Server(boost::asio::io_context& io, const std::filesystem::path& socket_path,
               std::vector<std::unique_ptr<Device>>& devices, const Doorbell& doorbell)
    : io_(io),
      socket_path_(socket_path),
      listener_(io, listen_on(socket_path)),
      devices_(devices),
      doorbell_(doorbell) {
    accept();
}

Server::~Server() {
    for (const auto& session : sessions_) {
        session->close();
    }
    sessions_.clear();
    ::unlink(socket_path_.c_str());
}

void Server::accept() {
    listener_.async_wait(
        boost::asio::posix::stream_descriptor::wait_read,
        [this](const boost::system::error_code& e) {
            if (e) {
                return;
            }
            int fd =
                accept4(listener_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                ucred peer{};
                socklen_t len = sizeof(peer);
                getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len);
                if (peer.uid != geteuid() && peer.uid != 0) {
                    log_warn("refused a client of uid %u (the daemon runs as uid %u)", peer.uid,
                             geteuid());
                    ::close(fd);
                } else {
                    auto session = std::make_shared<Session>(*this, io_, fd, peer);
                    sessions_.insert(session);
                    session->start();
                }
            }
            accept();
        });
}

Device* Server::find_device(const std::string& name) {
    for (auto& device : devices_) {
        if (device->name() == name) {
            return device.get();
        }
    }
    return nullptr;
}

void Server::end(const std::shared_ptr<Session>& session) {
    if (const Context* context = session->context()) {
        log_info("client pid %d closed %s", session->peer().pid, context->device().name().c_str());
    }
    session->close();
    sessions_.erase(session);
}

std::string Server::status_text() const {
    std::ostringstream out;
    out << "uroced pid " << getpid() << ", " << devices_.size() << " devices\n";
    for (const auto& device : devices_) {
        const ibv_port_attr& port = device->port_attr();
        char guid[24];
        const uint64_t g = device->node_guid();
        snprintf(guid, sizeof(guid), "%04x:%04x:%04x:%04x", unsigned(g >> 48),
                 unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
        out << "device " << device->name() << " address " << inet_ntoa(device->config().address)
            << " node_guid " << guid << "\n";
        out << "  port 1 " << ibv_port_state_str(port.state) << " max_mtu " << (128 << port.max_mtu)
            << " link_layer Ethernet\n";
        for (size_t i = 0; i < device->gids().size(); ++i) {
            out << "  gid " << i << " " << gid_text(device->gids()[i]) << " RoCE v2\n";
        }
        out << "  objects ";
        add_counts(out, device->counts());
        out << "\n";
    }
    size_t tools = 0;
    for (const auto& session : sessions_) {
        if (const Context* context = session->context()) {
            out << "client pid " << session->peer().pid << " uid " << session->peer().uid
                << " device " << context->device().name() << " objects ";
            add_counts(out, context->counts());
            out << "\n";
        } else {
            ++tools;
        }
    }
    out << "clients " << sessions_.size() - tools << "\n";
    return out.str();
}

}  // namespace uroce
