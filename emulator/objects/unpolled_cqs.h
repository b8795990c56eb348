// The CQs of a device that hold completions their program has not taken
// yet. Programs spin on their CQs, and with fewer cores than spinning
// programs plus the daemon, the program a completion waits for may be the
// one without a CPU. While any such completion waits, the daemon asks
// every poller that finds its own CQ empty to give its CPU away
// (queues::DoorbellPage::completions_waiting), and while a program has
// taken nothing for a while, the daemon gives its own CPU away too.
#pragma once

#include <stdint.h>

#include <vector>

#include "objects/qp_state.h"

namespace uroce {

struct Cq;

class UnpolledCqs {
  public:
    // A program that took none of its completions for this long may be
    // waiting for the daemon's CPU (a spinning one takes them within a
    // microsecond when it has a CPU of its own).
    static constexpr auto kStarving = std::chrono::microseconds(20);
    // A CQ whose program took nothing for this long has no program spinning
    // on it (one that sleeps until its event gets its CPU without help): it
    // stops counting until its next completion.
    static constexpr auto kPatience = std::chrono::milliseconds(1);

    // `cq` got a completion.
    void add(Cq& cq);
    // `cq` is going away.
    void remove(Cq& cq);
    // Looks at what each program has taken: drops the CQs whose
    // completions were all taken and those that waited longer than
    // kPatience.
    void refresh(transport::Clock::time_point now);
    // Whether some CQ holds completions its program has not taken.
    bool any() const { return !entries_.empty(); }
    // Whether some program has taken nothing for kStarving (as of the last
    // refresh).
    bool starving() const { return starving_; }

  private:
    struct Entry {
        Cq* cq;
        uint32_t consumed;                   // the program's index at `since`
        transport::Clock::time_point since;  // when it last took something
    };
    std::vector<Entry> entries_;
    bool starving_ = false;
};

}  // namespace uroce
