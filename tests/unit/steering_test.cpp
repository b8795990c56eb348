// Frame parsing, flow rules and the RSS hash of emulator/steering.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <stddef.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "steering/flow_rule.h"
#include "steering/frame.h"
#include "steering/rss_hash.h"

namespace uroce::steering {
namespace {

using Bytes = std::vector<uint8_t>;

std::vector<std::byte> as_frame(const Bytes& b) {
    std::vector<std::byte> out(b.size());
    memcpy(out.data(), b.data(), b.size());
    return out;
}

void append16(Bytes& b, uint16_t v) {
    b.insert(b.end(), {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
}

void append_ip(Bytes& b, int family, const char* address) {
    uint8_t raw[16];
    ASSERT_EQ(inet_pton(family, address, raw), 1) << address;
    b.insert(b.end(), raw, raw + (family == AF_INET ? 4 : 16));
}

// From 02:00:00:00:00:a1 to 02:00:00:00:00:b1, with an 802.1Q tag (priority
// 1, VLAN 5) when asked.
Bytes ethernet(uint16_t ether_type, bool vlan = false) {
    Bytes b = {0x02, 0, 0, 0, 0, 0xb1, 0x02, 0, 0, 0, 0, 0xa1};
    if (vlan) {
        b.insert(b.end(), {0x81, 0x00, 0x20, 0x05});
    }
    append16(b, ether_type);
    return b;
}

// The first 8 bytes of a TCP or UDP header: all that steering looks at.
void append_ports(Bytes& b, uint16_t sport, uint16_t dport) {
    append16(b, sport);
    append16(b, dport);
    b.insert(b.end(), {0, 8, 0, 0});
}

struct Ipv4Frame {
    uint8_t proto = 17;
    const char* src = "10.0.0.1";
    const char* dst = "10.0.0.2";
    uint16_t sport = 1000, dport = 2000;
    bool vlan = false;
    uint16_t fragment = 0;  // offset in 8-byte units
    int option_words = 0;

    std::vector<std::byte> build() const {
        Bytes b = ethernet(0x0800, vlan);
        // TOS 0x10, don't fragment, TTL 64.
        b.insert(b.end(), {static_cast<uint8_t>(0x45 + option_words), 0x10});
        append16(b, static_cast<uint16_t>(20 + option_words * 4 + 8));
        b.insert(b.end(), {0, 0});
        append16(b, static_cast<uint16_t>(0x4000 | fragment));
        b.insert(b.end(), {64, proto, 0, 0});
        append_ip(b, AF_INET, src);
        append_ip(b, AF_INET, dst);
        b.insert(b.end(), option_words * 4, 1);  // NOPs
        append_ports(b, sport, dport);
        return as_frame(b);
    }
};

struct Ipv6Frame {
    uint8_t next_header = 17;
    const char* src = "2001:db8::1";
    const char* dst = "2001:db8::2";
    uint16_t sport = 1000, dport = 2000;

    std::vector<std::byte> build() const {
        Bytes b = ethernet(0x86dd);
        // Traffic class 0xb8, flow label 0x12345, payload 8, hop limit 255.
        b.insert(b.end(), {0x6b, 0x81, 0x23, 0x45, 0, 8, next_header, 255});
        append_ip(b, AF_INET6, src);
        append_ip(b, AF_INET6, dst);
        append_ports(b, sport, dport);
        return as_frame(b);
    }
};

FrameFields fields(const std::vector<std::byte>& frame) {
    const auto f = parse_frame(frame);
    EXPECT_TRUE(f);
    return f.value_or(FrameFields{});
}

uint32_t ip4(const char* address) {
    in_addr a;
    EXPECT_EQ(inet_pton(AF_INET, address, &a), 1);
    return a.s_addr;
}

std::array<uint8_t, 16> ip6(const char* address) {
    std::array<uint8_t, 16> a;
    EXPECT_EQ(inet_pton(AF_INET6, address, a.data()), 1);
    return a;
}

TEST(SteeringFrameTest, PlainFrameHasNoIp) {
    Bytes arp = ethernet(0x0806);
    arp.resize(arp.size() + 28);
    const FrameFields f = fields(as_frame(arp));
    EXPECT_EQ(f.dst_mac, (std::array<uint8_t, 6>{0x02, 0, 0, 0, 0, 0xb1}));
    EXPECT_EQ(f.src_mac, (std::array<uint8_t, 6>{0x02, 0, 0, 0, 0, 0xa1}));
    EXPECT_EQ(f.ether_type, 0x0806);
    EXPECT_FALSE(f.has_vlan || f.ipv4 || f.ipv6 || f.tcp || f.udp);
}

TEST(SteeringFrameTest, Ipv4Udp) {
    const FrameFields f = fields(Ipv4Frame{}.build());
    EXPECT_EQ(f.ether_type, 0x0800);
    EXPECT_FALSE(f.has_vlan);
    ASSERT_TRUE(f.ipv4);
    EXPECT_FALSE(f.ipv6);
    EXPECT_EQ(f.src_ip4, ip4("10.0.0.1"));
    EXPECT_EQ(f.dst_ip4, ip4("10.0.0.2"));
    EXPECT_EQ(f.ip_proto, 17);
    EXPECT_EQ(f.tos, 0x10);
    EXPECT_EQ(f.ttl, 64);
    EXPECT_EQ(f.ip_flags, 2);  // don't fragment
    EXPECT_TRUE(f.udp);
    EXPECT_FALSE(f.tcp);
    EXPECT_EQ(f.src_port, htons(1000));
    EXPECT_EQ(f.dst_port, htons(2000));
}

TEST(SteeringFrameTest, Ipv4TcpAfterOptions) {
    const FrameFields f = fields(Ipv4Frame{.proto = 6, .option_words = 2}.build());
    ASSERT_TRUE(f.ipv4);
    EXPECT_TRUE(f.tcp);
    EXPECT_FALSE(f.udp);
    EXPECT_EQ(f.src_port, htons(1000));
    EXPECT_EQ(f.dst_port, htons(2000));
}

TEST(SteeringFrameTest, VlanTag) {
    const FrameFields f = fields(Ipv4Frame{.vlan = true}.build());
    EXPECT_TRUE(f.has_vlan);
    EXPECT_EQ(f.vlan_tag, 0x2005);
    EXPECT_EQ(f.ether_type, 0x0800);
    EXPECT_TRUE(f.ipv4);
    EXPECT_TRUE(f.udp);
    EXPECT_EQ(f.dst_port, htons(2000));
}

TEST(SteeringFrameTest, LaterFragmentHasNoPorts) {
    const FrameFields later = fields(Ipv4Frame{.fragment = 100}.build());
    ASSERT_TRUE(later.ipv4);
    EXPECT_EQ(later.ip_proto, 17);
    EXPECT_FALSE(later.udp || later.tcp);
    EXPECT_EQ(later.src_port, 0);
    EXPECT_EQ(later.dst_port, 0);
}

TEST(SteeringFrameTest, Ipv6Udp) {
    const FrameFields f = fields(Ipv6Frame{}.build());
    EXPECT_EQ(f.ether_type, 0x86dd);
    ASSERT_TRUE(f.ipv6);
    EXPECT_FALSE(f.ipv4);
    EXPECT_EQ(f.src_ip6, ip6("2001:db8::1"));
    EXPECT_EQ(f.dst_ip6, ip6("2001:db8::2"));
    EXPECT_EQ(f.tos, 0xb8);
    EXPECT_EQ(f.flow_label, 0x12345u);
    EXPECT_EQ(f.ip_proto, 17);
    EXPECT_EQ(f.ttl, 255);
    EXPECT_TRUE(f.udp);
    EXPECT_EQ(f.src_port, htons(1000));
    EXPECT_EQ(f.dst_port, htons(2000));
    // Only the fixed header's next header: a hop-by-hop header hides the ports.
    EXPECT_FALSE(fields(Ipv6Frame{.next_header = 0}.build()).udp);
}

// Every prefix of a frame, each in a buffer of exactly its size (so that a
// sanitizer sees any read past it): only the whole headers are reported.
TEST(SteeringFrameTest, TruncatedFramesKeepWhatIsWhole) {
    struct Case {
        std::vector<std::byte> frame;
        size_t ethernet, ip;
    };
    const Case cases[] = {
        {Ipv4Frame{}.build(), 14, 20},
        {Ipv4Frame{.proto = 6, .vlan = true}.build(), 18, 20},
        {Ipv4Frame{.option_words = 1}.build(), 14, 24},
        {Ipv6Frame{}.build(), 14, 40},
    };
    for (const Case& c : cases) {
        for (size_t n = 0; n <= c.frame.size(); ++n) {
            const std::vector<std::byte> prefix(c.frame.begin(), c.frame.begin() + n);
            const auto f = parse_frame(prefix);
            ASSERT_EQ(f.has_value(), n >= c.ethernet) << n;
            if (!f) {
                continue;
            }
            EXPECT_EQ(f->ipv4 || f->ipv6, n >= c.ethernet + c.ip) << n;
            EXPECT_EQ(f->tcp || f->udp, n >= c.ethernet + c.ip + 4) << n;
        }
    }
}

// Lays out an attribute and its specs as ibv_create_flow(3) takes them.
struct FlowBytes {
    ibv_flow_attr attr{};
    std::vector<std::byte> specs;

    FlowBytes() { attr.port = 1; }
    template <class Spec>
    FlowBytes& add(const Spec& spec) {
        const auto* p = reinterpret_cast<const std::byte*>(&spec);
        specs.insert(specs.end(), p, p + sizeof(spec));
        ++attr.num_of_specs;
        attr.size = static_cast<uint16_t>(sizeof(attr) + specs.size());
        return *this;
    }
    std::vector<std::byte> bytes() const {
        std::vector<std::byte> out(sizeof(attr));
        memcpy(out.data(), &attr, sizeof(attr));
        out.insert(out.end(), specs.begin(), specs.end());
        return out;
    }
    ParsedRule parse() const { return parse_flow_rule(bytes()); }
};

// A spec of `type` matching anything, padding included zeroed.
template <class Spec>
Spec spec(uint32_t type) {
    Spec s;
    memset(&s, 0, sizeof(s));
    s.type = static_cast<ibv_flow_spec_type>(type);
    s.size = sizeof(s);
    return s;
}

template <class Spec>
FlowRule rule_of(const Spec& s) {
    const ParsedRule parsed = FlowBytes().add(s).parse();
    EXPECT_EQ(parsed.error, 0) << parsed.why;
    return parsed.rule;
}

TEST(SteeringFlowRuleTest, ParsesAttributeAndSpecs) {
    FlowBytes flow;
    flow.attr.priority = 3;
    flow.attr.flags = IBV_FLOW_ATTR_FLAGS_DONT_TRAP;
    flow.add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH))
        .add(spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4))
        .add(spec<ibv_flow_spec_tcp_udp>(IBV_FLOW_SPEC_TCP));
    const ParsedRule parsed = flow.parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_EQ(parsed.rule.type, IBV_FLOW_ATTR_NORMAL);
    EXPECT_EQ(parsed.rule.priority, 3);
    EXPECT_EQ(parsed.rule.flags, uint32_t{IBV_FLOW_ATTR_FLAGS_DONT_TRAP});
    EXPECT_FALSE(parsed.rule.drop);
    EXPECT_EQ(parsed.rule.specs.size(), 3u);
}

TEST(SteeringFlowRuleTest, EthMatchesUnderMasks) {
    auto eth = spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH);
    eth.val.dst_mac[5] = 0xb1;
    eth.mask.dst_mac[5] = 0xff;
    eth.val.src_mac[5] = 0xa3;  // the mask keeps only the top bits: 0xa0
    eth.mask.src_mac[5] = 0xf0;
    eth.val.ether_type = htons(0x0800);
    eth.mask.ether_type = 0xffff;
    const FrameFields v4 = fields(Ipv4Frame{}.build());
    EXPECT_TRUE(matches(rule_of(eth), v4));
    EXPECT_TRUE(matches(rule_of(eth), fields(Ipv4Frame{.vlan = true}.build())));
    EXPECT_FALSE(matches(rule_of(eth), fields(Ipv6Frame{}.build())));
    auto other = eth;
    other.val.dst_mac[5] = 0xb2;
    EXPECT_FALSE(matches(rule_of(other), v4));
    other = eth;
    other.val.src_mac[5] = 0xb1;
    EXPECT_FALSE(matches(rule_of(other), v4));
}

