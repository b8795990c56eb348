#include "util/control_section.h"

namespace uroce {
namespace {

// Set once, before the control plane runs; handlers run on one thread.
ControlSection::Pauser* pauser = nullptr;
thread_local int depth = 0;

}  // namespace

void ControlSection::set_pauser(Pauser* p) {
    pauser = p;
}

ControlSection::ControlSection() {
    if (depth++ == 0 && pauser) {
        pauser->pause();
    }
}

ControlSection::~ControlSection() {
    if (--depth == 0 && pauser) {
        pauser->resume();
    }
}

}  // namespace uroce
