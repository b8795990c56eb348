// Flow steering rules as ibv_create_flow(3) lays them out: an ibv_flow_attr
// followed by num_of_specs specs, each as long as its own size field says
// (attr.size is not used: libibverbs does not use it either). A rule
// matches a frame when every spec does, each field compared under its mask,
// as the kernel's drivers compare them.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <span>
#include <string>
#include <variant>
#include <vector>

#include "steering/frame.h"

namespace uroce::steering {

using MatchSpec = std::variant<ibv_flow_spec_eth, ibv_flow_spec_ipv4_ext, ibv_flow_spec_ipv6,
                               ibv_flow_spec_tcp_udp>;

struct FlowRule {
    ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL;
    uint16_t priority = 0;
    uint32_t flags = 0;
    bool drop = false;             // an IBV_FLOW_SPEC_ACTION_DROP
    std::vector<MatchSpec> specs;  // an IPv4 spec is kept as an IPv4_EXT one with no more masked
};

// error 0: `rule` holds the parsed rule; else an errno and what was wrong.
struct ParsedRule {
    int error = 0;
    std::string why;
    FlowRule rule;
};

// `bytes`: the attribute and at least its specs.
ParsedRule parse_flow_rule(std::span<const std::byte> bytes);

// Every spec matches the frame (default and sniffer rules have none).
bool matches(const FlowRule& rule, const FrameFields& frame);

}  // namespace uroce::steering
