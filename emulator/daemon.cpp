#include "daemon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <stdexcept>

#include "device/device_named.h"
#include "device/tree_entries.h"
#include "net/interfaces.h"
#include "net/socket_io.h"
#include "util/log.h"
#include "util/ownership.h"
#include "util/priority.h"

namespace uroce {
namespace {

// Holds <dir>/uroced.lock for the daemon's lifetime: a second daemon on the
// same directory fails before it touches the first one's files.
UniqueFd lock_runtime_dir(const std::filesystem::path& dir) {
    UniqueFd lock(open((dir / "uroced.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        throw std::runtime_error("a uroced is already running on " + dir.native());
    }
    return lock;
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

// Every QP holds the descriptors of its queues' shared memory and every
// client a socket: the soft limit (often 1024) would stop the device far
// below max_qp, so take what the hard limit allows.
void raise_descriptor_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) {
        return;
    }
    const rlim_t was = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
        log_info("descriptor limit raised from %llu to %llu", static_cast<unsigned long long>(was),
                 static_cast<unsigned long long>(limit.rlim_cur));
    }
}

}  // namespace

// The engines on the first of the daemon's UDP ports (udp_ports) whose
// addresses no other socket holds; what status says of the port.
std::string Daemon::start_engines(SocketIo::Kind socket_io) {
    const std::vector<uint16_t> ports = udp_ports(options_);
    for (size_t i = 0;; ++i) {
        options_.udp_port = ports[i];
        try {
            const EngineOptions engine_options{.udp_port = ports[i],
                                               .shortcut = options_.shortcut,
                                               .paranoid = options_.paranoid,
                                               .socket_io = socket_io,
                                               .open = options_.open};
            engines_ = std::make_unique<Engines>(io_, devices_, engine_options, options_.threads);
            break;
        } catch (const AddressInUse& e) {
            if (i + 1 == ports.size()) {
                throw;
            }
        }
    }
    std::string line = "udp port " + std::to_string(options_.udp_port);
    if (options_.udp_port != ports.front()) {
        line += " (" + std::to_string(ports.front()) + " is taken on these addresses)";
        log_info(
            "UDP port %u is taken on the devices' addresses (another daemon's?): RoCEv2 on "
            "UDP port %u",
            ports.front(), options_.udp_port);
    }
    if (!options_.open) {
        line += "; devices on loopback take packets only from this daemon's own";
    }
    return line;
}

Daemon::Daemon(const Options& options) : options_(options), paths_{options.runtime_dir} {
    set_log_limit(options_.max_log_bytes);
    raise_descriptor_limit();
    make_private_dir(paths_.dir);
    lock_ = lock_runtime_dir(paths_.dir);
    for (DeviceConfig config : options_.devices) {
        if (!config.follows_interface) {
            config.netdev = interface_holding(config.address);
        }
        config.gid_layout = options_.gid_layout;
        devices_.push_back(std::make_unique<Device>(config, next_device_index_++));
        follow_link(*devices_.back());
        follow_addresses(*devices_.back());
    }
    const SocketIoChoice network = choose_socket_io(!options_.io_uring);
    // Said once: the readiness loop where io_uring was refused is news.
    std::string network_line = describe(network);
    if (network.kind == SocketIo::Kind::kReadiness && options_.io_uring) {
        log_warn("%s", network_line.c_str());
    } else {
        log_info("%s", network_line.c_str());
    }
    const std::string port_line = start_engines(network.kind);
    cm_ = std::make_unique<cm::ConnectionManager>(
        io_, devices_,
        [this](Device& from, uint8_t sgid, const wire::IpAddress& dest_ip,
               std::span<const std::byte> mad) { engines_->send_mad(from, sgid, dest_ip, mad); });
    engines_->set_mad_receiver(
        [this](Device& to, const wire::IpAddress& src_ip, const wire::IpAddress& dest_ip,
               std::span<const uint8_t> mad) { cm_->receive_mad(to, src_ip, dest_ip, mad); });
    server_ = std::make_unique<Server>(
        io_, paths_.socket(), devices_, engines_->doorbell(), *cm_, engines_->packet_log(),
        [this](const Device& device) { engines_->take_posted_work(device); });
    server_->check_findings().set_every_client(options_.check);
    server_->set_network_line(network_line + "\n" + port_line);
    server_->set_engines_text([this] { return engines_->status_text(); });
    server_->set_link_control([this](const std::string& name,
                                     const std::string& netdev) { return add_link(name, netdev); },
                              [this](const Device& device) { return delete_link(device); });
    server_->set_device_reset([this](Device& device) { reset_device(device); });
    publish_devices();
    for (const auto& device : devices_) {
        log_ready(*device);
    }
    if (Result r = links_.open(); r) {
        links_wait_.assign(dup(links_.fd()));
        watch_links();
        // A link that changed between the first look and the subscription
        // (a veth's carrier comes a moment after it is up) sent its news
        // before anyone listened: look again, now that news will come.
        LinkNews everything;
        everything.all = true;
        follow_links(everything);
    } else {
        log_warn("%s: ports will not follow their interfaces", r.message.c_str());
    }
    std::ofstream(paths_.pid_file()) << getpid() << "\n";
}

Daemon::~Daemon() {
    try {
        withdraw_devices();
    } catch (const std::exception& e) {
        log_warn("while removing the devices: %s", e.what());
    }
    server_.reset();
    std::filesystem::remove(paths_.pid_file());
    log_info("stopped");
}

Result Daemon::add_link(const std::string& name, const std::string& netdev) {
    try {
        check_device_name(name);
    } catch (const std::invalid_argument& e) {
        return fail(EINVAL, "%s", e.what());
    }
    const std::vector<wire::IpAddress> addresses = addresses_of(netdev);
    if (addresses.empty()) {
        return fail(EADDRNOTAVAIL, "%s has no IPv4 or global IPv6 address for a RoCEv2 device",
                    netdev.c_str());
    }
    DeviceConfig config;
    config.name = name;
    config.address = addresses.front();
    config.netdev = netdev;
    config.follows_interface = true;
    config.gid_layout = options_.gid_layout;
    if (device_named(devices_, name)) {
        return fail(EEXIST, "a device is already named %s", name.c_str());
    }
    for (const auto& device : devices_) {
        if (device->config().netdev == netdev) {
            return fail(EEXIST, "%s already has a device on %s", device->name().c_str(),
                        netdev.c_str());
        }
    }
    auto device = std::make_unique<Device>(config, next_device_index_);
    follow_link(*device);
    follow_addresses(*device);
    if (Result r = engines_->add_device(*device); !r) {
        return r;
    }
    ++next_device_index_;  // the index of the socket just opened
    devices_.push_back(std::move(device));
    publish_devices();
    log_ready(*devices_.back());
    return ok();
}

// uroce reset, after the server took every client's context on the device:
// rdma_cm IDs lose it, packets waiting for it or delayed go, and its
// faults, step mode, counters and the numbers it hands out (QPNs, keys)
// are as at start.
void Daemon::reset_device(Device& device) {
    cm_->remove_device(device);
    engines_->forget_packets(device);
    device.faults().configure({});
    device.step_gate().clear();
    device.stats() = {};
    device.qps().restart();
    device.wqs().restart();
    device.srqs().restart();
    device.keys().restart();
}

Result Daemon::delete_link(const Device& device) {
    auto it = std::find_if(devices_.begin(), devices_.end(),
                           [&](const auto& d) { return d.get() == &device; });
    if (it == devices_.end()) {
        return fail(ENODEV, "no such device");
    }
    const std::string name = device.name();
    const std::string node_name = device.uverbs_name();
    server_->remove_device(device, "the device was removed (rdma link delete)");
    cm_->remove_device(device);
    engines_->remove_device(device);
    devices_.erase(it);
    publish_devices();
    std::vector<std::filesystem::path> node;
    std::erase_if(nodes_made_, [&](const std::filesystem::path& path) {
        return path.filename() == node_name && (node.push_back(path), true);
    });
    bridge::remove_device_nodes(node);
    log_info("device %s deleted", name.c_str());
    return ok();
}

void Daemon::watch_links() {
    links_wait_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                           in_control_turn([this](const boost::system::error_code& error) {
                               if (!error) {
                                   follow_links(links_.drain());
                                   watch_links();
                               }
                           }));
}

