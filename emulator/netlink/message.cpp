#include "netlink/message.h"

#include <stddef.h>
#include <string.h>

namespace uroce::netlink {
namespace {

size_t align(size_t n) {
    return (n + NLA_ALIGNTO - 1) & ~size_t(NLA_ALIGNTO - 1);
}

template <class T>
void append_value(Bytes& bytes, const T& value) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(value));
    memcpy(bytes.data() + at, &value, sizeof(value));
}

Bytes header_only(uint16_t type, uint16_t flags, const nlmsghdr& request, uint32_t port) {
    Bytes out;
    append_value(out, nlmsghdr{0, type, flags, request.nlmsg_seq, port});
    return out;
}

void set_length(Bytes& bytes) {
    const uint32_t length = static_cast<uint32_t>(bytes.size());
    memcpy(bytes.data(), &length, sizeof(length));
}

}  // namespace

MessageWriter::MessageWriter(uint16_t type, uint16_t flags, uint32_t seq, uint32_t port) {
    append_value(bytes_, nlmsghdr{0, type, flags, seq, port});
}

void AttrWriter::put(uint16_t type, const void* data, size_t size) {
    const nlattr attr{static_cast<uint16_t>(NLA_HDRLEN + size), type};
    append_value(bytes_, attr);
    const auto* p = static_cast<const std::byte*>(data);
    bytes_.insert(bytes_.end(), p, p + size);
    bytes_.resize(align(bytes_.size()));
}

void AttrWriter::put_u8(uint16_t type, uint8_t value) {
    put(type, &value, sizeof(value));
}

void AttrWriter::put_u32(uint16_t type, uint32_t value) {
    put(type, &value, sizeof(value));
}

void AttrWriter::put_u64(uint16_t type, uint64_t value) {
    put(type, &value, sizeof(value));
}

void AttrWriter::put_string(uint16_t type, std::string_view value) {
    std::string terminated(value);
    put(type, terminated.c_str(), terminated.size() + 1);
}

void AttrWriter::put_raw(uint16_t type, std::span<const std::byte> value) {
    put(type, value.data(), value.size());
}

size_t AttrWriter::begin_nest(uint16_t type, bool flagged) {
    const size_t start = bytes_.size();
    append_value(bytes_, nlattr{0, static_cast<uint16_t>(flagged ? type | NLA_F_NESTED : type)});
    return start;
}

void AttrWriter::end_nest(size_t start) {
    const uint16_t length = static_cast<uint16_t>(bytes_.size() - start);
    memcpy(bytes_.data() + start, &length, sizeof(length));
}

void AttrWriter::append(std::span<const std::byte> encoded) {
    bytes_.insert(bytes_.end(), encoded.begin(), encoded.end());
}

Bytes MessageWriter::finish() {
    set_length(bytes_);
    return std::move(bytes_);
}

bool Request::u32(uint16_t type, uint32_t& value) const {
    auto it = attrs.find(type);
    if (it == attrs.end() || it->second.size() != sizeof(value)) {
        return false;
    }
    memcpy(&value, it->second.data(), sizeof(value));
    return true;
}

bool Request::string(uint16_t type, std::string& value, size_t max) const {
    auto it = attrs.find(type);
    if (it == attrs.end() || it->second.empty()) {
        return false;
    }
    const auto* text = reinterpret_cast<const char*>(it->second.data());
    const size_t length = strnlen(text, it->second.size());
    if (length == it->second.size() || length > max) {
        return false;  // not terminated within the attribute, or too long
    }
    value.assign(text, length);
    return true;
}

Result parse_messages(std::span<const std::byte> datagram, std::vector<Request>& out) {
    while (!datagram.empty()) {
        Request request;
        if (datagram.size() < sizeof(nlmsghdr)) {
            return fail(EINVAL, "a netlink message of %zu bytes is shorter than its header",
                        datagram.size());
        }
        memcpy(&request.header, datagram.data(), sizeof(nlmsghdr));
        const size_t length = request.header.nlmsg_len;
        if (length < sizeof(nlmsghdr) || length > datagram.size()) {
            return fail(EINVAL, "netlink message length %zu does not fit its %zu bytes", length,
                        datagram.size());
        }
        request.bytes = datagram.first(length);
        auto attrs = datagram.subspan(NLMSG_HDRLEN, length - NLMSG_HDRLEN);
        while (!attrs.empty()) {
            nlattr attr;
            if (attrs.size() < sizeof(attr)) {
                return fail(EINVAL, "a netlink attribute is cut short");
            }
            memcpy(&attr, attrs.data(), sizeof(attr));
            if (attr.nla_len < NLA_HDRLEN || attr.nla_len > attrs.size()) {
                return fail(EINVAL, "netlink attribute %u has length %u",
                            attr.nla_type & NLA_TYPE_MASK, attr.nla_len);
            }
            request.attrs[attr.nla_type & NLA_TYPE_MASK] =
                attrs.subspan(NLA_HDRLEN, attr.nla_len - NLA_HDRLEN);
            attrs = attrs.subspan(std::min(align(attr.nla_len), attrs.size()));
        }
        out.push_back(std::move(request));
        datagram = datagram.subspan(std::min(align(length), datagram.size()));
    }
    return ok();
}

Bytes error_message(const Request& request, int error, uint32_t port, std::string_view why) {
    Bytes out = header_only(NLMSG_ERROR, error ? 0 : NLM_F_CAPPED, request.header, port);
    append_value(out, -error);
    const size_t echoed = error ? request.bytes.size() : sizeof(nlmsghdr);
    out.insert(out.end(), request.bytes.begin(), request.bytes.begin() + echoed);
    out.resize(align(out.size()));
    if (!why.empty()) {
        AttrWriter tlvs;
        tlvs.put_string(NLMSGERR_ATTR_MSG, why);
        out.insert(out.end(), tlvs.bytes().begin(), tlvs.bytes().end());
        const uint16_t flags = (error ? 0 : NLM_F_CAPPED) | NLM_F_ACK_TLVS;
        memcpy(out.data() + offsetof(nlmsghdr, nlmsg_flags), &flags, sizeof(flags));
    }
    set_length(out);
    return out;
}

Bytes done_message(const Request& request, uint32_t port) {
    Bytes out = header_only(NLMSG_DONE, NLM_F_MULTI, request.header, port);
    append_value(out, int32_t{0});
    set_length(out);
    return out;
}

}  // namespace uroce::netlink
