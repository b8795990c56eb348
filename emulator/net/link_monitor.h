// The kernel's news of network interfaces (rtnetlink: RTMGRP_LINK and the
// IPv4 and IPv6 address groups): which interfaces were added, removed or
// changed (MTU, up, carrier, an address) since the last drain. The daemon
// reads each named interface again (link_of, addresses_of) rather than
// trusting the message's fields.
#pragma once

#include <stdint.h>

#include <set>
#include <span>
#include <string>

#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

struct LinkNews {
    std::set<std::string> interfaces;  // by name
    // The kernel dropped messages (the socket overran): every interface
    // must be read again.
    bool all = false;
};

// Adds the interfaces named by the RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR
// and RTM_DELADDR messages in `bytes` (one datagram of the socket) to
// `news` (an address message's interface by its index, as it is now). Messages that do not
// parse end the walk; they change nothing.
void parse_link_messages(std::span<const uint8_t> bytes, LinkNews& news);

class LinkMonitor {
  public:
    Result open();
    int fd() const { return fd_.get(); }
    // What the waiting messages say, at most kMaxDatagrams of them (the
    // rest stay for the next drain).
    LinkNews drain();
    static constexpr unsigned kMaxDatagrams = 64;

  private:
    UniqueFd fd_;
};

}  // namespace uroce
