#include "daemon.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <fstream>
#include <stdexcept>

#include "bridge_tree.h"
#include "util/log.h"

namespace uroce {
namespace {

// True when another daemon answers on the socket.
bool socket_in_use(const std::filesystem::path& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof(addr.sun_path)) {
        return false;
    }
    strcpy(addr.sun_path, path.c_str());
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool in_use =
        fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (fd >= 0) {
        ::close(fd);
    }
    return in_use;
}

void make_private_dir(const std::filesystem::path& dir) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        throw std::runtime_error("cannot create runtime directory " + dir.native());
    }
    if (st.st_uid != geteuid()) {
        throw std::runtime_error("runtime directory " + dir.native() + " belongs to another user");
    }
    chmod(dir.c_str(), 0700);
}

}  // namespace

Daemon::Daemon(const Options& options) : options_(options), paths_{options.runtime_dir} {
    make_private_dir(paths_.dir);
    if (socket_in_use(paths_.socket())) {
        throw std::runtime_error("a uroced is already running on " + paths_.socket().native());
    }
    for (const DeviceConfig& config : options_.devices) {
        devices_.push_back(std::make_unique<Device>(config, devices_.size()));
    }
    engine_ = std::make_unique<Engine>(io_, devices_,
                                       EngineOptions{options_.udp_port, options_.shortcut});
    server_ = std::make_unique<Server>(io_, paths_.socket(), devices_, engine_->doorbell());
    publish_devices();
    std::ofstream(paths_.pid_file()) << getpid() << "\n";
}

Daemon::~Daemon() {
    withdraw_devices();
    server_.reset();
    std::filesystem::remove(paths_.pid_file());
    log_info("stopped");
}

void Daemon::publish_devices() {
    const auto tree = bridge_tree(devices_, paths_.socket());
    bridge::write_tree(paths_.sysfs(), tree);
    device_nodes_ = bridge::create_device_nodes(tree);
    for (const auto& device : devices_) {
        log_info("device %s ready on %s (%s)", device->name().c_str(),
                 inet_ntoa(device->config().address),
                 device_nodes_ ? "device node created" : "device node from the preload bridge");
    }
}

void Daemon::withdraw_devices() {
    const auto tree = bridge_tree(devices_, paths_.socket());
    if (device_nodes_) {
        bridge::remove_device_nodes(tree);
    }
    bridge::remove_tree(paths_.sysfs());
}

void Daemon::run() {
    boost::asio::signal_set signals(io_, SIGTERM, SIGINT);
    signals.async_wait([this](const boost::system::error_code&, int signal) {
        log_info("signal %d: stopping", signal);
        io_.stop();
    });
    signal(SIGPIPE, SIG_IGN);
    log_info("serving %s; RoCEv2 on UDP port %u%s", paths_.socket().c_str(), options_.udp_port,
             options_.shortcut ? "" : " (no shortcut between own devices)");
    engine_->run();
}

}  // namespace uroce
