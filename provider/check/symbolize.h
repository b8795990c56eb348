// Where a frame of a report is in the program's source: its function, file
// and line, read from the debug information of its module with elfutils'
// libdw (loaded when a report first needs it, so that a program pays
// nothing for it otherwise), as a sanitizer's symbolizer reads them. A
// program built with -g is named by function, file and line without
// -rdynamic; where libdw or the debug information is missing, nothing is.
#pragma once

#include <stdint.h>

#include <optional>
#include <string>

struct Dwfl;  // elfutils' session over a process's modules

namespace uroce::check {

struct SourcePlace {
    std::string function;  // the function the code is in, inlined calls gone through
    std::string file;      // where that function makes the call (or runs the code)
    int line = 0;
};

// Loads libdw, when check mode starts: loaded at a report, its libraries
// could be mapped where the program has just freed an MR's memory, and
// hide the very misuse being reported (memory-unmapped).
void load_symbolizer();

// One per report: it reads the process's modules once.
class Symbolizer {
  public:
    Symbolizer();
    ~Symbolizer();
    Symbolizer(const Symbolizer&) = delete;
    Symbolizer& operator=(const Symbolizer&) = delete;

    // The place of the code at `pc` (a return address less one).
    std::optional<SourcePlace> place(uintptr_t pc) const;

  private:
    ::Dwfl* dwfl_ = nullptr;
};

}  // namespace uroce::check
