// Where NICs differ in behaviour a program may rely on without knowing:
// what uroce chose and what the others do (portability.cpp, as data). A
// report that touches one says so, in full the first time in the process.
#pragma once

#include <stdint.h>

#include <string>

namespace uroce::check {

enum class Difference : uint8_t {
    kUnsignaledSlots,
    kInlineGranted,
    kCompletionsAfterDestroy,
    kDestroyWithUnackedEvents,
    kMtuAboveActive,
    kCount,
};

// "  NICs differ (inline-granted): uroce ...; mlx5 ...\n" the first time
// in this process, a line pointing back to it after.
std::string differences_line(Difference difference);

}  // namespace uroce::check
