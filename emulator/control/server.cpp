#include "control/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>

#include "control/packet_json.h"
#include "control/session.h"
#include "device/device_named.h"
#include "net/interfaces.h"
#include "protocol/socket.h"
#include "util/case_tag.h"
#include "util/coverage.h"
#include "util/log.h"
#include "util/ownership.h"

namespace uroce {
namespace {

size_t descriptor_limit() {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    return limit.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(limit.rlim_cur);
}

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

void add_device_line(std::ostringstream& out, const Device& device) {
    char guid[24];
    const uint64_t g = device.node_guid();
    snprintf(guid, sizeof(guid), "%04x:%04x:%04x:%04x", unsigned(g >> 48),
             unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
    out << "device " << device.name() << " address " << device.config().address.text()
        << " node_guid " << guid << "\n";
}

// " name +N" for each counter that grew from `before` to `after`, or " none".
std::string counter_changes(const DeviceStats& before, const DeviceStats& after) {
    std::string changes;
#define UROCE_COUNTER_CHANGE(name, text)                                      \
    if (after.name != before.name) {                                          \
        changes += " " #name " +" + std::to_string(after.name - before.name); \
    }
    UROCE_DEVICE_COUNTERS(UROCE_COUNTER_CHANGE)
#undef UROCE_COUNTER_CHANGE
    return changes.empty() ? " none" : changes;
}

void add_counters(std::ostringstream& out, const DeviceStats& stats) {
#define UROCE_COUNTER_LINE(name, text) out << "  " #name " " << stats.name << "\n";
    UROCE_DEVICE_COUNTERS(UROCE_COUNTER_LINE)
#undef UROCE_COUNTER_LINE
}

void add_counts(std::ostringstream& out, const ObjectCounts& c) {
    out << "pd " << c.pd << ", mr " << c.mr << ", mw " << c.mw << ", cq " << c.cq << ", qp " << c.qp
        << ", srq " << c.srq << ", wq " << c.wq << ", rwq_ind_table " << c.rwq_ind_table << ", ah "
        << c.ah << ", xrcd " << c.xrcd << ", comp_channel " << c.comp_channel << ", dm " << c.dm
        << ", dm_bytes " << c.dm_bytes;
}

}  // namespace

Server::Server(boost::asio::io_context& io, const std::filesystem::path& socket_path,
               std::vector<std::unique_ptr<Device>>& devices, const Doorbell& doorbell,
               cm::ConnectionManager& cm, PacketLog& packet_log,
               std::function<void(const Device&)> take_posted_work)
    : io_(io),
      socket_path_(socket_path),
      take_posted_work_(std::move(take_posted_work)),
      listener_(io, listen_on(socket_path)),
      devices_(devices),
      doorbell_(doorbell),
      cm_(cm),
      reserve_(open("/dev/null", O_RDONLY | O_CLOEXEC)),
      descriptors_(descriptor_limit()),
      wire_(devices, packet_log),
      console_(io, *this, wire_, packet_log) {
    accept();
}

Server::~Server() {
    console_.stop("the daemon stops");
    for (const auto& session : sessions_) {
        session->close();
    }
    sessions_.clear();
    ::unlink(socket_path_.c_str());
}

void Server::accept() {
    listener_.async_wait(
        boost::asio::posix::stream_descriptor::wait_read,
        in_control_turn([this](const boost::system::error_code& e) {
            if (e) {
                return;
            }
            int fd =
                accept4(listener_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
                refuse_for_want_of_descriptors();
            }
            if (fd >= 0) {
                ucred peer{};
                socklen_t len = sizeof(peer);
                getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len);
                if (peer.uid != geteuid() && peer.uid != 0) {
                    log_warn("refused a client of uid %u (the daemon runs as uid %u)", peer.uid,
                             geteuid());
                    ::close(fd);
                } else {
                    admit(fd, peer);
                }
            }
            accept();
        }));
}

// A connection costs its client one descriptor of its share. One beyond the
// share is told so (EMFILE and why) at its first request, then closed.
void Server::admit(int fd, const ucred& peer) {
    Result taken = descriptors_.take(peer.pid, 1, "connection");
    if (!taken && refused_connections_ >= kMaxRefusedConnections) {
        // Already telling the maximum of clients why: this one only sees
        // the connection closed.
        if (descriptor_refusals_logged_.allow(RateLimit::Clock::now())) {
            log_warn(
                "closed a connection unanswered: %s, and %zu refused connections wait "
                "for their first request",
                taken.message.c_str(), refused_connections_);
        }
        ::close(fd);
        return;
    }
    if (!taken) {
        ++refused_connections_;
        if (descriptor_refusals_logged_.allow(RateLimit::Clock::now())) {
            log_warn("refused a connection: %s", taken.message.c_str());
        }
    }
    auto session = std::make_shared<Session>(*this, io_, fd, peer, taken);
    sessions_.insert(session);
    session->start();
}

void Server::refuse_for_want_of_descriptors() {
    reserve_.reset();
    if (UniqueFd fd(accept4(listener_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC)); fd) {
        // The hello comes right after connect; a client too slow to send it
        // is closed all the same.
        const timeval wait{0, 200000};
        setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
        std::vector<std::byte> message;
        std::vector<int> fds;
        rpc::RequestHeader request{};
        const int error = rpc::receive_message(fd.get(), message, fds);
        if ((error == 0 || error == EMFILE || error == ETOOMANYREFS) &&
            message.size() >= sizeof(request)) {
            memcpy(&request, message.data(), sizeof(request));
        }
        for (int received : fds) {
            ::close(received);
        }
        rlimit limit{};
        getrlimit(RLIMIT_NOFILE, &limit);
        rpc::ReplyHeader reply{};
        reply.magic = rpc::kMagic;
        reply.version = rpc::kVersion;
        reply.op = request.op;
        reply.seq = request.seq;
        reply.length = sizeof(reply);
        reply.error = EMFILE;
        snprintf(reply.message, sizeof(reply.message),
                 "uroced has no file descriptors left (limit %llu): close other clients or "
                 "raise its RLIMIT_NOFILE",
                 static_cast<unsigned long long>(limit.rlim_cur));
        rpc::send_message(fd.get(), std::as_bytes(std::span(&reply, 1)));
        if (descriptor_refusals_logged_.allow(RateLimit::Clock::now())) {
            log_warn(
                "refused a client: no file descriptors left (limit %llu; %llu more refused "
                "and not logged)",
                static_cast<unsigned long long>(limit.rlim_cur),
                static_cast<unsigned long long>(descriptor_refusals_logged_.suppressed()));
        }
    }
    reserve_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
}

Device* Server::find_device(const std::string& name) const {
    return device_named(devices_, name);
}

std::shared_ptr<Context> Server::find_context(const std::string& device, uint64_t token) const {
    for (const auto& session : sessions_) {
        const auto& context = session->shared_context();
        if (context && context->attach_token() == token && context->device().name() == device) {
            return context;
        }
    }
    return nullptr;
}

void Server::end(const std::shared_ptr<Session>& session) {
    const InCase tagged(session->case_tag().get());
    if (const Context* context = session->context()) {
        log_info("client pid %d closed %s", session->peer().pid, context->device().name().c_str());
        if (const DeviceStats* before = session->stats_at_open()) {
            log_info("client pid %d: %s's counters while it was open:%s", session->peer().pid,
                     context->device().name().c_str(),
                     counter_changes(*before, context->device().stats()).c_str());
        }
    }
    wire_.end_traces_of(*session);
    console_.session_ended(*session);
    if (session->refused()) {
        --refused_connections_;
    }
    session->close();
    sessions_.erase(session);
}

std::string Server::status_text() const {
    std::ostringstream out;
    out << "uroced pid " << getpid() << ", " << devices_.size() << " devices\n";
    if (!network_line_.empty()) {
        out << network_line_ << "\n";
    }
    if (engines_text_) {
        out << engines_text_();
    }
    for (const auto& device : devices_) {
        const ibv_port_attr& port = device->port_attr();
        add_device_line(out, *device);
        out << "  port 1 " << ibv_port_state_str(port.state) << " max_mtu " << (128 << port.max_mtu)
            << " active_mtu " << (128 << port.active_mtu) << " link_layer Ethernet\n";
        const std::vector<GidTable::Shown> gids = device->shown_gids();
        for (size_t i = 0; i < gids.size(); ++i) {
            out << "  gid " << i << " " << gid_text(gids[i].gid)
                << (gids[i].type == IBV_GID_TYPE_ROCE_V2 ? " RoCE v2\n" : " RoCE v1\n");
        }
        out << "  objects ";
        add_counts(out, device->counts());
        out << "\n";
        if (device->faults().active()) {
            out << "  faults " << device->faults().text() << "\n";
        }
        if (!device->groups().empty()) {
            out << "  multicast groups " << device->groups().size();
            constexpr size_t kGroupsShown = 8;
            size_t shown = 0;
            for (const auto& [group, attachments] : device->groups()) {
                if (shown++ == kGroupsShown) {
                    out << " ...";
                    break;
                }
                out << " " << group.text();
            }
            out << "\n";
        }
        out << wire_.trace_line(*device);
    }
    size_t tools = 0;
    size_t channels = 0;
    for (const auto& session : sessions_) {
        if (const Context* context = session->context()) {
            out << "client pid " << session->peer().pid << " uid " << session->peer().uid
                << " device " << context->device().name() << " objects ";
            add_counts(out, context->counts());
            out << "\n";
        } else if (session->cm_channel()) {
            ++channels;
        } else {
            ++tools;
        }
    }
    out << "clients " << sessions_.size() - tools - channels << "\n";
    out << console_.status_line();
    out << "limits per client: a quarter of each table: rdma_cm IDs "
        << cm::ConnectionManager::kMaxIdsPerClient << " of " << cm::ConnectionManager::kMaxIds
        << ", multicast joins " << cm::ConnectionManager::kMaxMulticastsPerClient << " of "
        << cm::ConnectionManager::kMaxMulticasts << ", descriptors " << descriptors_.client_share()
        << " of " << descriptors_.budget()
        << " (connections, rdma_cm and completion channels); on each device a quarter of its "
           "QPs, CQs, SRQs, WQs, indirection tables, MRs, MWs, PDs, AHs, XRC domains and "
           "completion channels\n";
    out << "descriptors held for clients " << descriptors_.held() << " of " << descriptors_.budget()
        << "\n";
    out << "rdma_cm channels " << channels << "\n" << cm_.status_text();
    return out.str();
}

uint32_t Server::netlink_port(pid_t pid) {
    auto taken = [this](uint32_t port) {
        return std::any_of(sessions_.begin(), sessions_.end(),
                           [port](const auto& s) { return s->netlink_port() == port; });
    };
    if (!taken(static_cast<uint32_t>(pid))) {
        return static_cast<uint32_t>(pid);
    }
    while (taken(next_netlink_port_) || next_netlink_port_ == 0) {
        --next_netlink_port_;
    }
    return next_netlink_port_--;
}

uint32_t Server::remove_device(const Device& device, const char* why) {
    wire_.device_removed(device);
    return drop_contexts(device, why);
}

uint32_t Server::drop_contexts(const Device& device, const char* why) {
    uint32_t contexts = 0;
    for (const auto& session : sessions_) {
        contexts += session->device_removed(device, why) ? 1 : 0;
    }
    check_findings_.forget(device.name());
    return contexts;
}

Result Server::reset(pid_t caller, const std::string& name, rpc::ResetReply& reply) {
    const auto started = std::chrono::steady_clock::now();
    reply = {};
    for (const auto& device : devices_) {
        if (!name.empty() && device->name() != name) {
            continue;
        }
        reply.contexts += drop_contexts(*device, "the device was reset (uroce reset)");
        if (reset_device_) {
            reset_device_(*device);
        }
        ++reply.devices;
    }
    if (reply.devices == 0) {
        return fail(ENODEV, "no device named %s", name.c_str());
    }
    if (name.empty()) {
        coverage::counts().clear();  // the daemon's, as at its start
        forget_case_maps();
    }
    reply.microseconds =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - started)
                                  .count());
    log_info("client pid %d reset %s: %u context(s) lost theirs, in %llu us", caller,
             name.empty() ? "every device" : name.c_str(), reply.contexts,
             static_cast<unsigned long long>(reply.microseconds));
    return ok();
}

