// The objects a client creates on a device. Each holds strong references to
// the objects it depends on and counts its own dependents (`users`), so that
// destroying an object still in use fails with EBUSY, as in the kernel.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

#include <array>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "objects/handle_table.h"
#include "objects/qp_journal.h"
#include "objects/qp_state.h"
#include "objects/unpolled_cqs.h"
#include "queues/ring.h"
#include "steering/flow_rule.h"
#include "util/case_tag.h"
#include "util/client_pipe.h"
#include "util/coverage.h"
#include "util/unique_fd.h"

namespace uroce {

struct Object {
    uint32_t handle = 0;
    int users = 0;
};

// Holds a dependency and counts itself among the dependency's users.
template <class T>
class Ref {
  public:
    Ref() = default;
    explicit Ref(std::shared_ptr<T> target) : target_(std::move(target)) {
        if (target_) {
            ++target_->users;
        }
    }
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    Ref(Ref&& other) noexcept : target_(std::move(other.target_)) {}
    Ref& operator=(Ref&& other) noexcept {
        reset();
        target_ = std::move(other.target_);
        return *this;
    }
    ~Ref() { reset(); }
    void reset() {
        if (target_) {
            --target_->users;
            target_.reset();
        }
    }
    T* get() const { return target_.get(); }
    T* operator->() const { return target_.get(); }
    explicit operator bool() const { return target_ != nullptr; }

