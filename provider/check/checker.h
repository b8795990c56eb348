// One class of check mode as a Checker (docs/check.md): hooks that do
// nothing unless the class overrides them. CheckState calls each hook of
// every checker (checkers.cpp lists them) under its lock, after its own
// bookkeeping, so a class reads the QP's state as a NIC's queues hold it
// and reports through CheckState::report. A new class is a file with a
// Checker, its row in catalog.cpp and in checkers.cpp, its programs and
// its test.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <vector>

#include "check.h"

namespace uroce::check {

// A post the provider refused (`error`, an errno), with the work request
// it stopped at: exactly one of `send` and `recv` is set.
struct Refusal {
    int error;
    const ibv_send_wr* send;
    const ibv_recv_wr* recv;
};

// A wait in ibv_get_cq_event that has lasted a second: how many of the
// channel's CQs are armed and the completions those armed ones hold.
struct ChannelWait {
    uint32_t cqs;
    uint32_t armed;
    uint32_t held_by_armed;
};

class Checker {
  public:
    virtual ~Checker() = default;
    // After ibv_create_qp (QpState::asked and ::granted are set).
    virtual void qp_created(CheckState&, QpState&) {}
    // After a successful ibv_modify_qp; `port`: the attributes of the QP's
    // port, when the modify set its path MTU.
    virtual void qp_modified(CheckState&, QpState&, ibv_qp_state /*from*/,
                             const ibv_qp_attr& /*attr*/, int /*mask*/,
                             const ibv_port_attr* /*port*/) {}
    // A call of ibv_post_send (`send`) or ibv_post_recv, before it posts.
    virtual void posting(CheckState&, QpState&, ibv_qp_state /*now*/, bool /*send*/) {}
    // Each send work request as it goes on the queue.
    virtual void posted_send(CheckState&, QpState&, const ibv_send_wr&) {}
    // Each receive work request as it goes on a queue; `qp` null for an SRQ.
    virtual void posted_recv(CheckState&, QpState* /*qp*/, const ibv_recv_wr&) {}
    virtual void refused(CheckState&, QpState&, const Refusal&) {}
    // Each completion polled; `qp` null when it is of a QP not seen here.
    virtual void completed(CheckState&, QpState* /*qp*/, const ibv_wc&) {}
    // ibv_destroy_qp took `removed` completions of it out of `cq`.
    virtual void qp_destroyed(CheckState&, const QpState&, const ibv_cq* /*cq*/,
                              uint32_t /*removed*/) {}
    // A poll of `cq` (each ibv_poll_cq, each ibv_start_poll).
    virtual void polling(CheckState&, const ibv_cq*) {}
    virtual void waiting(CheckState&, const ChannelWait&) {}
    // The process is about to fork() (CheckState::forking).
    virtual void forking(CheckState&, bool /*fork_safe*/) {}
    // The MR of `lkey` is deregistered (or reregistered under a new key).
    virtual void mr_gone(CheckState&, uint32_t /*lkey*/) {}
    // An object (a CQ, an SRQ, ...) is gone: forget what is kept about it.
    virtual void destroyed(CheckState&, const void* /*object*/) {}
};

template <class Hook>
void CheckState::each_checker(Hook hook) {
    for (const std::unique_ptr<Checker>& checker : checkers_) {
        hook(*checker);
    }
}

// One checker of each class that works through hooks (checkers.cpp).
std::vector<std::unique_ptr<Checker>> make_checkers();

}  // namespace uroce::check
