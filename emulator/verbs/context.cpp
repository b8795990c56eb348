#include "verbs/context.h"

#include <string.h>
#include <sys/random.h>

namespace uroce {

namespace {
uint32_t next_context_id = 0;  // the daemon serves every client from one thread
}

Context::Context(Device& device, pid_t pid, ClientPipe async_events, DescriptorLedger* descriptors)
    : device_(device),
      owner_(pid),
      descriptors_(descriptors),
      pid_(pid),
      id_(next_context_id++),
      events_(std::make_shared<EventPipe>()) {
    while (getrandom(&attach_token_, sizeof(attach_token_), 0) != sizeof(attach_token_) ||
           attach_token_ == 0) {
    }
    events_->pipe = std::move(async_events);
}

void Context::post_device_fatal() const {
    ownership::touch(device_.engine());
    events_->post(0, IBV_EVENT_DEVICE_FATAL);
}

void Context::post_port_event(ibv_event_type type) const {
    ownership::touch(device_.engine());
    events_->post(Device::kPortCount, type);  // the element of a port event is its number
}

// A client that disconnects or dies loses everything it created, dependents
// first, exactly as if it had destroyed each object itself.
Context::~Context() {
    ownership::touch(device_.engine());
    auto destroy_all = [](auto& table, auto destroy) {
        while (!table.empty()) {
            destroy(table.all().rbegin()->first);
        }
    };
    rpc::Empty none;
    destroy_all(flows_, [&](uint32_t h) { destroy_flow({h}, none); });
    destroy_all(qps_, [&](uint32_t h) {
        leave_groups(*qps_.find(h));
        destroy_qp({h}, none);
    });
    destroy_all(ind_tables_, [&](uint32_t h) { destroy_rwq_ind_table({h}, none); });
    destroy_all(wqs_, [&](uint32_t h) { destroy_wq({h}, none); });
    destroy_all(srqs_, [&](uint32_t h) { destroy_srq({h}, none); });
    destroy_all(ahs_, [&](uint32_t h) { destroy_ah({h}, none); });
    destroy_all(mws_, [&](uint32_t h) { dealloc_mw({h}, none); });
    destroy_all(mrs_, [&](uint32_t h) { dereg_mr({h}, none); });
    destroy_all(dms_, [&](uint32_t h) { free_dm({h}, none); });
    destroy_all(cqs_, [&](uint32_t h) { destroy_cq({h}, none); });
    while (!channels_.empty()) {
        destroy_comp_channel({channels_.begin()->first}, none);
    }
    destroy_all(xrcds_, [&](uint32_t h) { close_xrcd({h}, none); });
    destroy_all(pds_, [&](uint32_t h) { dealloc_pd({h}, none); });
}

Result Context::query_device(const rpc::QueryDeviceRequest&, rpc::QueryDeviceReply& reply) {
    reply.attr = device_.attr();
    return ok();
}

Result Context::query_port(const rpc::QueryPortRequest& req, rpc::QueryPortReply& reply) {
    if (req.port_num < 1 || req.port_num > Device::kPortCount) {
        return fail(EINVAL, "port %u does not exist (ports 1..%u)", req.port_num,
                    Device::kPortCount);
    }
    reply.attr = device_.port_attr();
    return ok();
}

ObjectCounts Context::counts() const {
    ObjectCounts c;
    c.pd = static_cast<int>(pds_.size());
    c.mr = static_cast<int>(mrs_.size());
    c.mw = static_cast<int>(mws_.size());
    c.cq = static_cast<int>(cqs_.size());
    c.qp = static_cast<int>(qps_.size());
    c.srq = static_cast<int>(srqs_.size());
    c.wq = static_cast<int>(wqs_.size());
    c.rwq_ind_table = static_cast<int>(ind_tables_.size());
    c.ah = static_cast<int>(ahs_.size());
    c.xrcd = static_cast<int>(xrcds_.size());
    c.comp_channel = static_cast<int>(channels_.size());
    c.dm = static_cast<int>(dms_.size());
    for (const auto& [handle, dm] : dms_.all()) {
        c.dm_bytes += dm->length;
    }
    return c;
}

}  // namespace uroce