void Daemon::follow_links(const LinkNews& news) {
    std::vector<const Device*> gone;
    for (const auto& device : devices_) {
        const std::string& netdev = device->config().netdev;
        if (!news.all && !news.interfaces.count(netdev)) {
            continue;  // news of an interface no device is on pauses nothing
        }
        // A device's port, GID table and sockets change, which every engine
        // reads: the whole daemon is the subject.
        ownership::claim_all();
        if (const std::optional<Link> link = link_of(netdev)) {
            follow_link(*device, *link);
            if (follow_addresses(*device)) {
                engines_->follow_gids(*device);
                publish_devices();  // the tree's GID table
                server_->post_port_event(*device, IBV_EVENT_GID_CHANGE);
            }
        } else {
            gone.push_back(device.get());
        }
    }
    for (const Device* device : gone) {
        log_info("device %s: interface %s is gone", device->name().c_str(),
                 device->config().netdev.c_str());
        if (Result r = delete_link(*device); !r) {
            log_warn("device %s stays: %s", device->name().c_str(), r.message.c_str());
        }
    }
}

void Daemon::follow_link(Device& device) {
    // An interface gone meanwhile: down (follow_links removes the device).
    follow_link(device, link_of(device.config().netdev).value_or(Link{device.link().mtu, false}));
}

