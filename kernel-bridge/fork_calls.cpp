// ibv_fork_init, watched for check mode's fork-unsafe (docs/check.md): the
// call leaves no trace in libibverbs where the kernel (here, the daemon)
// says it copies pinned pages at fork, so the bridge remembers it.
#include <errno.h>
#include <infiniband/verbs.h>

#include "emulator/protocol/bridge_abi.h"
#include "interpose.h"

namespace {

int fork_init_called;

}  // namespace

EXPORT int ibv_fork_init(void) {
    __atomic_store_n(&fork_init_called, 1, __ATOMIC_RELEASE);
    auto real = VERBS_NEXT(ibv_fork_init, "IBVERBS_1.1");
    return real ? real() : ENOSYS;
}

EXPORT int uroce_bridge_fork_init_called(void) {
    return __atomic_load_n(&fork_init_called, __ATOMIC_ACQUIRE);
}
