// The daemon's registry of checked RDMA WRITEs (write_races.h). One for
// the daemon, as the QPs of every device and program write into the same
// peers; bounded, and pruned of WRITEs their programs retired as it is
// searched.
#include "transport/write_races.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <tuple>

#include "util/log.h"

namespace uroce::transport {
namespace {

// Bytes of a peer: its device's GID, the rkey, [start, end).
struct Target {
    std::array<uint8_t, 16> gid;
    uint32_t rkey;
    uint64_t start;
    uint64_t end;
    bool operator<(const Target& other) const {
        return std::tie(gid, rkey, start, end) <
               std::tie(other.gid, other.rkey, other.start, other.end);
    }
};

// The WRITEs of one QP to one target: the newest stands for them all (a
// program retires its QP's work in order).
struct Writer {
    std::weak_ptr<Qp> qp;
    uint32_t qpn;
    std::string device;
    uint64_t wr_id;
    uint32_t check_seq;
};

// When the program retired a WRITE, as its QP's log of retirements
// (queues::RingHeader) tells: how long ago (microseconds), whether at all,
// and whether that is the moment (a retirement before it is logged too) or
// only a bound (the log holds none from before).
struct Retirement {
    bool retired;
    bool exact;
    uint32_t age_us;
};

Retirement retirement(const Writer& writer, uint32_t now_us) {
    const std::shared_ptr<Qp> qp = writer.qp.lock();
    if (!qp) {
        return {true, false, UINT32_MAX};  // gone with its QP
    }
    Retirement found{false, false, 0};
    for (uint32_t i = 0; i < queues::kCheckRetireLog; ++i) {
        const uint64_t word = qp->send_queue.check_retired(i);
        const auto count = static_cast<uint32_t>(word >> 32);
        const uint32_t age = now_us - static_cast<uint32_t>(word);
        if (static_cast<int32_t>(count - writer.check_seq) < 0) {
            found.exact = true;  // logged before it retired (or never used)
        } else if (!found.retired || age > found.age_us) {
            found.retired = true;
            found.age_us = age;
        }
    }
    return found;
}

// Whether the program's poll of `writer`'s completion came before a WRITE
// posted `posted_age_us` ago. Where the log cannot tell, it says yes: a
// race is reported only when one is certain.
bool retired_before(const Writer& writer, uint32_t posted_age_us, uint32_t now_us) {
    const Retirement r = retirement(writer, now_us);
    return r.retired && (!r.exact || r.age_us >= posted_age_us);
}

// A writer retired this long ago can no longer race a WRITE being taken:
// the requester takes WQEs as they are posted.
constexpr uint32_t kForgetAfterUs = 1000000;

bool forgotten(const Writer& writer, uint32_t now_us) {
    const Retirement r = retirement(writer, now_us);
    return r.retired && r.age_us > kForgetAfterUs;
}

constexpr size_t kMaxWriters = 1 << 16;

struct Registry {
    std::mutex lock;
    std::map<std::pair<Target, const Qp*>, Writer> writers;
    uint64_t longest = 0;  // the longest target claimed, for the search's start
    bool full_said = false;
};

Registry& registry() {
    static Registry writes;
    return writes;
}

std::string hex(uint64_t value) {
    char text[24];
    snprintf(text, sizeof(text), "0x%" PRIx64, value);
    return text;
}

// Room for one more writer: the retired go first.
bool make_room(Registry& r, uint32_t now_us) {
    if (r.writers.size() < kMaxWriters) {
        return true;
    }
    std::erase_if(r.writers,
                  [now_us](const auto& entry) { return forgotten(entry.second, now_us); });
    if (r.writers.size() < kMaxWriters) {
        return true;
    }
    if (!r.full_said) {
        r.full_said = true;
        log_warn("check mode: %zu RDMA WRITEs outstanding; further ones are not checked for races",
                 kMaxWriters);
    }
    return false;
}

}  // namespace

void claim_write_target(const QpOf& at, const SendWork& w) {
    Qp& qp = at.qp;
    if (w.wqe.check_seq == 0 || w.length == 0 || w.error ||
        (w.wqe.opcode != IBV_WR_RDMA_WRITE && w.wqe.opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
        (qp.type != IBV_QPT_RC && qp.type != IBV_QPT_UC)) {
        return;
    }
    Target target{{}, w.wqe.rkey, w.wqe.remote_addr, w.wqe.remote_addr + w.length};
    memcpy(target.gid.data(), qp.attr.ah_attr.grh.dgid.raw, target.gid.size());
    Registry& r = registry();
    std::string what;
    const uint32_t now_us = queues::check_clock_us();
    const uint32_t posted_age_us = now_us - w.wqe.check_posted_us;
    std::lock_guard lock(r.lock);
    const uint64_t from = target.start > r.longest ? target.start - r.longest : 0;
    for (auto it = r.writers.lower_bound({{target.gid, target.rkey, from, 0}, nullptr});
         it != r.writers.end() && it->first.first.gid == target.gid &&
         it->first.first.rkey == target.rkey && it->first.first.start < target.end;) {
        const Target& range = it->first.first;
        const Writer& other = it->second;
        if (forgotten(other, now_us)) {
            it = r.writers.erase(it);
            continue;
        }
        if (range.end > target.start && it->first.second != &qp && what.empty() &&
            !retired_before(other, posted_age_us, now_us)) {
            const uint64_t shared =
                std::min(target.end, range.end) - std::max(target.start, range.start);
            what = "ibv_post_send: an RDMA WRITE (wr_id " + hex(w.wqe.wr_id) + ") of " +
                   std::to_string(w.length) + " bytes to " + hex(target.start) + " (rkey " +
                   hex(target.rkey) + ") overlaps " + std::to_string(shared) +
                   " bytes of an RDMA WRITE (wr_id " + hex(other.wr_id) + ") from QP " +
                   hex(other.qpn) + " of " + other.device +
                   " to the same memory that its program has not seen complete: nothing orders "
                   "the two.";
        }
        ++it;
    }
    const auto key = std::make_pair(target, &qp);
    if (r.writers.count(key) || make_room(r, now_us)) {
        r.writers[key] = {qp.weak_from_this(), qp.qpn, at.device.name(), w.wqe.wr_id,
                          w.wqe.check_seq};
        r.longest = std::max(r.longest, w.length);
    }
    if (what.empty() || !qp.requester.write_race.empty()) {
        return;
    }
    const InCase tagged(qp.owner_case.get());
    log_info("%s: QP 0x%x: check mode: write-race: %s", at.device.name().c_str(), qp.qpn,
             what.c_str());
    qp.requester.write_race = std::move(what);
    qp.requester.write_race_seq = w.wqe.check_seq;
    qp.send_queue.add_check_finding();
}

}  // namespace uroce::transport