void Daemon::follow_link(Device& device, const Link& link) {
    const std::string& netdev = device.config().netdev;
    const PortChange change = device.follow_link(link);
    if (change.mtu) {
        log_info("device %s: active MTU %u (%s's MTU is %u)", device.name().c_str(),
                 128u << device.port_attr().active_mtu, netdev.c_str(), link.mtu);
    }
    if (change.state) {
        log_info("device %s: port %s (%s is %s)", device.name().c_str(),
                 ibv_port_state_str(device.port_attr().state), netdev.c_str(),
                 link.up ? "up" : "down or without carrier");
        if (server_) {
            publish_devices();  // the tree's ports/1/state and phys_state
            server_->post_port_event(device, link.up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
        }
    }
}

bool Daemon::follow_addresses(Device& device) {
    const GidTable::Change change =
        device.follow_addresses(addresses_of(device.config().netdev, true));
    for (const wire::IpAddress& address : change.added) {
        log_info("device %s: GID %u is %s's address %s", device.name().c_str(),
                 device.shown_gid_index(device.gid_table().index_of(address).value_or(0)),
                 device.config().netdev.c_str(), address.text().c_str());
    }
    for (const wire::IpAddress& address : change.removed) {
        log_info("device %s: %s no longer has %s; its GID is gone", device.name().c_str(),
                 device.config().netdev.c_str(), address.text().c_str());
    }
    if (change.left_out) {
        log_warn(
            "device %s: %zu of %s's addresses have no GID: the table's %zu entries are "
            "full",
            device.name().c_str(), change.left_out, device.config().netdev.c_str(),
            GidTable::kLength);
    }
    return change.any();
}

void Daemon::publish_devices() {
    const auto tree = tree_entries(devices_, paths_.socket());
    bridge::write_tree(paths_.sysfs(), tree, paths_.socket());
    device_nodes_ = bridge::create_device_nodes(tree, nodes_made_);
}

void Daemon::log_ready(const Device& device) const {
    log_info("device %s ready on %s via %s (%s)", device.name().c_str(),
             device.config().address.text().c_str(), device.config().netdev.c_str(),
             device_nodes_ ? "device node created" : "device node from the preload bridge");
}

void Daemon::withdraw_devices() {
    bridge::remove_device_nodes(nodes_made_);  // another daemon's stay
    nodes_made_.clear();
    bridge::remove_tree(paths_.sysfs());
}

void Daemon::drain_then_stop(boost::asio::steady_timer& timer,
                             std::chrono::steady_clock::time_point deadline) {
    if (!cm_->events_waiting() || std::chrono::steady_clock::now() >= deadline) {
        io_.stop();
        return;
    }
    timer.expires_after(std::chrono::milliseconds(20));
    timer.async_wait(
        in_control_turn([this, &timer, deadline](const boost::system::error_code& error) {
            if (!error) {
                drain_then_stop(timer, deadline);
            }
        }));
}

void Daemon::run() {
    if (const std::string refused = raise_priority(options_.nice); !refused.empty()) {
        log_info("%s", refused.c_str());
    }
    boost::asio::signal_set signals(io_, SIGTERM, SIGINT);
    boost::asio::steady_timer drain(io_);
    signals.async_wait(
        in_control_turn([this, &drain](const boost::system::error_code&, int signal) {
            log_info("signal %d: stopping", signal);
            // rdma_cm programs hear DEVICE_REMOVAL, as from a kernel whose device
            // goes: the daemon waits (a little) until they have taken it.
            if (cm_->remove_devices()) {
                drain_then_stop(drain, std::chrono::steady_clock::now() + kRemovalDrain);
            } else {
                io_.stop();
            }
        }));
    signal(SIGPIPE, SIG_IGN);
    log_info("serving %s; RoCEv2 on UDP port %u%s; %u engine thread%s%s", paths_.socket().c_str(),
             options_.udp_port, options_.shortcut ? "" : " (no shortcut between own devices)",
             options_.threads, options_.threads == 1 ? "" : "s",
             options_.paranoid ? "; paranoid: invariants checked after every step" : "");
    engines_->run();
}

}  // namespace uroce