TEST(SteeringFlowRuleTest, EthVlanSpecNeedsATaggedFrame) {
    auto eth = spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH);
    eth.val.vlan_tag = htons(5);
    eth.mask.vlan_tag = htons(0x0fff);
    const FlowRule rule = rule_of(eth);
    EXPECT_TRUE(matches(rule, fields(Ipv4Frame{.vlan = true}.build())));
    EXPECT_FALSE(matches(rule, fields(Ipv4Frame{}.build())));
    eth.val.vlan_tag = htons(6);
    EXPECT_FALSE(matches(rule_of(eth), fields(Ipv4Frame{.vlan = true}.build())));
}

TEST(SteeringFlowRuleTest, Ipv4MatchesUnderMasks) {
    auto v4 = spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4);
    v4.val.dst_ip = ip4("10.0.0.255");  // the host part is outside the mask
    v4.mask.dst_ip = htonl(0xffffff00);
    v4.val.src_ip = ip4("10.0.0.1");
    v4.mask.src_ip = 0xffffffff;
    EXPECT_TRUE(matches(rule_of(v4), fields(Ipv4Frame{}.build())));
    EXPECT_FALSE(matches(rule_of(v4), fields(Ipv4Frame{.dst = "10.0.1.2"}.build())));
    EXPECT_FALSE(matches(rule_of(v4), fields(Ipv4Frame{.src = "10.0.0.3"}.build())));
    EXPECT_FALSE(matches(rule_of(spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4)),
                         fields(Ipv6Frame{}.build())));
}

