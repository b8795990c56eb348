// Check mode (docs/check.md): the provider watches how the program uses
// the verbs and reports the misuse a real NIC would hide or punish later,
// in the style of the sanitizers. Off unless $UROCE_CHECK or the daemon
// (uroced --check) asks; when off a context has no CheckState and each hook
// costs one test of a null pointer.
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "catalog.h"
#include "portability.h"
#include "protocol/queues.h"

namespace uroce {

class ControlClient;

namespace check {
class Checker;
struct ChannelWait;
}  // namespace check

namespace check {

enum class Mode { kOff, kReport, kLog, kAbort };

// The mode of a context being opened: $UROCE_CHECK (report, log, abort,
// off; 1 is report), else report when the daemon asks, else off.
Mode mode_for(bool daemon_checks);

// A finding as the program's stderr shows it (report.cpp).
struct Finding {
    Rule rule;         // its class, in the catalog
    uint32_t qpn = 0;  // the QP it is about, or 0
    std::string what;  // what happened, in the program's own terms
    std::string nic;   // what a real NIC does with it
    std::string fix;   // what to change
    // The program's call of the verb that posted the work request the
    // finding is about, when it was found later (at its completion), or
    // of the call that `earlier` names.
    const void* posted_at = nullptr;
    const char* earlier = "posted at";
    // Where NICs differ in what the program relied on (portability.h).
    std::optional<Difference> differs{};
};

// `finding`, saying that NICs differ in what it is about.
inline Finding differing(Finding finding, Difference difference) {
    finding.differs = difference;
    return finding;
}

// Bytes of the process, [start, end).
struct Range {
    uint64_t start;
    uint64_t end;
    bool operator<(const Range& other) const {
        return start != other.start ? start < other.start : end < other.end;
    }
    bool operator==(const Range& other) const = default;
};

std::string hex(uint64_t value);
// The bytes a send's gather list names.
uint64_t gathered_length(const ibv_send_wr& wr);
// "element 0 of wr_id 0x5 (64 bytes at 0x7f.., lkey 0x100)"
std::string element(int index, uint64_t wr_id, const ibv_sge& sge);

// A work request posted and not yet completed, as a NIC's queue holds it.
struct Posted {
    uint64_t wr_id;
    bool signaled;
    std::vector<ibv_sge> sges;        // empty when its data was inline
    const void* posted_at = nullptr;  // the program's call of the posting verb
    // Where the NIC will write (a receive's buffers, a READ's or an
    // atomic's destination), as claimed in CheckState::landings_.
    std::vector<Range> lands;
    // A send's gather elements in the process, each sampled when posted
    // and compared when it completes (process_memory.h), and the landings
    // released by then (CheckState::landing_epoch_).
    struct Source {
        int element;
        Range range;
        uint64_t digest;
    };
    std::vector<Source> sources;
    uint64_t landing_epoch = 0;
    // The peer's memory an RDMA or atomic work request names, and the
    // window a bind names (for ibv_dealloc_mw's check).
    uint32_t rkey = 0;
    const void* window = nullptr;
    // A send's number on its queue, plus one (queues::SendWqe::check_seq).
    uint32_t seq = 0;
};

// An MR, as work requests' lkeys are checked against it.
struct MrKey {
    uint32_t pd_handle;
    uint64_t iova;
    uint64_t length;
    int access;
    uint64_t addr;        // where iova is in the process
    bool process_memory;  // false: device memory (ibv_alloc_dm)
    // Memory under it the program gave back (the first few).
    struct GivenBack {
        Range range;
        const char* call;
        const void* caller;
    };
    std::vector<GivenBack> given_back{};
    uint64_t known_mapped = ~0ULL;  // process_memory.h's mr_mapped memo
};

// A QP's part of the state (bookkeeping.cpp).
struct QpState {
    uint32_t qpn = 0;
    uint32_t handle = 0;  // the daemon's
    ibv_qp_type type = IBV_QPT_RC;
    uint32_t sq_depth = 0;        // max_send_wr as created
    ibv_qp_cap asked{};           // the caps ibv_create_qp was asked for
    ibv_qp_cap granted{};         // and those it gave
    uint32_t posts_in_error = 0;  // ibv_post_* calls since it went to ERR
    const ibv_cq* send_cq = nullptr;
    const ibv_cq* recv_cq = nullptr;
    std::deque<Posted> sends;     // in posting order, until completed
    std::deque<Posted> receives;  // its own receive queue's
    ibv_srq* srq = nullptr;       // whose queue takes its receives
    bool signal_all = false;      // sq_sig_all: every send is signaled
    uint8_t rnr_retry = 7;        // as ibv_modify_qp last set it
    // The send queue ring's check words (queues::RingHeader): the log of
    // retirements this side writes (the count last written), and the
    // daemon's findings, of which `findings_seen` were asked for.
    queues::RingHeader* ring = nullptr;
    uint32_t retired = 0;
    uint32_t findings_seen = 0;
    uint32_t sends_posted = 0;
    std::vector<std::string> history;  // the last transitions, "RESET -> INIT"
    std::string error_cause;           // set when an error completion moved it to ERR
    uint32_t reported = 0;             // bit()s of the rules already reported on it
};

// One context's state in check mode. Every hook takes the one lock: check
// mode trades speed for seeing everything in order.
class CheckState {
  public:
    CheckState(Mode mode, ControlClient& client, const char* device);
    ~CheckState();

