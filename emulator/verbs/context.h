// One client's view of one device: the verbs it can call and the objects it
// created. Every method checks its arguments as the man pages and the kernel
// do, and either changes nothing and fails, or succeeds.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "objects/handle_table.h"
#include "objects/objects.h"
#include "protocol/messages.h"
#include "util/descriptor_ledger.h"
#include "util/ownership.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace uroce {

// Descriptors a reply carries, closed here once it is sent (the client
// has its copies).
using ReplyFds = std::vector<UniqueFd>;

class Context {
  public:
    // `pid`: the client process, whose memory its MRs describe, and whose
    // share of the device's tables (and, with `descriptors`, of the
    // daemon's descriptors) its objects count against.
    Context(Device& device, pid_t pid, ClientPipe async_events,
            DescriptorLedger* descriptors = nullptr);
    ~Context();  // destroys everything the client left, in dependency order
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    Device& device() { return device_; }
    const Device& device() const { return device_; }
    // The process a request comes from: the one that opened the context or
    // a child forked from it that attached (rpc::AttachRequest). New MRs
    // describe its memory; capabilities are its own.
    void set_caller(pid_t pid) { pid_ = pid; }
    // The context's number, unique in the daemon (RDMA netlink's ctxn).
    uint32_t id() const { return id_; }
    // The secret a forked child presents to attach (random, 64 bits).
    uint64_t attach_token() const { return attach_token_; }
    // The client's UROCE_CASE ("" if none); its QPs carry it.
    void set_case(CaseRef tag) { case_ = std::move(tag); }
    const CaseRef& case_tag() const { return case_; }

    Result query_device(const rpc::QueryDeviceRequest&, rpc::QueryDeviceReply&);
    Result query_port(const rpc::QueryPortRequest&, rpc::QueryPortReply&);

    Result alloc_pd(const rpc::Empty&, rpc::AllocPdReply&);
    Result dealloc_pd(const rpc::HandleRequest&, rpc::Empty&);
    Result reg_mr(const rpc::RegMrRequest&, rpc::RegMrReply&);
    Result rereg_mr(const rpc::ReregMrRequest&, rpc::ReregMrReply&);
    Result dereg_mr(const rpc::HandleRequest&, rpc::Empty&);
    Result advise_mr(const rpc::AdviseMrRequest&, rpc::Empty&);
    Result alloc_mw(const rpc::AllocMwRequest&, rpc::AllocMwReply&);
    Result dealloc_mw(const rpc::HandleRequest&, rpc::Empty&);
    Result alloc_dm(const rpc::AllocDmRequest&, rpc::AllocDmReply&);
    Result free_dm(const rpc::HandleRequest&, rpc::Empty&);
    Result import_pd(const rpc::HandleRequest&, rpc::Empty&);
    Result import_mr(const rpc::HandleRequest&, rpc::ImportMrReply&);
    Result import_dm(const rpc::HandleRequest&, rpc::ImportDmReply&);
    Result reg_dm_mr(const rpc::RegDmMrRequest&, rpc::RegMrReply&);

    Result create_comp_channel(const rpc::CreateCompChannelRequest&, UniqueFd write_end);
    Result destroy_comp_channel(const rpc::DestroyCompChannelRequest&, rpc::Empty&);
    Result create_cq(const rpc::CreateCqRequest&, rpc::CreateCqReply&, ReplyFds&);
    Result resize_cq(const rpc::ResizeCqRequest&, rpc::ResizeCqReply&, ReplyFds&);
    Result modify_cq(const rpc::ModifyCqRequest&, rpc::Empty&);
    Result destroy_cq(const rpc::HandleRequest&, rpc::Empty&);

    Result create_srq(const rpc::CreateSrqRequest&, rpc::CreateSrqReply&, ReplyFds&);
    Result modify_srq(const rpc::ModifySrqRequest&, rpc::ModifySrqReply&, ReplyFds&);
    Result query_srq(const rpc::HandleRequest&, rpc::QuerySrqReply&);
    Result destroy_srq(const rpc::HandleRequest&, rpc::Empty&);

    Result create_qp(const rpc::CreateQpRequest&, rpc::CreateQpReply&, ReplyFds&);
    Result modify_qp(const rpc::ModifyQpRequest&, rpc::Empty&);
    Result query_qp(const rpc::QueryQpRequest&, rpc::QueryQpReply&);
    Result destroy_qp(const rpc::HandleRequest&, rpc::Empty&);
    Result open_qp(const rpc::OpenQpRequest&, rpc::OpenQpReply&);

    Result create_wq(const rpc::CreateWqRequest&, rpc::CreateWqReply&, ReplyFds&);
    Result modify_wq(const rpc::ModifyWqRequest&, rpc::Empty&);
    Result destroy_wq(const rpc::HandleRequest&, rpc::Empty&);
    Result create_rwq_ind_table(const rpc::CreateRwqIndTableRequest&, rpc::CreateRwqIndTableReply&);
    Result destroy_rwq_ind_table(const rpc::HandleRequest&, rpc::Empty&);