TEST(SteeringFlowRuleTest, Ipv4ExtMatchesProtocolTosTtlFlags) {
    auto ext = spec<ibv_flow_spec_ipv4_ext>(IBV_FLOW_SPEC_IPV4_EXT);
    ext.val.proto = 17;
    ext.mask.proto = 0xff;
    ext.val.tos = 0x10;
    ext.mask.tos = 0xff;
    ext.val.ttl = 64;
    ext.mask.ttl = 0xff;
    ext.val.flags = 2;
    ext.mask.flags = 7;
    const FrameFields udp = fields(Ipv4Frame{}.build());
    EXPECT_TRUE(matches(rule_of(ext), udp));
    EXPECT_FALSE(matches(rule_of(ext), fields(Ipv4Frame{.proto = 6}.build())));
    auto other = ext;
    other.val.tos = 0x20;
    EXPECT_FALSE(matches(rule_of(other), udp));
    other = ext;
    other.val.ttl = 63;
    EXPECT_FALSE(matches(rule_of(other), udp));
    other = ext;
    other.val.flags = 4;  // more fragments: the kernel's encoding, not the header's
    EXPECT_FALSE(matches(rule_of(other), udp));
    other.mask.flags = 1;  // a bit neither encoding uses, clear in both
    EXPECT_TRUE(matches(rule_of(other), udp));
    // A first fragment with more to come (MF is 0x2000 of the header's word).
    const FrameFields first = fields(Ipv4Frame{.fragment = 0x2000}.build());
    EXPECT_EQ(first.ip_flags, 0x2 | 0x4);
    other = ext;
    other.val.flags = other.mask.flags = 4;
    EXPECT_TRUE(matches(rule_of(other), first));
    EXPECT_FALSE(matches(rule_of(other), udp));
}