  private:
    std::shared_ptr<T> target_;
};

// A client's async event pipe: the daemon writes ib_uverbs_async_event_desc
// records (element = the client's object pointer) for ibv_get_async_event.
struct EventPipe {
    ClientPipe pipe;
    void post(uint64_t element, uint32_t event_type);
};

struct Pd : Object {};

// Device memory (ibv_alloc_dm): memory the client maps and reaches by
// offset, counted against the device's max_dm_size.
struct Dm : Object {
    uint64_t addr = 0;  // the client's mapping
    uint64_t length = 0;
};

struct Mr : Object, std::enable_shared_from_this<Mr> {
    Ref<Pd> pd;
    Ref<Dm> dm;     // an MR on device memory (zero-based)
    pid_t pid = 0;  // whose address space addr is in
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t iova = 0;
    int access = 0;
    uint32_t key_index = 0;
    uint32_t lkey = 0;
    uint32_t rkey = 0;
};

struct Qp;

// A memory window: a range of an MR opened to remote access under its own
// rkey. Type 1 is valid from allocation (and opens nothing until bound);
// type 2 is valid only while bound, to one QP, until invalidated.
struct Mw : Object {
    Ref<Pd> pd;
    ibv_mw_type type = IBV_MW_TYPE_1;
    uint32_t key_index = 0;
    uint32_t rkey = 0;
    bool valid = false;
    Ref<Mr> mr;  // the MR bound to, which cannot be deregistered meanwhile
    uint64_t addr = 0;
    uint64_t length = 0;
    int access = 0;
    std::weak_ptr<const Qp> qp;  // type 2: the only QP through which it is reached
};

// A completion channel: the pipe the client reads events from.
struct CompChannel : Object {
    ClientPipe pipe;
};

struct Cq : Object {
    pid_t pid = 0;  // the process that polls it: a completion can carry data into it
    std::shared_ptr<EventPipe> events;
    bool overrun = false;  // reported once with IBV_EVENT_CQ_ERR (and logged)
    // Where completions it had no room for are counted (the device's
    // completions_lost), and the device's name, for the log line.
    uint64_t* lost = nullptr;
    std::string device_name;
    uint64_t user_handle = 0;
    int cqe = 0;
    Ring ring;  // Cqe entries, then queues::CqState
    Ref<CompChannel> channel;
    int comp_vector = 0;
    uint64_t wc_flags = 0;
    // ibv_modify_cq(3) moderation: an armed CQ signals once cq_count
    // completions have come, or cq_period us after the first of them.
    ibv_moderate_cq moderation{};
    uint32_t held = 0;  // completions the armed CQ has not signalled yet
    transport::Clock::time_point event_due = transport::kNever;
    std::set<Cq*>* due_events = nullptr;  // the device's CQs with an event_due
    UnpolledCqs* unpolled_cqs = nullptr;  // the device's, where completions wait
    bool unpolled = false;                // listed there
};

// An XRC domain. Opened through a file, it is shared by every client that
// opens the same file on the same device.
struct XrcdDomain {
    dev_t file_dev = 0;
    ino_t file_ino = 0;
    bool has_file = false;
};
struct Xrcd : Object {
    std::shared_ptr<XrcdDomain> domain;
};

struct Srq : Object {
    std::shared_ptr<EventPipe> events;
    uint64_t user_handle = 0;
    ibv_srq_type type = IBV_SRQT_BASIC;
    ibv_srq_attr attr{};
    Ref<Pd> pd;
    Ref<Xrcd> xrcd;
    Ref<Cq> cq;
    uint32_t srq_num = 0;
    Ring ring;  // receive WQEs
};

struct Wq : Object {
    uint64_t user_handle = 0;
    ibv_wq_type type = IBV_WQT_RQ;
    ibv_wq_state state = IBV_WQS_RESET;
    uint32_t max_wr = 0;
    uint32_t max_sge = 0;
    uint32_t flags = 0;
    Ref<Pd> pd;
    Ref<Cq> cq;
    uint32_t wq_num = 0;
    Ring ring;  // receive WQEs
};

struct RwqIndTable : Object {
    uint32_t log_size = 0;
    std::vector<Ref<Wq>> wqs;
    uint32_t ind_tbl_num = 0;
};

struct Ah : Object {
    Ref<Pd> pd;
    ibv_ah_attr attr{};
};

// A client's handle to a QP: the creator's, and for an XRC_TGT QP one more
// per ibv_open_qp. Every holder hears the QP's async events; the QP lives
// until the last holder destroys its handle (as the kernel's shared QPs).
struct QpHolder {
    std::shared_ptr<EventPipe> events;  // the holder's client
    uint32_t handle = 0;                // the QP's handle in that client
    uint64_t user_handle = 0;
    Ref<Xrcd> xrcd;  // XRC_TGT: the holder's own handle of the QP's domain
};

struct Qp : Object, std::enable_shared_from_this<Qp> {
    std::vector<QpHolder> holders;
    ibv_qp_type type = IBV_QPT_RC;
    uint32_t qpn = 0;
    // The creating client's UROCE_CASE (never null): log lines and
    // invariant reports about the QP carry it, and its work counts in the
    // case's coverage.
    CaseRef owner_case = no_case();
    uint32_t doorbell_slot = queues::kNoDoorbellSlot;  // see queues::DoorbellBits
    bool sq_sig_all = false;
    uint32_t create_flags = 0;
    ibv_qp_cap cap{};
    Ring send_queue;  // send WQEs; absent for XRC_TGT
    Ring recv_queue;  // receive WQEs; absent with an SRQ
    // Every attribute set so far; attr.qp_state is the current state.
    ibv_qp_attr attr{};
    Ref<Pd> pd;
    Ref<Cq> send_cq;
    Ref<Cq> recv_cq;
    Ref<Srq> srq;
    std::shared_ptr<XrcdDomain> xrc_domain;  // XRC_TGT
    Ref<RwqIndTable> ind_table;
    // An RSS QP: where the Toeplitz hash of each frame's fields points in
    // ind_table.
    std::vector<uint8_t> rss_key;
    uint64_t rss_fields = 0;
    std::set<std::pair<std::array<uint8_t, 16>, uint16_t>> mcast_groups;
    // UD: the creating client's address handles, which its WQEs name.
    const HandleTable<Ah>* ahs = nullptr;
    transport::RequesterState requester;
    transport::ResponderState responder;
    transport::QpJournal journal;

    // Every change of state goes through here, so that the journal has it.
    void move_to(ibv_qp_state next, int attr_mask, std::string cause) {
        coverage::qp_transition(type, attr.qp_state, next, coverage::QpOutcome::kAccepted);
        journal.add({transport::Clock::now(), attr.qp_state, next, attr_mask, std::move(cause)});
        attr.qp_state = next;
        attr.cur_qp_state = next;
    }

    void post_event(ibv_event_type event) const {
        for (const QpHolder& holder : holders) {
            holder.events->post(holder.user_handle, event);
        }
    }
};

// A flow steering rule (ibv_create_flow): the frames it matches go to its
// QP, or are dropped.
struct Flow : Object {
    Ref<Qp> qp;
    steering::FlowRule rule;
};

}  // namespace uroce