    // Objects, for the leak report at ibv_close_device or exit.
    void created(const void* object, std::string description);
    // `iova`: the address work requests name its first byte by.
    void mr_created(const ibv_mr* mr, uint64_t iova, int access, bool process_memory = true);
    // ibv_rereg_mr changed what `flags` say (libibverbs updates the ibv_mr
    // after the provider): the MR had `old_lkey` and has `new_lkey`.
    void mr_reregistered(uint32_t old_lkey, uint32_t new_lkey, int flags, const ibv_pd* pd,
                         uint64_t iova, uint64_t length, int access);
    void mr_destroyed(const ibv_mr* mr);
    void destroyed(const void* object);

    // The caps asked for and granted (ibv_qp_cap); `signal_all`:
    // sq_sig_all. `ring`: the send queue's, whose check words it writes
    // and reads.
    void qp_created(ibv_qp* qp, const ibv_qp_cap& asked, const ibv_qp_cap& granted, bool signal_all,
                    queues::RingHeader* ring);
    // After a successful ibv_modify_qp; `from`: the state before.
    void qp_modified(ibv_qp* qp, ibv_qp_state from, const ibv_qp_attr& attr, int mask);
    // `removed`: the completions of it the destroy took out of its send
    // and receive CQs.
    void qp_destroyed(ibv_qp* qp, uint32_t removed_send, uint32_t removed_recv);
    // After a move to RTR or RTS: asks the daemon how the QP and its peer
    // (when both are its devices') disagree, and reports it.
    void check_peer(ibv_qp* qp);

    // Before posting: reports a post the QP's state refuses or flushes.
    void posting_send(ibv_qp* qp);
    void posting_recv(ibv_qp* qp);
    // As each work request goes on its queue; `caller`: the program's call
    // of the verb (its return address). `readable` false when its source
    // is not all mapped (reported): the provider leaves reading it to the
    // daemon. `seq` and `posted_us` go in the WQE (queues::SendWqe).
    struct Posting {
        bool readable;
        uint32_t seq;
        uint32_t posted_us;
    };
    Posting posted_send(ibv_qp* qp, const ibv_send_wr& wr, const void* caller);
    // The last `count` sends posted never reach the daemon (a failed
    // ibv_wr_complete, ibv_wr_abort): forgotten.
    void unposted_sends(ibv_qp* qp, uint32_t count);
    void posted_recv(ibv_qp* qp, const ibv_recv_wr& wr);
    void posted_srq_recv(ibv_srq* srq, const ibv_recv_wr& wr);
    // A post the provider refused with `error`, at `bad` (Refusal).
    void refused_send(ibv_qp* qp, const ibv_send_wr& bad, int error);
    void refused_recv(ibv_qp* qp, const ibv_recv_wr& bad, int error);
    // Each poll of a CQ, and each completion polled.
    void polling(const ibv_cq* cq);
    void completed(const ibv_wc& wc);

    // Before ibv_dereg_mr: reports posted work that still names its keys.
    void deregistering(const ibv_mr* mr);
    // Before ibv_dealloc_mw: reports posted sends that name the window (a
    // bind of it, or an RDMA or atomic through its rkey).
    void deallocating_mw(const ibv_mw* mw);
    // Before ibv_destroy_cq: reports completion events got and never
    // acknowledged, for which a kernel's destroy waits for ever.
    void destroying_cq(const ibv_cq* cq, uint32_t events_reported);

