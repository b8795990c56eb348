#include "steering/flow_rule.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <optional>

namespace uroce::steering {
namespace {

constexpr uint32_t kKnownFlags = IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS;

// The {type, size} every spec starts with; types read as integers, since an
// application's may be none of the enum's (loading such an enum is undefined).
struct SpecHeader {
    uint32_t type;
    uint16_t size;
};

ParsedRule failed(int error, std::string why) {
    return {error, std::move(why), {}};
}

// The layout size of a supported spec type; 0 for a known type that is not
// supported, -1 for an unknown one.
int spec_size(uint32_t type) {
    switch (type) {
        case IBV_FLOW_SPEC_ETH:
            return sizeof(ibv_flow_spec_eth);
        case IBV_FLOW_SPEC_IPV4:
            return sizeof(ibv_flow_spec_ipv4);
        case IBV_FLOW_SPEC_IPV4_EXT:
            return sizeof(ibv_flow_spec_ipv4_ext);
        case IBV_FLOW_SPEC_IPV6:
            return sizeof(ibv_flow_spec_ipv6);
        case IBV_FLOW_SPEC_TCP:
        case IBV_FLOW_SPEC_UDP:
            return sizeof(ibv_flow_spec_tcp_udp);
        case IBV_FLOW_SPEC_ACTION_DROP:
            return sizeof(ibv_flow_spec_action_drop);
        case IBV_FLOW_SPEC_VXLAN_TUNNEL:
        case IBV_FLOW_SPEC_GRE:
        case IBV_FLOW_SPEC_MPLS:
        case IBV_FLOW_SPEC_ESP:
        case IBV_FLOW_SPEC_ACTION_TAG:
        case IBV_FLOW_SPEC_ACTION_HANDLE:
        case IBV_FLOW_SPEC_ACTION_COUNT:
            return 0;
        default:
            return -1;
    }
}

template <class Spec>
Spec read_spec(const std::byte* at) {
    Spec spec;
    memcpy(&spec, at, sizeof(spec));
    return spec;
}

// As libibverbs reads an IPv4_EXT or IPv6 spec: val and mask each take half
// of what follows the {type, size} header, so a longer (newer) layout moves
// the mask; mask bytes past the `known` filter fields must be 0, or null.
template <class Spec>
std::optional<Spec> read_sized_spec(const std::byte* at, size_t size, size_t known) {
    constexpr size_t header = offsetof(Spec, val);
    const size_t filter = (size - header) / 2;
    const std::byte* mask = at + header + filter;
    for (size_t i = known; i < filter; ++i) {
        if (mask[i] != std::byte{0}) {
            return std::nullopt;
        }
    }
    Spec spec;
    memcpy(&spec, at, header + sizeof(spec.val));
    memcpy(&spec.mask, mask, sizeof(spec.mask));
    return spec;
}

std::string spec_name(unsigned i, uint32_t type) {
    char name[48];
    snprintf(name, sizeof(name), "spec %u (type 0x%x)", i, type);
    return name;
}

// An IPv4 spec is an IPv4_EXT one whose extra fields are unmasked.
ibv_flow_spec_ipv4_ext widen(const ibv_flow_spec_ipv4& v4) {
    ibv_flow_spec_ipv4_ext ext{};
    ext.type = IBV_FLOW_SPEC_IPV4_EXT;
    ext.size = sizeof(ext);
    ext.val.src_ip = v4.val.src_ip;
    ext.val.dst_ip = v4.val.dst_ip;
    ext.mask.src_ip = v4.mask.src_ip;
    ext.mask.dst_ip = v4.mask.dst_ip;
    return ext;
}

template <class T>
bool same(T frame, T val, T mask) {
    return (frame & mask) == (val & mask);
}

bool same_bytes(const uint8_t* frame, const uint8_t* val, const uint8_t* mask, size_t size) {
    for (size_t i = 0; i < size; ++i) {
        if ((frame[i] & mask[i]) != (val[i] & mask[i])) {
            return false;
        }
    }
    return true;
}

bool spec_matches(const ibv_flow_spec_eth& s, const FrameFields& f) {
    if (s.mask.vlan_tag && !f.has_vlan) {
        return false;
    }
    return same_bytes(f.dst_mac.data(), s.val.dst_mac, s.mask.dst_mac, 6) &&
           same_bytes(f.src_mac.data(), s.val.src_mac, s.mask.src_mac, 6) &&
           same<uint16_t>(htons(f.ether_type), s.val.ether_type, s.mask.ether_type) &&
           same<uint16_t>(htons(f.vlan_tag), s.val.vlan_tag, s.mask.vlan_tag);
}

bool spec_matches(const ibv_flow_spec_ipv4_ext& s, const FrameFields& f) {
    return f.ipv4 && same(f.src_ip4, s.val.src_ip, s.mask.src_ip) &&
           same(f.dst_ip4, s.val.dst_ip, s.mask.dst_ip) &&
           same(f.ip_proto, s.val.proto, s.mask.proto) && same(f.tos, s.val.tos, s.mask.tos) &&
           same(f.ttl, s.val.ttl, s.mask.ttl) && same(f.ip_flags, s.val.flags, s.mask.flags);
}

bool spec_matches(const ibv_flow_spec_ipv6& s, const FrameFields& f) {
    return f.ipv6 && same_bytes(f.src_ip6.data(), s.val.src_ip, s.mask.src_ip, 16) &&
           same_bytes(f.dst_ip6.data(), s.val.dst_ip, s.mask.dst_ip, 16) &&
           same<uint32_t>(htonl(f.flow_label), s.val.flow_label, s.mask.flow_label) &&
           same(f.ip_proto, s.val.next_hdr, s.mask.next_hdr) &&
           same(f.tos, s.val.traffic_class, s.mask.traffic_class) &&
           same(f.ttl, s.val.hop_limit, s.mask.hop_limit);
}

bool spec_matches(const ibv_flow_spec_tcp_udp& s, const FrameFields& f) {
    const bool right_protocol = s.type == IBV_FLOW_SPEC_TCP ? f.tcp : f.udp;
    return right_protocol && same(f.src_port, s.val.src_port, s.mask.src_port) &&
           same(f.dst_port, s.val.dst_port, s.mask.dst_port);
}

// The attribute before the specs: known fields and values only. `type` is
// read as the integer it may be: an application can put any value there.
ParsedRule check_flow_attr(std::span<const std::byte> bytes, ibv_flow_attr& attr, uint32_t& type) {
    if (bytes.size() < sizeof(attr)) {
        return failed(EINVAL, "the flow attribute is " + std::to_string(bytes.size()) +
                                  " bytes, shorter than ibv_flow_attr");
    }
    memcpy(&attr, bytes.data(), sizeof(attr));
    memcpy(&type, bytes.data() + offsetof(ibv_flow_attr, type), sizeof(type));
    if (attr.comp_mask) {
        return failed(EINVAL, "unknown flow comp_mask bits");
    }
    if (attr.port != 1) {
        return failed(EINVAL, "port " + std::to_string(attr.port) + " does not exist (ports 1..1)");
    }
    if (attr.flags & ~kKnownFlags) {
        return failed(EINVAL, "unknown flow flags");
    }
    if (attr.flags & IBV_FLOW_ATTR_FLAGS_EGRESS) {
        return failed(EOPNOTSUPP, "egress flows are not supported");
    }
    switch (type) {
        case IBV_FLOW_ATTR_NORMAL:
        case IBV_FLOW_ATTR_ALL_DEFAULT:
        case IBV_FLOW_ATTR_MC_DEFAULT:
        case IBV_FLOW_ATTR_SNIFFER:
            return {};
        default:
            return failed(EINVAL, "flow type " + std::to_string(type) + " is not a type");
    }
}

// The header of spec `index` at `offset`: a supported type whose layout fits
// its size and the bytes given.
ParsedRule check_spec(std::span<const std::byte> bytes, size_t offset, unsigned index,
                      unsigned count, SpecHeader& head) {
    if (offset + sizeof(head) > bytes.size()) {
        return failed(EINVAL, "the flow names " + std::to_string(count) +
                                  " specs, the bytes given hold " + std::to_string(index));
    }
    memcpy(&head, bytes.data() + offset, sizeof(head));
    const std::string which = spec_name(index, head.type);
    if (head.type & IBV_FLOW_SPEC_INNER) {
        return failed(EOPNOTSUPP, which + ": inner (tunnelled) headers are not supported");
    }
    const int size = spec_size(head.type);
    if (size < 0) {
        return failed(EINVAL, which + " is not a flow spec type");
    }
    if (size == 0) {
        return failed(EOPNOTSUPP, which + " is not supported");
    }
    if (head.size < size) {
        return failed(EINVAL, which + " is " + std::to_string(head.size) +
                                  " bytes, shorter than its " + std::to_string(size) +
                                  "-byte layout");
    }
    if (offset + head.size > bytes.size()) {
        return failed(EINVAL, which + " is " + std::to_string(head.size) + " bytes from byte " +
                                  std::to_string(offset) + ", past the end of the " +
                                  std::to_string(bytes.size()) + "-byte flow");
    }
    return {};
}

// Adds the checked spec at `at` to the rule.
ParsedRule add_spec(const std::byte* at, const SpecHeader& head, const std::string& which,
                    FlowRule& rule) {
    switch (head.type) {
        case IBV_FLOW_SPEC_ETH:
            rule.specs.emplace_back(read_spec<ibv_flow_spec_eth>(at));
            return {};
        case IBV_FLOW_SPEC_IPV4:
            rule.specs.emplace_back(widen(read_spec<ibv_flow_spec_ipv4>(at)));
            return {};
        case IBV_FLOW_SPEC_IPV4_EXT: {
            const auto spec = read_sized_spec<ibv_flow_spec_ipv4_ext>(
                at, head.size, sizeof(ibv_flow_ipv4_ext_filter));
            if (!spec) {
                return failed(EOPNOTSUPP, which + " masks fields this device does not know");
            }
            rule.specs.emplace_back(*spec);
            return {};
        }
        case IBV_FLOW_SPEC_IPV6: {
            // Known up to hop_limit: libibverbs counts the padding after it as unknown.
            const auto spec = read_sized_spec<ibv_flow_spec_ipv6>(
                at, head.size, offsetof(ibv_flow_ipv6_filter, hop_limit) + 1);
            if (!spec) {
                return failed(EOPNOTSUPP, which + " masks fields this device does not know");
            }
            rule.specs.emplace_back(*spec);
            return {};
        }
        case IBV_FLOW_SPEC_TCP:
        case IBV_FLOW_SPEC_UDP:
            rule.specs.emplace_back(read_spec<ibv_flow_spec_tcp_udp>(at));
            return {};
        default:  // IBV_FLOW_SPEC_ACTION_DROP
            rule.drop = true;
            return {};
    }
}

}  // namespace

ParsedRule parse_flow_rule(std::span<const std::byte> bytes) {
    ibv_flow_attr attr;
    uint32_t type = 0;
    if (ParsedRule refused = check_flow_attr(bytes, attr, type); refused.error) {
        return refused;
    }
    ParsedRule parsed;
    FlowRule& rule = parsed.rule;
    rule.type = static_cast<ibv_flow_attr_type>(type);
    rule.priority = attr.priority;
    rule.flags = attr.flags;
    size_t offset = sizeof(attr);
    for (unsigned i = 0; i < attr.num_of_specs; ++i) {
        SpecHeader head;
        if (ParsedRule refused = check_spec(bytes, offset, i, attr.num_of_specs, head);
            refused.error) {
            return refused;
        }
        if (ParsedRule refused =
                add_spec(bytes.data() + offset, head, spec_name(i, head.type), rule);
            refused.error) {
            return refused;
        }
        offset += head.size;
    }
    if (rule.type != IBV_FLOW_ATTR_NORMAL && !rule.specs.empty()) {
        return failed(EINVAL, "default and sniffer flows match every frame: they take no specs");
    }
    return parsed;
}

bool matches(const FlowRule& rule, const FrameFields& frame) {
    for (const MatchSpec& spec : rule.specs) {
        if (!std::visit([&](const auto& s) { return spec_matches(s, frame); }, spec)) {
            return false;
        }
    }
    return true;
}

}  // namespace uroce::steering