TEST(SteeringFlowRuleTest, Ipv6MatchesUnderMasks) {
    auto v6 = spec<ibv_flow_spec_ipv6>(IBV_FLOW_SPEC_IPV6);
    const auto src = ip6("2001:db8::ffff");  // the mask keeps its /64 prefix
    memcpy(v6.val.src_ip, src.data(), 16);
    memset(v6.mask.src_ip, 0xff, 8);
    const auto dst = ip6("2001:db8::2");
    memcpy(v6.val.dst_ip, dst.data(), 16);
    memset(v6.mask.dst_ip, 0xff, 16);
    v6.val.flow_label = htonl(0x12345);
    v6.mask.flow_label = htonl(0xfffff);
    v6.val.next_hdr = 17;
    v6.mask.next_hdr = 0xff;
    v6.val.traffic_class = 0xb8;
    v6.mask.traffic_class = 0xff;
    v6.val.hop_limit = 255;
    v6.mask.hop_limit = 0xff;
    const FrameFields f = fields(Ipv6Frame{}.build());
    EXPECT_TRUE(matches(rule_of(v6), f));
    EXPECT_FALSE(matches(rule_of(v6), fields(Ipv6Frame{.src = "2001:db9::1"}.build())));
    EXPECT_FALSE(matches(rule_of(v6), fields(Ipv6Frame{.dst = "2001:db8::3"}.build())));
    EXPECT_FALSE(matches(rule_of(v6), fields(Ipv6Frame{.next_header = 6}.build())));
    auto other = v6;
    other.val.flow_label = htonl(0x12346);
    EXPECT_FALSE(matches(rule_of(other), f));
    other = v6;
    other.val.traffic_class = 0;
    EXPECT_FALSE(matches(rule_of(other), f));
    other = v6;
    other.val.hop_limit = 1;
    EXPECT_FALSE(matches(rule_of(other), f));
    EXPECT_FALSE(matches(rule_of(spec<ibv_flow_spec_ipv6>(IBV_FLOW_SPEC_IPV6)),
                         fields(Ipv4Frame{}.build())));
}

