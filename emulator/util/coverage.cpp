#include "util/coverage.h"

namespace uroce::coverage {

Counts& counts() {
    static Counts daemon;
    return daemon;
}

}  // namespace uroce::coverage
