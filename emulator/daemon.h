// uroced as a whole: its devices, the control server, and what it leaves
// in the runtime directory (socket, pid file, sysfs tree) while it runs.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "cm/connection_manager.h"
#include "control/server.h"
#include "device/device.h"
#include "engine/engines.h"
#include "net/link_monitor.h"
#include "options.h"
#include "protocol/runtime_dir.h"

namespace uroce {

class Daemon {
  public:
    explicit Daemon(const Options& options);  // throws std::runtime_error
    ~Daemon();
    void run();  // until SIGTERM or SIGINT

  private:
    // How long a stopping daemon waits for rdma_cm programs to take their
    // DEVICE_REMOVAL events.
    static constexpr std::chrono::seconds kRemovalDrain{2};
    void drain_then_stop(boost::asio::steady_timer& timer,
                         std::chrono::steady_clock::time_point deadline);
    // rdma link add NAME type uroce netdev IFACE: a device on the
    // interface's first IPv4 address, one device per interface as rxe allows.
    Result add_link(const std::string& name, const std::string& netdev);
    // rdma link delete: the device's clients, rdma_cm IDs, socket and tree
    // entry go; its index is not given again, as the kernel's are not.
    Result delete_link(const Device& device);
    void reset_device(Device& device);
    // A port follows its interface (rxe's netdev notifier): its state and
    // MTU change with the link, its clients hear PORT_ACTIVE or PORT_ERR,
    // and the device goes when the interface does.
    void watch_links();
    void follow_links(const LinkNews& news);
    void follow_link(Device& device);  // reads the interface
    void follow_link(Device& device, const Link& link);
    // The device's GID table takes its interface's addresses (a device made
    // on an interface); whether it changed.
    bool follow_addresses(Device& device);
    // Makes the engines, on the first UDP port free on every device's
    // address; returns the status line about the port.
    std::string start_engines(SocketIo::Kind socket_io);
    void publish_devices();
    void log_ready(const Device& device) const;
    void withdraw_devices();

    Options options_;
    RuntimePaths paths_;
    UniqueFd lock_;
    boost::asio::io_context io_;
    std::vector<std::unique_ptr<Device>> devices_;
    std::unique_ptr<Engines> engines_;
    std::unique_ptr<cm::ConnectionManager> cm_;  // outlives the server's sessions
    std::unique_ptr<Server> server_;
    LinkMonitor links_;
    boost::asio::posix::stream_descriptor links_wait_{io_};
    bool device_nodes_ = false;  // /dev/infiniband could be written
    // The device nodes this daemon made, and so removes.
    std::vector<std::filesystem::path> nodes_made_;
    uint32_t next_device_index_ = 0;
};

}  // namespace uroce