TEST(SteeringFlowRuleTest, TcpUdpMatchPortsOfTheirOwnProtocol) {
    auto udp = spec<ibv_flow_spec_tcp_udp>(IBV_FLOW_SPEC_UDP);
    udp.val.dst_port = htons(2000);
    udp.mask.dst_port = 0xffff;
    udp.val.src_port = htons(1000 | 0xf);  // the low bits are outside the mask
    udp.mask.src_port = htons(0xfff0);
    EXPECT_TRUE(matches(rule_of(udp), fields(Ipv4Frame{}.build())));
    EXPECT_TRUE(matches(rule_of(udp), fields(Ipv6Frame{}.build())));
    EXPECT_FALSE(matches(rule_of(udp), fields(Ipv4Frame{.dport = 2001}.build())));
    EXPECT_FALSE(matches(rule_of(udp), fields(Ipv4Frame{.sport = 1100}.build())));
    EXPECT_FALSE(matches(rule_of(udp), fields(Ipv4Frame{.fragment = 100}.build())));
    auto tcp = udp;
    tcp.type = IBV_FLOW_SPEC_TCP;
    EXPECT_FALSE(matches(rule_of(tcp), fields(Ipv4Frame{}.build())));
    EXPECT_TRUE(matches(rule_of(tcp), fields(Ipv4Frame{.proto = 6}.build())));
    // Even with nothing masked the protocol must be the spec's.
    EXPECT_FALSE(matches(rule_of(spec<ibv_flow_spec_tcp_udp>(IBV_FLOW_SPEC_TCP)),
                         fields(Ipv6Frame{}.build())));
}

TEST(SteeringFlowRuleTest, EverySpecMustMatch) {
    auto eth = spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH);
    eth.val.dst_mac[5] = 0xb1;
    eth.mask.dst_mac[5] = 0xff;
    auto v4 = spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4);
    v4.val.dst_ip = ip4("10.0.0.2");
    v4.mask.dst_ip = 0xffffffff;
    auto udp = spec<ibv_flow_spec_tcp_udp>(IBV_FLOW_SPEC_UDP);
    udp.val.dst_port = htons(2000);
    udp.mask.dst_port = 0xffff;
    const ParsedRule parsed = FlowBytes().add(eth).add(v4).add(udp).parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(matches(parsed.rule, fields(Ipv4Frame{}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv4Frame{.dst = "10.0.0.3"}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv4Frame{.dport = 2001}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv4Frame{.proto = 6}.build())));
}

TEST(SteeringFlowRuleTest, DefaultAndSnifferRulesMatchEveryFrame) {
    for (ibv_flow_attr_type type :
         {IBV_FLOW_ATTR_ALL_DEFAULT, IBV_FLOW_ATTR_MC_DEFAULT, IBV_FLOW_ATTR_SNIFFER}) {
        FlowBytes flow;
        flow.attr.type = type;
        flow.attr.size = sizeof(flow.attr);
        const ParsedRule parsed = flow.parse();
        ASSERT_EQ(parsed.error, 0) << parsed.why;
        EXPECT_EQ(parsed.rule.type, type);
        EXPECT_TRUE(matches(parsed.rule, fields(Ipv4Frame{}.build())));
        EXPECT_TRUE(matches(parsed.rule, fields(Ipv6Frame{}.build())));
        // They match every frame: a match spec has no place in them.
        EXPECT_EQ(flow.add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH)).parse().error, EINVAL);
    }
}

TEST(SteeringFlowRuleTest, DropActionIsNoMatchSpec) {
    const ParsedRule parsed =
        FlowBytes().add(spec<ibv_flow_spec_action_drop>(IBV_FLOW_SPEC_ACTION_DROP)).parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(parsed.rule.drop);
    EXPECT_TRUE(parsed.rule.specs.empty());
}

TEST(SteeringFlowRuleTest, MalformedAttributesAreInvalid) {
    FlowBytes good;
    good.add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH));
    const std::vector<std::byte> bytes = good.bytes();
    for (size_t n : {size_t{0}, size_t{10}, sizeof(ibv_flow_attr) - 1}) {
        EXPECT_EQ(parse_flow_rule(std::span(bytes).first(n)).error, EINVAL) << n;
    }
    auto with = [&](auto change) {
        FlowBytes bad = good;
        change(bad.attr);
        return bad.parse();
    };
    EXPECT_EQ(with([](ibv_flow_attr& a) { a.comp_mask = 1; }).error, EINVAL);
    EXPECT_EQ(with([](ibv_flow_attr& a) { a.port = 0; }).error, EINVAL);
    EXPECT_EQ(with([](ibv_flow_attr& a) { a.port = 2; }).error, EINVAL);
    EXPECT_EQ(with([](ibv_flow_attr& a) { a.flags = 1; }).error, EINVAL);
    EXPECT_EQ(
        with([](ibv_flow_attr& a) { a.flags = 1 << 3 | IBV_FLOW_ATTR_FLAGS_DONT_TRAP; }).error,
        EINVAL);
    // None of the enum's values, so written as the integer it is.
    const uint32_t unknown_type = 4;
    EXPECT_EQ(with([&](ibv_flow_attr& a) {
                  memcpy(reinterpret_cast<std::byte*>(&a) + offsetof(ibv_flow_attr, type),
                         &unknown_type, sizeof(unknown_type));
              }).error,
              EINVAL);
    EXPECT_EQ(with([](ibv_flow_attr& a) { a.flags = IBV_FLOW_ATTR_FLAGS_EGRESS; }).error,
              EOPNOTSUPP);
    EXPECT_EQ(good.parse().error, 0);
}

