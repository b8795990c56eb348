#include "queues/doorbell.h"

#include <sys/eventfd.h>

namespace uroce {

Result Doorbell::create(Doorbell& out) {
    Doorbell doorbell;
    doorbell.eventfd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!doorbell.eventfd_) {
        return fail(errno, "cannot create the doorbell eventfd");
    }
    if (Result r =
            SharedMemory::create("uroce-doorbell", sizeof(queues::DoorbellPage), doorbell.page_);
        !r) {
        return r;
    }
    out = std::move(doorbell);
    return ok();
}

}  // namespace uroce