    // A CQ, for the channel it reports events on.
    void cq_created(ibv_cq* cq);
    std::vector<ibv_cq*> cqs_on_channel(int fd);
    // ibv_get_cq_event has waited a while on a channel none of whose
    // `cqs` CQs is armed; they hold `held` completions.
    void blocked_unarmed(uint32_t cqs, uint32_t held);
    // It has waited a while, and some of the channel's CQs are armed.
    void blocked_armed(const ChannelWait& wait);
    // Each async event ibv_get_async_event returned, and the destroy of an
    // object (QP, CQ, SRQ, WQ) some of whose events were not acknowledged:
    // `completed` is libibverbs' count of acknowledged ones, under `mutex`.
    void async_event_got(const ibv_async_event& event);
    void destroying(const void* object, const char* verb, const uint32_t* completed,
                    pthread_mutex_t* mutex);

    // The program gives back `range` of its memory (`call`: madvise,
    // munmap, mremap, from `caller`): the MRs over it no longer hold the
    // program's pages (the bridge's watch, memory_calls.cpp).
    void memory_given_back(const Range& range, const char* call, const void* caller);

    // What is still alive, reported as leaks: at ibv_close_device
    // (`closing`) or at exit (by the process that opened the device only).
    void report_leaks(bool closing);

    // The process is about to fork(); `fork_safe`: ibv_fork_init or
    // RDMAV_FORK_SAFE asked for fork safety.
    void forking(bool fork_safe);

    // `verb` was given NULL for `argument`, which it reads (null_argument.cpp).
    void null_argument(const char* verb, const char* argument);

    // For the checkers (checker.h), under the lock their hooks run in.
    void report(const Finding& finding);
    // Reports `finding` once per QP and rule.
    void report_once(QpState& qp, const Finding& finding);
    // The MR `lkey` names, or null.
    const MrKey* mr_of(uint32_t lkey) const;
    const std::map<uint32_t, MrKey>& mrs() const { return mrs_; }
    // Whether this is the process that opened the device (not a child).
    bool in_opener() const { return getpid() == opener_; }

  private:
    // An outstanding write of the NIC into the process (Posted::lands).
    struct Landing {
        uint32_t count;  // work requests with exactly this range
        uint64_t wr_id;  // one of them, for reports
        uint32_t qpn;
        const char* what;
        const void* queue;  // the ibv_qp or ibv_srq they were posted to
    };

    QpState* find_qp(uint32_t qpn);
    // Counts `completions` more (or fewer) due on `cq` and not polled;
    // reports (once per CQ) when they pass its size.
    void add_pending(const ibv_cq* cq, int64_t completions, uint32_t qpn);
    // The QP's posted work is gone (reset, destroyed).
    void forget_posted(QpState& qp);
    // Reports the first gather or scatter element whose lkey names no MR,
    // an MR of another PD, bytes beyond it, or lacks IBV_ACCESS_LOCAL_WRITE
    // where the NIC writes (`writes`). `owner`: "QP" or "SRQ", whose PD `pd` is.
    void check_keys(QpState& qp, const char* owner, const ibv_pd* pd, const ibv_sge* sges,
                    int count, bool writes, const char* verb, uint64_t wr_id);
    // Where an element's bytes are in the process, if its lkey names an MR
    // of process memory that covers it: that MR, or null.
    MrKey* process_range(const ibv_sge& sge, Range& range);
    // Whether `range`, within `mr`, is mapped (process_memory.h).
    static bool readable(MrKey& mr, const Range& range);
    // Claims the ranges the NIC writes for a work request posted to `queue`
    // (an ibv_qp or ibv_srq), reporting one that overlaps another
    // outstanding one (not the same range of the same queue: one buffer for
    // every receive is a scratch buffer's idiom, and one queue's work lands
    // in order); releases them.
    std::vector<Range> claim_landings(uint32_t& reported, const void* queue, const ibv_sge* sges,
                                      int count, const char* what, const char* verb, uint64_t wr_id,
                                      uint32_t qpn);
    void release_landings(const Posted& work);
    // Whether the NIC may have written [range] since `epoch` (a landing
    // outstanding over it, or released since).
    bool landed_since(const Range& range, uint64_t epoch) const;
    // Samples a send's gather elements (Posted::sources); reports memory
    // gone from under its MR and returns false.
    bool sample_sources(QpState& qp, Posted& work, const char* verb);
    // At a send's successful completion: reports source bytes changed since.
    void compare_sources(QpState& qp, const Posted& work);
    // At an error completion: reports elements no longer mapped.
    void explain_error(QpState* qp, const Posted& work, const ibv_wc& wc);
    void report_unmapped(uint32_t qpn, const std::string& what, const ibv_sge& sge,
                         const void* posted_at);
    // At a post: reports an element in memory given back under its MR.
    void check_given_back(QpState& qp, const MrKey& mr, int index, const ibv_sge& sge,
                          const char* verb, uint64_t wr_id);
    void retire(QpState* qp, const Posted& work, const ibv_wc* wc);
    // Tells the daemon how many of the QP's sends are retired (after each
    // change of `sends`).
    static void publish_retired(QpState& qp);
    // At a send completion: asks the daemon for the finding about the QP
    // it has counted in the ring since the last (peers.cpp).
    void ask_findings(QpState& qp);
    // A UD send's first to its destination: asks the daemon whether that QP
    // takes its Q_Key.
    void check_ud_destination(QpState& qp, const ibv_send_wr& wr);
    // Calls `hook` of each checker.
    template <class Hook>
    void each_checker(Hook hook);