TEST(SteeringFlowRuleTest, SpecsMustFitTheirLayoutAndTheBytes) {
    FlowBytes good;
    good.add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH))
        .add(spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4));
    const std::vector<std::byte> bytes = good.bytes();
    ASSERT_EQ(parse_flow_rule(bytes).error, 0);

    FlowBytes more = good;
    more.attr.num_of_specs = 3;  // more specs than the bytes hold
    ParsedRule parsed = more.parse();
    EXPECT_EQ(parsed.error, EINVAL);
    EXPECT_EQ(parsed.why, "the flow names 3 specs, the bytes given hold 2");
    // The last spec cut short, then its header cut short.
    EXPECT_EQ(parse_flow_rule(std::span(bytes).first(bytes.size() - 1)).error, EINVAL);
    const size_t second = sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth);
    EXPECT_EQ(parse_flow_rule(std::span(bytes).first(second + 4)).error, EINVAL);

    // A size field below the type's layout, or past the end.
    auto v4 = spec<ibv_flow_spec_ipv4>(IBV_FLOW_SPEC_IPV4);
    v4.size = 8;
    parsed = FlowBytes().add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH)).add(v4).parse();
    EXPECT_EQ(parsed.error, EINVAL);
    EXPECT_EQ(parsed.why, "spec 1 (type 0x30) is 8 bytes, shorter than its 24-byte layout");
    v4.size = sizeof(v4) + 4;
    EXPECT_EQ(FlowBytes().add(v4).parse().error, EINVAL);
    // Just the {type, size} header: the whole of a drop action, short of the rest.
    for (uint32_t type : {IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4_EXT, IBV_FLOW_SPEC_IPV6,
                          IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP}) {
        EXPECT_EQ(FlowBytes().add(spec<ibv_flow_spec_action_drop>(type)).parse().error, EINVAL)
            << std::hex << type;
    }
    auto empty = spec<ibv_flow_spec_action_drop>(IBV_FLOW_SPEC_ACTION_DROP);
    empty.size = 0;  // would never get to the next spec
    EXPECT_EQ(FlowBytes().add(empty).parse().error, EINVAL);
}

TEST(SteeringFlowRuleTest, UnsupportedAndUnknownSpecTypes) {
    for (uint32_t type :
         {IBV_FLOW_SPEC_VXLAN_TUNNEL, IBV_FLOW_SPEC_GRE, IBV_FLOW_SPEC_MPLS, IBV_FLOW_SPEC_ESP,
          IBV_FLOW_SPEC_ACTION_TAG, IBV_FLOW_SPEC_ACTION_HANDLE, IBV_FLOW_SPEC_ACTION_COUNT}) {
        // As large as the largest spec here, so that only the type is wrong.
        const auto s = spec<ibv_flow_spec_ipv6>(type);
        EXPECT_EQ(FlowBytes().add(s).parse().error, EOPNOTSUPP) << std::hex << type;
    }
    for (uint32_t type : {IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV4_EXT,
                          IBV_FLOW_SPEC_IPV6, IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP}) {
        const auto inner = spec<ibv_flow_spec_ipv6>(type | IBV_FLOW_SPEC_INNER);
        EXPECT_EQ(FlowBytes().add(inner).parse().error, EOPNOTSUPP) << std::hex << type;
    }
    for (uint32_t type : {0u, 0x21u, 0x33u, 0x42u, 0x77u, 0x1004u}) {
        const auto unknown = spec<ibv_flow_spec_ipv6>(type);
        const ParsedRule parsed = FlowBytes().add(unknown).parse();
        EXPECT_EQ(parsed.error, EINVAL) << std::hex << type;
        EXPECT_FALSE(parsed.why.empty());
    }
}

// libibverbs finds the specs by their own sizes and never reads attr.size.
TEST(SteeringFlowRuleTest, AttrSizeIsNotRead) {
    FlowBytes flow;
    flow.add(spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH));
    for (uint16_t size : {uint16_t{0}, uint16_t{sizeof(ibv_flow_attr)}, uint16_t{0xffff}}) {
        flow.attr.size = size;
        EXPECT_EQ(flow.parse().error, 0) << size;
    }
}

