#include "engine/frame_steering.h"

#include <algorithm>
#include <vector>

#include "objects/objects.h"
#include "steering/frame.h"
#include "steering/rss_hash.h"
#include "transport/transport.h"

namespace uroce {
namespace {

// The WQ of an RSS QP's indirection table that the Toeplitz hash of the
// frame's chosen fields selects (its low bits, as mlx5).
Wq& rss_target(const Qp& qp, const steering::FrameFields& frame) {
    const std::vector<uint8_t> input = steering::rss_hash_input(frame, qp.rss_fields);
    const uint32_t hash = steering::toeplitz_hash(qp.rss_key, input);
    const auto& wqs = qp.ind_table->wqs;
    return *wqs[hash & (wqs.size() - 1)].get();
}

// The rules that take the frame, and whether one of them drops it. The
// sender's own rules are not asked.
std::vector<const Flow*> takers(const Device& device, const steering::FrameFields& frame,
                                const Qp* sender, bool& drop) {
    std::vector<const Flow*> normal;
    std::vector<const Flow*> taken;
    for (const Flow* flow : device.flows()) {
        if (flow->qp.get() == sender) {
            continue;
        } else if (flow->rule.type == IBV_FLOW_ATTR_SNIFFER) {
            taken.push_back(flow);
        } else if (flow->rule.type == IBV_FLOW_ATTR_NORMAL &&
                   steering::matches(flow->rule, frame)) {
            normal.push_back(flow);
        }
    }
    std::stable_sort(normal.begin(), normal.end(), [](const Flow* a, const Flow* b) {
        return a->rule.priority < b->rule.priority;
    });
    bool trapped = false;
    for (size_t i = 0; i < normal.size() && !trapped;) {
        const uint16_t priority = normal[i]->rule.priority;
        for (; i < normal.size() && normal[i]->rule.priority == priority; ++i) {
            drop |= normal[i]->rule.drop;
            trapped |= !(normal[i]->rule.flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP);
            taken.push_back(normal[i]);
        }
    }
    if (!trapped) {
        const bool multicast = frame.dst_mac[0] & 1;
        for (const Flow* flow : device.flows()) {
            if (flow->qp.get() == sender) {
                continue;
            }
            if (flow->rule.type == IBV_FLOW_ATTR_ALL_DEFAULT ||
                (multicast && flow->rule.type == IBV_FLOW_ATTR_MC_DEFAULT)) {
                drop |= flow->rule.drop;
                taken.push_back(flow);
            }
        }
    }
    return taken;
}

}  // namespace

bool steer_frame(Device& device, std::span<const std::byte> frame, const Qp* sender) {
    const std::optional<steering::FrameFields> fields = steering::parse_frame(frame);
    if (!fields) {
        return false;
    }
    bool drop = false;
    std::vector<const Flow*> flows = takers(device, *fields, sender, drop);
    if (flows.empty()) {
        return false;
    }
    if (drop) {
        ++device.stats().raw_steered_drop;
        std::erase_if(flows, [](const Flow* f) { return f->rule.type != IBV_FLOW_ATTR_SNIFFER; });
    }
    std::vector<Qp*> done;
    for (const Flow* flow : flows) {
        Qp* qp = flow->qp.get();
        if (std::find(done.begin(), done.end(), qp) != done.end()) {
            continue;
        }
        done.push_back(qp);
        if (qp->ind_table) {
            transport::receive_frame(device, rss_target(*qp, *fields), frame);
        } else {
            transport::receive_frame(device, *qp, frame);
        }
    }
    return true;
}

}  // namespace uroce
