#include "verbs/context.h"

#include <string.h>
#include <sys/random.h>

#include "util/log.h"

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

namespace {

template <class T>
uint32_t last_key(const HandleTable<T>& table) {
    return table.all().rbegin()->first;
}

template <class Key, class T>
Key last_key(const std::map<Key, T>& table) {
    return table.rbegin()->first;
}

}  // namespace

// A client that disconnects or dies loses everything it created, dependents
// first, exactly as if it had destroyed each object itself. A destroy
// refused here would be a daemon bug (the dependents went first): it is
// logged, and that table's teardown stops instead of trying for ever.
Context::~Context() {
    ownership::touch(device_.engine());
    auto destroy_all = [this](const char* kind, const auto& table, auto destroy) {
        while (!table.empty()) {
            const auto handle = last_key(table);
            if (Result r = destroy(handle); !r) {
                log_warn(
                    "%s: pid %d's %s %u outlives its client, its destroy refused: %s. This is "
                    "a bug of uroced",
                    device_.name().c_str(), pid_, kind, static_cast<unsigned>(handle),
                    r.message.c_str());
                return;
            }
        }
    };
    rpc::Empty none;
    destroy_all("flow", flows_, [&](uint32_t h) { return destroy_flow({h}, none); });
    destroy_all("QP", qps_, [&](uint32_t h) {
        leave_groups(*qps_.find(h));
        return destroy_qp({h}, none);
    });
    destroy_all("indirection table", ind_tables_,
                [&](uint32_t h) { return destroy_rwq_ind_table({h}, none); });
    destroy_all("WQ", wqs_, [&](uint32_t h) { return destroy_wq({h}, none); });
    destroy_all("SRQ", srqs_, [&](uint32_t h) { return destroy_srq({h}, none); });
    destroy_all("AH", ahs_, [&](uint32_t h) { return destroy_ah({h}, none); });
    destroy_all("MW", mws_, [&](uint32_t h) { return dealloc_mw({h}, none); });
    destroy_all("MR", mrs_, [&](uint32_t h) { return dereg_mr({h}, none); });
    destroy_all("device memory", dms_, [&](uint32_t h) { return free_dm({h}, none); });
    destroy_all("CQ", cqs_, [&](uint32_t h) { return destroy_cq({h}, none); });
    destroy_all("completion channel", channels_,
                [&](int fd) { return destroy_comp_channel({fd}, none); });
    destroy_all("XRC domain", xrcds_, [&](uint32_t h) { return close_xrcd({h}, none); });
    destroy_all("PD", pds_, [&](uint32_t h) { return dealloc_pd({h}, none); });
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
