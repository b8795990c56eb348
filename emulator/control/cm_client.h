// A connection's rdma_cm: the event channel it opened (or a forked child's
// connection to its parent's channel), and the ucma commands it carries
// (cm/ucma.cpp). Session installs one on rdma_cm open or attach.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "cm/connection_manager.h"
#include "protocol/messages.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

class Session;

class CmClient {
  public:
    // rdma_cm open: a channel, its readiness pipe the one descriptor in `fds`.
    // (The request's case id is the session's by then.)
    static Result open(Session& session, std::vector<UniqueFd>& fds,
                       std::unique_ptr<CmClient>& out);
    // A forked child's connection to the channel its parent opened.
    static Result attach(Session& session, const rpc::CmAttachRequest& request,
                         std::unique_ptr<CmClient>& out);

    CmClient(Session& session, cm::Channel& channel) : session_(session), channel_(&channel) {}
    const cm::Channel& channel() const { return *channel_; }
    // A ucma command on the channel; answered.
    void command(const rpc::RequestHeader& header, std::span<const std::byte> body);
    // The connection ends: the channel loses it (and, with its last, goes).
    void close();

  private:
    Session& session_;
    cm::Channel* channel_;  // owned by the connection manager
};

}  // namespace uroce