void Server::post_port_event(const Device& device, ibv_event_type type) const {
    for (const auto& session : sessions_) {
        if (const Context* context = session->context(); context && &context->device() == &device) {
            context->post_port_event(type);
        }
    }
}

netlink::NldevView Server::nldev_view() const {
    netlink::NldevView view;
    for (const auto& device : devices_) {
        view.devices.push_back(device.get());
    }
    view.contexts = clients();
    view.cm = &cm_;
    view.add_link = add_link_;
    view.delete_link = delete_link_;
    view.take_posted_work = take_posted_work_;
    return view;
}

ClientList Server::clients() const {
    ClientList clients;
    for (const auto& session : sessions_) {
        if (const Context* context = session->context()) {
            clients.push_back({session->peer().pid, context});
        }
    }
    // In the order they were opened, as the kernel's restrack lists them.
    std::sort(clients.begin(), clients.end(),
              [](const auto& a, const auto& b) { return a.second->id() < b.second->id(); });
    return clients;
}

Result Server::qp_snapshot(const QpSelection& selection, std::string& json_text) const {
    if (!selection.device.empty() && !find_device(selection.device)) {
        return fail(ENODEV, "no device named %s", selection.device.c_str());
    }
    const nlohmann::json snapshot =
        uroce::qp_snapshot(clients(), selection, std::chrono::steady_clock::now());
    if (selection.qpn && snapshot["qps"].empty()) {
        return fail(ENOENT, "%s has no QP %u",
                    selection.device.empty() ? "no device" : selection.device.c_str(),
                    *selection.qpn);
    }
    json_text = snapshot.dump();
    return ok();
}

Result Server::stats_text(const std::string& name, std::string& text) const {
    std::ostringstream out;
    for (const auto& device : devices_) {
        if (name.empty() || device->name() == name) {
            add_device_line(out, *device);
            add_counters(out, device->stats());
        }
    }
    text = out.str();
    if (text.empty()) {
        return fail(ENODEV, "no device named %s", name.c_str());
    }
    if (text.size() >= rpc::kMaxStatsText) {
        return fail(E2BIG, "the counters of %zu devices do not fit in one reply; name a device",
                    devices_.size());
    }
    return ok();
}

}  // namespace uroce
