// The daemon's doorbell: an eventfd clients write after producing entries,
// but only while the shared DoorbellPage says the daemon is about to sleep.
#pragma once

#include "protocol/queues.h"
#include "queues/shared_memory.h"
#include "util/unique_fd.h"

namespace uroce {

class Doorbell {
  public:
    static Result create(Doorbell& out);

    int eventfd() const { return eventfd_.get(); }
    int page_fd() const { return page_.fd(); }
    queues::DoorbellPage& page() const { return *static_cast<queues::DoorbellPage*>(page_.data()); }

  private:
    UniqueFd eventfd_;
    SharedMemory page_;
};

}  // namespace uroce
