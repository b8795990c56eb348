// A connection's verbs: the provider's requests on the device context that
// hello opened or attach joined (a forked child's, an importer's), the
// verbs themselves (dispatcher.cpp), and check mode's findings and peer
// questions about its QPs. Session installs one on hello for a device or
// attach.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "protocol/messages.h"
#include "util/result.h"
#include "util/unique_fd.h"
#include "verbs/context.h"

namespace uroce {

class Session;

class VerbsClient {
  public:
    // hello for a device: a context on it, with the async event pipe that
    // came in `fds`.
    static Result open(Session& session, const rpc::HelloRequest& request,
                       std::vector<UniqueFd>& fds, rpc::HelloReply& reply,
                       std::unique_ptr<VerbsClient>& out);
    // attach: a context another connection opened, by its token.
    static Result attach(Session& session, const rpc::AttachRequest& request,
                         std::unique_ptr<VerbsClient>& out);

    VerbsClient(Session& session, std::shared_ptr<Context> context);

    // Null once its device went (device_removed).
    const std::shared_ptr<Context>& context() const { return context_; }
    // The device's counters when the context opened (with a case id only).
    const DeviceStats* stats_at_open() const { return stats_at_open_.get(); }
    // A verb, run with the device's engine paused; answered.
    void verb(const rpc::RequestHeader& header, std::span<const std::byte> body,
              std::vector<UniqueFd>& fds);
    void check_finding(const rpc::RequestHeader& header, std::span<const std::byte> body);
    void check_peer(const rpc::RequestHeader& header, std::span<const std::byte> body);
    // See Session::device_removed.
    bool device_removed(const Device& device, const char* why);
    // The context and its objects go now, while the devices exist.
    void close() { context_.reset(); }

  private:
    // Refuses a request once the context is gone; null then.
    Context* live_context(const rpc::RequestHeader& header, const char* what);

    Session& session_;
    std::shared_ptr<Context> context_;  // shared with forked children that attached
    std::unique_ptr<DeviceStats> stats_at_open_;
    const char* device_gone_ = nullptr;  // why its context's device went, if it did
};

}  // namespace uroce