// A spec as a newer libibverbs could lay it out: a filter 8 bytes longer.
template <class Filter>
struct LongerSpec {
    uint32_t type;
    uint16_t size;
    uint16_t reserved;
    uint8_t val[sizeof(Filter) + 8], mask[sizeof(Filter) + 8];

    explicit LongerSpec(uint32_t spec_type) {
        memset(this, 0, sizeof(*this));
        type = spec_type;
        size = sizeof(*this);
    }
};

// Longer specs: an ETH spec's extra bytes are skipped; IPv4_EXT and IPv6 ones
// are read as libibverbs reads them, the mask after a val of half the rest,
// and refused when they mask bytes past the fields known.
TEST(SteeringFlowRuleTest, LongerSpecsAsLibibverbsReadsThem) {
    struct {
        ibv_flow_spec_eth eth;
        uint8_t extra[8];
    } eth{spec<ibv_flow_spec_eth>(IBV_FLOW_SPEC_ETH), {0xff, 0xff}};
    eth.eth.size = sizeof(eth);
    eth.eth.val.dst_mac[5] = 0xb1;
    eth.eth.mask.dst_mac[5] = 0xff;
    FlowBytes flow;
    flow.add(eth).add(spec<ibv_flow_spec_tcp_udp>(IBV_FLOW_SPEC_UDP));
    ParsedRule parsed = flow.parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    ASSERT_EQ(parsed.rule.specs.size(), 2u);
    EXPECT_TRUE(matches(parsed.rule, fields(Ipv4Frame{}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv4Frame{.proto = 6}.build())));

    LongerSpec<ibv_flow_ipv6_filter> v6(IBV_FLOW_SPEC_IPV6);
    static_assert(offsetof(decltype(v6), val) == offsetof(ibv_flow_spec_ipv6, val));
    const auto dst6 = ip6("2001:db8::2");
    memcpy(v6.val + offsetof(ibv_flow_ipv6_filter, dst_ip), dst6.data(), 16);
    memset(v6.mask + offsetof(ibv_flow_ipv6_filter, dst_ip), 0xff, 16);
    parsed = FlowBytes().add(v6).parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(matches(parsed.rule, fields(Ipv6Frame{}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv6Frame{.dst = "2001:db8::3"}.build())));
    v6.mask[sizeof(v6.mask) - 1] = 1;
    EXPECT_EQ(FlowBytes().add(v6).parse().error, EOPNOTSUPP);

    LongerSpec<ibv_flow_ipv4_ext_filter> v4(IBV_FLOW_SPEC_IPV4_EXT);
    const uint32_t dst4 = ip4("10.0.0.2");
    memcpy(v4.val + offsetof(ibv_flow_ipv4_ext_filter, dst_ip), &dst4, 4);
    memset(v4.mask + offsetof(ibv_flow_ipv4_ext_filter, dst_ip), 0xff, 4);
    parsed = FlowBytes().add(v4).parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(matches(parsed.rule, fields(Ipv4Frame{}.build())));
    EXPECT_FALSE(matches(parsed.rule, fields(Ipv4Frame{.dst = "10.0.0.3"}.build())));
    v4.mask[sizeof(ibv_flow_ipv4_ext_filter)] = 1;
    EXPECT_EQ(FlowBytes().add(v4).parse().error, EOPNOTSUPP);

    // The padding byte after hop_limit is no field either, as for libibverbs.
    auto padded = spec<ibv_flow_spec_ipv6>(IBV_FLOW_SPEC_IPV6);
    reinterpret_cast<uint8_t*>(&padded.mask)[sizeof(padded.mask) - 1] = 1;
    EXPECT_EQ(FlowBytes().add(padded).parse().error, EOPNOTSUPP);
}

// The key of the Microsoft RSS verification suite.
const Bytes kKey = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                    0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                    0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                    0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// One row of the specification's tables ("Verifying the RSS Hash
// Calculation"): the hash of the addresses, then with the ports too.
struct RssVector {
    const char* src;
    uint16_t sport;
    const char* dst;
    uint16_t dport;
    uint32_t addresses_only;
    uint32_t with_ports;
};

