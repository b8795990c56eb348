#include "net/fault_injector.h"

namespace uroce {

FaultVerdict FaultInjector::decide() {
    FaultVerdict verdict;
    if (chance(settings_.drop)) {
        verdict.drop = true;
        return verdict;
    }
    verdict.copies = chance(settings_.duplicate) ? 2 : 1;
    verdict.delay =
        settings_.delay + (chance(settings_.reorder) ? kReorderHold : std::chrono::microseconds(0));
    return verdict;
}

}  // namespace uroce
