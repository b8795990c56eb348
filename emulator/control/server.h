// The control socket and its sessions: accepts clients whose credentials
// match the daemon's user, keeps their sessions, and answers what concerns
// the daemon as a whole (status, counters, reset, RDMA netlink's view).
// What the tool does to a device's wire is the wire controls'
// (control/wire_controls.h); the web console is its host's
// (control/console_host.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cm/connection_manager.h"
#include "control/check_findings.h"
#include "control/console_host.h"
#include "control/qp_snapshot.h"
#include "control/wire_controls.h"
#include "device/device.h"
#include "netlink/nldev.h"
#include "protocol/messages.h"
#include "queues/doorbell.h"
#include "util/descriptor_ledger.h"
#include "util/rate_limit.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

class Context;
class Session;

class Server {
  public:
    // `take_posted_work` runs the data plane over what clients have posted.
    Server(boost::asio::io_context& io, const std::filesystem::path& socket_path,
           std::vector<std::unique_ptr<Device>>& devices, const Doorbell& doorbell,
           cm::ConnectionManager& cm, PacketLog& packet_log,
           std::function<void(const Device&)> take_posted_work);
    ~Server();

    Device* find_device(const std::string& name) const;
    const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
    // The open context of `device` whose attach token this is, if any.
    std::shared_ptr<Context> find_context(const std::string& device, uint64_t token) const;
    const Doorbell& doorbell() const { return doorbell_; }
    cm::ConnectionManager& cm() { return cm_; }
    // Before a verb whose answer depends on completions (ibv_resize_cq), the
    // work a client posted before asking is taken, as a kernel's post_send
    // has run by the time the next verb is called.
    void take_posted_work(const Device& device) const { take_posted_work_(device); }
    // What the daemon's descriptors each client holds (util/descriptor_ledger.h).
    DescriptorLedger& descriptors() { return descriptors_; }
    void end(const std::shared_ptr<Session>& session);
    std::string status_text() const;
    // The QPs `selection` names as JSON (control/qp_snapshot.h).
    Result qp_snapshot(const QpSelection& selection, std::string& json_text) const;
    // Check mode's findings, and whether every client is asked to check.
    CheckFindings& check_findings() { return check_findings_; }
    const CheckFindings& check_findings() const { return check_findings_; }
    // Every client with a context, with its pid, in the order they opened.
    ClientList clients() const;

    // The netlink port of a new RDMA netlink socket of `pid`: the pid for
    // the process's first, as the kernel's autobind gives it, else a
    // negative one no other socket holds.
    uint32_t netlink_port(pid_t pid);
    // What RDMA netlink reports on: the devices, the clients' objects, rdma_cm's IDs.
    netlink::NldevView nldev_view() const;
    // How RDMA netlink adds and deletes devices (the daemon's add_link, delete_link).
    void set_link_control(std::function<Result(const std::string&, const std::string&)> add,
                          std::function<Result(const Device&)> remove) {
        add_link_ = std::move(add);
        delete_link_ = std::move(remove);
    }
    // How `uroce reset` returns a device to its state at start (the
    // daemon's reset_device).
    void set_device_reset(std::function<void(Device&)> reset) { reset_device_ = std::move(reset); }
    // How the daemon reaches the network, for status (net/socket_io.h describe).
    void set_network_line(std::string line) { network_line_ = std::move(line); }
    // The engines' lines of uroce status (Engines::status_text).
    void set_engines_text(std::function<std::string()> text) { engines_text_ = std::move(text); }
    // Before a device leaves (`why`): its clients lose their contexts, its
    // trace stops. How many contexts there were.
    uint32_t remove_device(const Device& device, const char* why);
    // Its clients lose their contexts, and its check findings go.
    uint32_t drop_contexts(const Device& device, const char* why);
    // uroce reset (`device` empty: every device).
    Result reset(pid_t caller, const std::string& device, rpc::ResetReply& reply);
    // Every context open on `device` hears a port event.
    void post_port_event(const Device& device, ibv_event_type type) const;

    // `device` empty: every device.
    Result stats_text(const std::string& device, std::string& text) const;
    // Faults, step mode and traces.
    WireControls& wire() { return wire_; }
    ConsoleHost& console() { return console_; }

  private:
    void accept();
    // Out of descriptors: takes the next client with the one held in
    // reserve and answers its hello with EMFILE, so that it hears why.
    void refuse_for_want_of_descriptors();
    void admit(int fd, const ucred& peer);

    boost::asio::io_context& io_;
    std::filesystem::path socket_path_;
    std::function<void(const Device&)> take_posted_work_;
    boost::asio::posix::stream_descriptor listener_;
    std::vector<std::unique_ptr<Device>>& devices_;
    std::set<std::shared_ptr<Session>> sessions_;
    const Doorbell& doorbell_;
    cm::ConnectionManager& cm_;
    uint32_t next_netlink_port_ = static_cast<uint32_t>(-4096);
    std::function<Result(const std::string&, const std::string&)> add_link_;
    std::function<Result(const Device&)> delete_link_;
    std::function<void(Device&)> reset_device_;
    std::string network_line_;
    std::function<std::string()> engines_text_;
    UniqueFd reserve_;  // /dev/null, given up to refuse a client when none are left
    RateLimit descriptor_refusals_logged_{10, 1};
    DescriptorLedger descriptors_;
    // Connections beyond their client's share, waiting to be told so: a few
    // at a time, the rest closed at once.
    static constexpr size_t kMaxRefusedConnections = 16;
    size_t refused_connections_ = 0;
    CheckFindings check_findings_;
    WireControls wire_;
    ConsoleHost console_;
};

}  // namespace uroce
