#include "objects/unpolled_cqs.h"

#include <algorithm>

#include "objects/objects.h"

namespace uroce {

void UnpolledCqs::add(Cq& cq) {
    if (!cq.unpolled) {
        cq.unpolled = true;
        entries_.push_back({&cq, cq.ring.consumed(), transport::kNever});
    }
}

void UnpolledCqs::remove(Cq& cq) {
    if (cq.unpolled) {
        cq.unpolled = false;
        std::erase_if(entries_, [&](const Entry& e) { return e.cq == &cq; });
    }
}

void UnpolledCqs::refresh(transport::Clock::time_point now) {
    starving_ = false;
    std::erase_if(entries_, [&](Entry& e) {
        const uint32_t consumed = e.cq->ring.consumed();
        if (consumed != e.consumed || e.since == transport::kNever) {
            e.consumed = consumed;
            e.since = now;
        }
        const bool done = e.cq->ring.unconsumed() == 0 || now - e.since > kPatience;
        if (done) {
            e.cq->unpolled = false;
        } else {
            starving_ |= now - e.since > kStarving;
        }
        return done;
    });
}

}  // namespace uroce