    Result create_ah(const rpc::CreateAhRequest&, rpc::CreateAhReply&);
    Result destroy_ah(const rpc::HandleRequest&, rpc::Empty&);

    Result open_xrcd(const rpc::OpenXrcdRequest&, rpc::OpenXrcdReply&, UniqueFd file);
    Result close_xrcd(const rpc::HandleRequest&, rpc::Empty&);

    Result attach_mcast(const rpc::McastRequest&, rpc::Empty&);
    Result detach_mcast(const rpc::McastRequest&, rpc::Empty&);
    // Detaches a QP that goes with its client from every group.
    void leave_groups(Qp& qp);

    Result create_flow(const rpc::CreateFlowRequest&, rpc::CreateFlowReply&);
    Result destroy_flow(const rpc::HandleRequest&, rpc::Empty&);

    // Object counts, for status.
    ObjectCounts counts() const;
    // The device is going away (rdma link delete): IBV_EVENT_DEVICE_FATAL.
    void post_device_fatal() const;
    // The port followed its link: IBV_EVENT_PORT_ACTIVE or IBV_EVENT_PORT_ERR.
    void post_port_event(ibv_event_type type) const;
    // The objects themselves, for RDMA netlink's resource dumps, snapshots
    // and checks: the device's engine is paused first (util/ownership.h).
    const HandleTable<Pd>& pds() const { return owned(pds_); }
    const HandleTable<Cq>& cqs() const { return owned(cqs_); }
    const HandleTable<Mr>& mrs() const { return owned(mrs_); }
    const HandleTable<Qp>& qps() const { return owned(qps_); }
    const HandleTable<Srq>& srqs() const { return owned(srqs_); }
    const HandleTable<Ah>& ahs() const { return owned(ahs_); }

  private:
    template <class Table>
    const Table& owned(const Table& table) const {
        ownership::touch(device_.engine());
        return table;
    }
    Result register_region(const std::shared_ptr<Pd>& pd, uint64_t addr, uint64_t length,
                           uint64_t iova, int access, const std::shared_ptr<Dm>& dm,
                           rpc::RegMrReply& reply);
    Result check_ah_attr(const ibv_ah_attr& attr, uint8_t& slot) const;
    // `sgid_slot`: with IBV_QP_AV, the GID table's slot of the AV's source GID.
    Result check_modify_qp(const Qp& qp, const ibv_qp_attr& attr, int mask, ibv_qp_state cur,
                           ibv_qp_state next, uint8_t& sgid_slot) const;
    // create_qp's steps: the request's own values, the objects it names,
    // then the QP.
    struct QpObjects {
        std::shared_ptr<Pd> pd;
        std::shared_ptr<Xrcd> xrcd;
        std::shared_ptr<Cq> send_cq;
        std::shared_ptr<Cq> recv_cq;
        std::shared_ptr<Srq> srq;
    };
    Result check_qp_init(const rpc::CreateQpRequest& req) const;
    Result find_qp_objects(const rpc::CreateQpRequest& req, QpObjects& found) const;
    Result build_qp(const rpc::CreateQpRequest& req, const QpObjects& objects,
                    const ibv_qp_cap& cap, Qp& qp);
    Result create_rss_qp(const rpc::CreateQpRequest& req, rpc::CreateQpReply& reply);
    // Gives the QP's doorbell slot back (queues::DoorbellBits).
    void detach_doorbell(Qp& qp);
    Result add_qp(const std::shared_ptr<Qp>& qp, uint64_t user_handle,
                  const std::shared_ptr<Xrcd>& xrcd);
    Result check_qp_caps(const rpc::CreateQpRequest& req, ibv_qp_cap& cap) const;

    Device& device_;
    const pid_t owner_;  // the client whose shares its objects take
    DescriptorLedger* descriptors_;
    pid_t pid_;
    uint32_t id_;
    uint64_t attach_token_ = 0;
    CaseRef case_ = no_case();
    std::shared_ptr<EventPipe> events_;
    HandleTable<Pd> pds_;
    HandleTable<Mr> mrs_;
    HandleTable<Mw> mws_;
    HandleTable<Dm> dms_;
    std::map<int, std::shared_ptr<CompChannel>> channels_;  // by the client's read fd
    HandleTable<Cq> cqs_;
    HandleTable<Xrcd> xrcds_;
    HandleTable<Srq> srqs_;
    HandleTable<Wq> wqs_;
    HandleTable<RwqIndTable> ind_tables_;
    HandleTable<Ah> ahs_;
    HandleTable<Qp> qps_;
    HandleTable<Flow> flows_;
};

}  // namespace uroce
