// Frame parsing, flow rules and the RSS hash of emulator/steering.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <string.h>

#include <vector>

#include "steering/flow_rule.h"
#include "steering/frame.h"
#include "steering/rss_hash.h"

namespace uroce::steering {
namespace {

// The key of the Microsoft RSS verification suite.
const std::vector<uint8_t> kKey = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                   0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                   0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                   0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

std::vector<uint8_t> ipv4_input(const char* src, const char* dst, int sport, int dport) {
    std::vector<uint8_t> in(8);
    inet_pton(AF_INET, src, in.data());
    inet_pton(AF_INET, dst, in.data() + 4);
    if (sport >= 0) {
        in.insert(in.end(), {static_cast<uint8_t>(sport >> 8), static_cast<uint8_t>(sport),
                             static_cast<uint8_t>(dport >> 8), static_cast<uint8_t>(dport)});
    }
    return in;
}

struct RssVector {
    const char* src;
    int sport;
    const char* dst;
    int dport;
    uint32_t ip_only;
    uint32_t with_ports;
};

// The published IPv4 table of the Microsoft RSS specification.
TEST(SteeringRssHashTest, ToeplitzMatchesTheMicrosoftIpv4Vectors) {
    const RssVector vectors[] = {
        {"66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e8fc2, 0x51ccc178},
        {"199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718262a, 0xc626b0ea},
        {"24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0a5de, 0x5c2b394a},
        {"38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xafc7327f},
        {"153.39.163.191", 44251, "202.188.127.2", 1303, 0x5d1809c5, 0x10e828a2},
    };
    for (const RssVector& v : vectors) {
        EXPECT_EQ(toeplitz_hash(kKey, ipv4_input(v.src, v.dst, -1, 0)), v.ip_only) << v.src;
        EXPECT_EQ(toeplitz_hash(kKey, ipv4_input(v.src, v.dst, v.sport, v.dport)), v.with_ports)
            << v.src;
    }
}

TEST(SteeringRssHashTest, ToeplitzMatchesTheMicrosoftIpv6Vector) {
    std::vector<uint8_t> in(32);
    inet_pton(AF_INET6, "3ffe:2501:200:1fff::7", in.data());
    inet_pton(AF_INET6, "3ffe:2501:200:3::1", in.data() + 16);
    EXPECT_EQ(toeplitz_hash(kKey, in), 0x2cc18cd5u);
    in.insert(in.end(), {2794 >> 8, 2794 & 0xff, 1766 >> 8, 1766 & 0xff});
    EXPECT_EQ(toeplitz_hash(kKey, in), 0x40207d3du);
}

// Ethernet + IPv4 + UDP (or TCP) from 10.0.0.1:sport to 10.0.0.2:dport.
std::vector<std::byte> frame(uint8_t proto = 17, uint16_t sport = 1000, uint16_t dport = 2000,
                             bool vlan = false, uint16_t fragment = 0) {
    std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 0xb1, 0x02, 0, 0, 0, 0, 0xa1};
    if (vlan) {
        f.insert(f.end(), {0x81, 0x00, 0x20, 0x05});  // priority 1, VLAN 5
    }
    f.insert(f.end(), {0x08, 0x00, 0x45, 0x10, 0, 28, 0, 0});
    f.insert(f.end(), {static_cast<uint8_t>(0x40 | fragment >> 8), static_cast<uint8_t>(fragment),
                       64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2});
    f.insert(f.end(), {static_cast<uint8_t>(sport >> 8), static_cast<uint8_t>(sport),
                       static_cast<uint8_t>(dport >> 8), static_cast<uint8_t>(dport), 0, 8, 0, 0});
    std::vector<std::byte> out(f.size());
    memcpy(out.data(), f.data(), f.size());
    return out;
}

TEST(SteeringFrameTest, ParsesMacsIpv4AndPorts) {
    const auto f = parse_frame(frame());
    ASSERT_TRUE(f);
    EXPECT_EQ(f->dst_mac[5], 0xb1);
    EXPECT_EQ(f->src_mac[5], 0xa1);
    EXPECT_EQ(f->ether_type, 0x0800);
    EXPECT_FALSE(f->has_vlan);
    ASSERT_TRUE(f->ipv4);
    EXPECT_EQ(f->src_ip4, htonl(0x0a000001));
    EXPECT_EQ(f->dst_ip4, htonl(0x0a000002));
    EXPECT_EQ(f->tos, 0x10);
    EXPECT_EQ(f->ttl, 64);
    EXPECT_EQ(f->ip_flags, 2);  // don't fragment
    EXPECT_TRUE(f->udp);
    EXPECT_FALSE(f->tcp);
    EXPECT_EQ(f->src_port, htons(1000));
    EXPECT_EQ(f->dst_port, htons(2000));
    EXPECT_TRUE(parse_frame(frame(6))->tcp);
}

TEST(SteeringFrameTest, VlanTagAndFragments) {
    const auto tagged = parse_frame(frame(17, 1, 2, true));
    ASSERT_TRUE(tagged);
    EXPECT_TRUE(tagged->has_vlan);
    EXPECT_EQ(tagged->vlan_tag, 0x2005);
    EXPECT_EQ(tagged->ether_type, 0x0800);
    EXPECT_TRUE(tagged->udp);
    // A later fragment carries no ports.
    const auto later = parse_frame(frame(17, 1, 2, false, 100));
    ASSERT_TRUE(later && later->ipv4);
    EXPECT_FALSE(later->udp);
}

TEST(SteeringFrameTest, TruncatedFramesKeepWhatIsWhole) {
    const auto whole = frame();
    EXPECT_FALSE(parse_frame(std::span(whole).first(13)));
    const auto eth_only = parse_frame(std::span(whole).first(14 + 19));
    ASSERT_TRUE(eth_only);
    EXPECT_FALSE(eth_only->ipv4);
    const auto no_ports = parse_frame(std::span(whole).first(14 + 20 + 3));
    ASSERT_TRUE(no_ports);
    EXPECT_TRUE(no_ports->ipv4);
    EXPECT_FALSE(no_ports->udp);
}

TEST(SteeringRssHashTest, InputTakesOnlyTheChosenFieldsPresent) {
    const auto f = *parse_frame(frame(17, 0x1234, 0x5678));
    EXPECT_EQ(rss_hash_input(f, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_PORT_UDP),
              (std::vector<uint8_t>{10, 0, 0, 1, 0x56, 0x78}));
    // TCP ports of a UDP frame, and IPv6 addresses of an IPv4 one, are absent.
    EXPECT_TRUE(rss_hash_input(f, IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_SRC_IPV6).empty());
}

// A rule of an attribute and specs laid out as ibv_create_flow takes them.
struct Rule {
    ibv_flow_attr attr{};
    ibv_flow_spec_eth eth{};
    ibv_flow_spec_ipv4 ipv4{};
    ibv_flow_spec_tcp_udp l4{};

    Rule() {
        attr.size = sizeof(*this);
        attr.num_of_specs = 3;
        attr.port = 1;
        eth.type = IBV_FLOW_SPEC_ETH;
        eth.size = sizeof(eth);
        ipv4.type = IBV_FLOW_SPEC_IPV4;
        ipv4.size = sizeof(ipv4);
        l4.type = IBV_FLOW_SPEC_UDP;
        l4.size = sizeof(l4);
    }
    ParsedRule parse() const {
        return parse_flow_rule(std::as_bytes(std::span(this, 1)).first(attr.size));
    }
};

TEST(SteeringFlowRuleTest, MatchesUnderMasks) {
    Rule r;
    r.eth.val.dst_mac[5] = 0xb1;
    r.eth.mask.dst_mac[5] = 0xff;
    r.ipv4.val.dst_ip = htonl(0x0a000002);
    r.ipv4.mask.dst_ip = htonl(0xffffff00);
    r.l4.val.dst_port = htons(2000);
    r.l4.mask.dst_port = 0xffff;
    ParsedRule parsed = r.parse();
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(matches(parsed.rule, *parse_frame(frame())));
    EXPECT_FALSE(matches(parsed.rule, *parse_frame(frame(17, 1000, 2001))));
    EXPECT_FALSE(matches(parsed.rule, *parse_frame(frame(6))));  // a UDP spec, a TCP frame
    r.ipv4.val.dst_ip = htonl(0x0a0000ff);  // outside the mask: still 10.0.0.0/24
    EXPECT_TRUE(matches(r.parse().rule, *parse_frame(frame())));
    r.eth.val.dst_mac[5] = 0xb2;
    EXPECT_FALSE(matches(r.parse().rule, *parse_frame(frame())));
}

TEST(SteeringFlowRuleTest, VlanSpecNeedsATaggedFrame) {
    Rule r;
    r.attr.num_of_specs = 1;
    r.attr.size = sizeof(r.attr) + sizeof(r.eth);
    r.eth.val.vlan_tag = htons(5);
    r.eth.mask.vlan_tag = htons(0x0fff);
    const FlowRule rule = r.parse().rule;
    EXPECT_TRUE(matches(rule, *parse_frame(frame(17, 1, 2, true))));
    EXPECT_FALSE(matches(rule, *parse_frame(frame())));
}

TEST(SteeringFlowRuleTest, MalformedRulesAreInvalid) {
    Rule r;
    EXPECT_EQ(parse_flow_rule(std::as_bytes(std::span(&r, 1)).first(10)).error, EINVAL);
    Rule bad = r;
    bad.attr.port = 2;
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.attr.comp_mask = 1;
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.attr.num_of_specs = 4;  // more than the bytes hold
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.ipv4.size = 8;
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.l4.type = static_cast<ibv_flow_spec_type>(0x77);
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.attr.type = static_cast<ibv_flow_attr_type>(9);
    EXPECT_EQ(bad.parse().error, EINVAL);
    bad = r;
    bad.attr.type = IBV_FLOW_ATTR_SNIFFER;  // takes no specs
    EXPECT_EQ(bad.parse().error, EINVAL);
    EXPECT_EQ(r.parse().error, 0);
}

TEST(SteeringFlowRuleTest, UnsupportedSpecsAndFlags) {
    Rule r;
    Rule bad = r;
    bad.attr.flags = IBV_FLOW_ATTR_FLAGS_EGRESS;
    EXPECT_EQ(bad.parse().error, EOPNOTSUPP);
    bad = r;
    bad.l4.type = static_cast<ibv_flow_spec_type>(IBV_FLOW_SPEC_UDP | IBV_FLOW_SPEC_INNER);
    EXPECT_EQ(bad.parse().error, EOPNOTSUPP);
    bad = r;
    bad.l4.type = IBV_FLOW_SPEC_ACTION_COUNT;
    EXPECT_EQ(bad.parse().error, EOPNOTSUPP);
}

TEST(SteeringFlowRuleTest, DropActionIsNoMatchSpec) {
    struct {
        ibv_flow_attr attr;
        ibv_flow_spec_action_drop drop;
    } r{};
    r.attr.size = sizeof(r);
    r.attr.num_of_specs = 1;
    r.attr.port = 1;
    r.drop.type = IBV_FLOW_SPEC_ACTION_DROP;
    r.drop.size = sizeof(r.drop);
    const ParsedRule parsed = parse_flow_rule(std::as_bytes(std::span(&r, 1)));
    ASSERT_EQ(parsed.error, 0) << parsed.why;
    EXPECT_TRUE(parsed.rule.drop);
    EXPECT_TRUE(parsed.rule.specs.empty());
}

}  // namespace
}  // namespace uroce::steering