const RssVector kIpv4Vectors[] = {
    {"66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e8fc2, 0x51ccc178},
    {"199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718262a, 0xc626b0ea},
    {"24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0a5de, 0x5c2b394a},
    {"38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xafc7327f},
    {"153.39.163.191", 44251, "202.188.127.2", 1303, 0x5d1809c5, 0x10e828a2},
};

const RssVector kIpv6Vectors[] = {
    {"3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x2cc18cd5, 0x40207d3d},
    {"3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0x0f0c461c, 0xdde51bbf},
    {"3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, "fe80::200:f8ff:fe21:67cf", 38024, 0x4b61e985,
     0x02d1feef},
};

// Source address, destination address, source port, destination port.
Bytes hash_input(int family, const RssVector& v, bool ports) {
    Bytes in;
    append_ip(in, family, v.src);
    append_ip(in, family, v.dst);
    if (ports) {
        append16(in, v.sport);
        append16(in, v.dport);
    }
    return in;
}

TEST(SteeringRssHashTest, ToeplitzMatchesTheMicrosoftIpv4Vectors) {
    for (const RssVector& v : kIpv4Vectors) {
        EXPECT_EQ(toeplitz_hash(kKey, hash_input(AF_INET, v, false)), v.addresses_only) << v.src;
        EXPECT_EQ(toeplitz_hash(kKey, hash_input(AF_INET, v, true)), v.with_ports) << v.src;
    }
}

TEST(SteeringRssHashTest, ToeplitzMatchesTheMicrosoftIpv6Vectors) {
    for (const RssVector& v : kIpv6Vectors) {
        EXPECT_EQ(toeplitz_hash(kKey, hash_input(AF_INET6, v, false)), v.addresses_only) << v.src;
        EXPECT_EQ(toeplitz_hash(kKey, hash_input(AF_INET6, v, true)), v.with_ports) << v.src;
    }
}

TEST(SteeringRssHashTest, ShortKeysEndInZeros) {
    // 8 input bytes need 12 key bytes: the rest of the key is never read.
    const RssVector& v = kIpv4Vectors[0];
    EXPECT_EQ(toeplitz_hash(std::span(kKey).first(12), hash_input(AF_INET, v, false)),
              v.addresses_only);
    Bytes padded(40, 0);
    std::copy_n(kKey.begin(), 6, padded.begin());
    EXPECT_EQ(toeplitz_hash(std::span(kKey).first(6), hash_input(AF_INET, v, true)),
              toeplitz_hash(padded, hash_input(AF_INET, v, true)));
}

// The specification's rows again, from frames as they arrive.
TEST(SteeringRssHashTest, FramesHashAsTheVectors) {
    constexpr uint64_t kTcp4 = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
                               IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;
    for (const RssVector& v : kIpv4Vectors) {
        const FrameFields f = fields(
            Ipv4Frame{.proto = 6, .src = v.src, .dst = v.dst, .sport = v.sport, .dport = v.dport}
                .build());
        EXPECT_EQ(toeplitz_hash(kKey, rss_hash_input(f, kTcp4)), v.with_ports) << v.src;
        EXPECT_EQ(
            toeplitz_hash(kKey, rss_hash_input(f, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4)),
            v.addresses_only)
            << v.src;
    }
    constexpr uint64_t kUdp6 = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 |
                               IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
    for (const RssVector& v : kIpv6Vectors) {
        const FrameFields f = fields(
            Ipv6Frame{.src = v.src, .dst = v.dst, .sport = v.sport, .dport = v.dport}.build());
        EXPECT_EQ(toeplitz_hash(kKey, rss_hash_input(f, kUdp6)), v.with_ports) << v.src;
    }
}

TEST(SteeringRssHashTest, InputTakesOnlyTheChosenFieldsPresent) {
    const FrameFields f = fields(Ipv4Frame{.sport = 0x1234, .dport = 0x5678}.build());
    EXPECT_EQ(rss_hash_input(f, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_PORT_UDP),
              (Bytes{10, 0, 0, 1, 0x56, 0x78}));
    EXPECT_EQ(rss_hash_input(f, IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_PORT_UDP),
              (Bytes{10, 0, 0, 2, 0x12, 0x34}));
    // TCP ports of a UDP frame, and IPv6 addresses of an IPv4 one, are absent.
    EXPECT_TRUE(rss_hash_input(f, IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                      IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6)
                    .empty());
    // As are the ports of a later fragment.
    const FrameFields later = fields(Ipv4Frame{.fragment = 100}.build());
    EXPECT_EQ(rss_hash_input(later, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_SRC_PORT_UDP),
              (Bytes{10, 0, 0, 1}));
    const FrameFields v6 = fields(Ipv6Frame{}.build());
    EXPECT_TRUE(rss_hash_input(v6, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4).empty());
    EXPECT_EQ(rss_hash_input(v6, IBV_RX_HASH_DST_IPV6).size(), 16u);
}

}  // namespace
}  // namespace uroce::steering
