// Netlink messages as the kernel builds and parses them (include/net/netlink.h):
// a header, then attributes, each 4-byte aligned. Pure encoding and decoding;
// what the RDMA messages mean is in nldev.cpp.
#pragma once

#include <linux/netlink.h>
#include <stdint.h>

#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace uroce::netlink {

using Bytes = std::vector<std::byte>;

// Attributes, each 4-byte aligned (nla_put and friends).
class AttrWriter {
  public:
    void put_u8(uint16_t type, uint8_t value);
    void put_u32(uint16_t type, uint32_t value);
    void put_u64(uint16_t type, uint64_t value);
    void put_string(uint16_t type, std::string_view value);  // NUL-terminated
    void put_raw(uint16_t type, std::span<const std::byte> value);
    // `flagged`: with NLA_F_NESTED, as nla_nest_start sets it (and
    // nla_nest_start_noflag, which most of nldev.c uses, does not).
    size_t begin_nest(uint16_t type, bool flagged = false);
    void end_nest(size_t start);
    // Attributes another AttrWriter encoded.
    void append(std::span<const std::byte> encoded);
    size_t size() const { return bytes_.size(); }
    const Bytes& bytes() const { return bytes_; }

  protected:
    Bytes bytes_;

  private:
    void put(uint16_t type, const void* data, size_t size);
};

// One message: a header, then attributes.
class MessageWriter : public AttrWriter {
  public:
    MessageWriter(uint16_t type, uint16_t flags, uint32_t seq, uint32_t port);
    Bytes finish();  // sets nlmsg_len
};

// One received message: its header and its top-level attributes by type
// (the last one wins when a type repeats, as nla_parse's table does).
struct Request {
    nlmsghdr header{};
    std::span<const std::byte> bytes;  // the whole message, header included
    std::map<uint16_t, std::span<const std::byte>> attrs;

    bool has(uint16_t type) const { return attrs.count(type) != 0; }
    // The attribute as a number or string: false when absent or of the wrong size.
    bool u32(uint16_t type, uint32_t& value) const;
    // A NUL-terminated string of at most `max` bytes before the NUL (NLA_NUL_STRING).
    bool string(uint16_t type, std::string& value, size_t max) const;
};

// Splits a datagram into its messages. Fails with EINVAL for a header or
// attribute whose length does not fit (nlmsg_ok, nla_ok): nothing of a
// malformed datagram is answered.
Result parse_messages(std::span<const std::byte> datagram, std::vector<Request>& out);

// NLMSG_ERROR for `request`: error 0 is the ACK. An error carries the
// request's header and payload, an ACK only its header (the kernel's
// netlink_ack without NETLINK_CAP_ACK), and `why`, when given, as the
// extended ACK's message (NLMSGERR_ATTR_MSG, which `rdma` prints).
Bytes error_message(const Request& request, int error, uint32_t port, std::string_view why = {});
// NLMSG_DONE that ends a dump.
Bytes done_message(const Request& request, uint32_t port);

}  // namespace uroce::netlink