    Mode mode_;
    pid_t opener_;
    ControlClient& client_;
    std::string device_;
    std::mutex lock_;
    std::map<ibv_qp*, QpState> qps_;
    std::map<uint32_t, ibv_qp*> by_qpn_;
    std::map<const void*, std::deque<Posted>> srq_receives_;  // by ibv_srq*
    std::map<uint32_t, MrKey> mrs_;                           // by lkey
    std::map<const void*, uint64_t> cq_pending_;              // by ibv_cq*
    std::set<const void*> cqs_reported_;                      // ibv_cq*s reported
    std::map<const void*, uint32_t> srq_reported_;            // rule bit()s by ibv_srq*
    std::set<ibv_cq*> cqs_;
    // UD destinations (AH handle, remote QPN, remote Q_Key) whose Q_Key the
    // daemon was asked about, at most kUdDestinationsAsked.
    std::set<std::tuple<uint32_t, uint32_t, uint32_t>> ud_asked_;
    struct AsyncEvents {
        uint32_t count;
        ibv_event_type last;
    };
    std::map<const void*, AsyncEvents> async_events_;  // by the object they are about
    std::map<Range, Landing> landings_;
    uint64_t longest_landing_ = 0;
    uint64_t landing_epoch_ = 0;                     // landings released so far
    std::deque<std::pair<uint64_t, Range>> landed_;  // the latest released, by epoch
    uint64_t next_object_ = 0;
    std::map<const void*, std::pair<uint64_t, std::string>> live_;  // object -> (order, what)
    std::vector<std::unique_ptr<Checker>> checkers_;
};

// Whether the verb being run was called from the library whose file name
// contains `library` (the first frame outside libibverbs and the provider).
bool called_from(const char* library);

// Marks this thread as running check mode's own code for the object's
// lifetime: what it frees is not the program's release (process_memory.h).
class OwnCode {
  public:
    OwnCode();
    ~OwnCode();
    OwnCode(const OwnCode&) = delete;
    OwnCode& operator=(const OwnCode&) = delete;

  private:
    bool was_;
};

// The check state's lock, taken by a hook, which runs check mode's own code.
struct Held {
    explicit Held(std::mutex& m) : lock(m) {}
    std::lock_guard<std::mutex> lock;
    OwnCode own;
};

// Whether this thread is making a report (whose own memory calls the
// bridge's watch must not take for the program's).
bool reporting();

// At exit, after the leak report: with UROCE_CHECK_OPTIONS' exitcode=N,
// a process that had a finding ends with status N, as LeakSanitizer's.
void exit_if_found();

// Writes `finding` as a report (with the program's call stack, the
// provider's frames left out) where `mode` says, and sends it to the
// daemon; aborts in abort mode (report.cpp).
void deliver(Mode mode, ControlClient& client, const std::string& device, const Finding& finding);

}  // namespace check
}  // namespace uroce
