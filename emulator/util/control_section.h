// A control handler's turn (see engine/engines.h): while it runs, the
// daemon's other engine threads wait between two of their turns, so that
// the handler sees and changes devices and their objects as if the daemon
// had one thread. Every io_context handler that touches devices, their
// objects, the CM or the console's data runs in one. Sections nest; with
// one engine they cost nothing.
#pragma once

#include <utility>

namespace uroce {

class ControlSection {
  public:
    // What pauses and resumes the other engines (the daemon's Engines).
    class Pauser {
      public:
        virtual void pause() = 0;
        virtual void resume() = 0;

      protected:
        ~Pauser() = default;
    };
    static void set_pauser(Pauser* pauser);

    ControlSection();
    ~ControlSection();
    ControlSection(const ControlSection&) = delete;
    ControlSection& operator=(const ControlSection&) = delete;
};

// `handler`, run in a ControlSection when called.
template <class Handler>
auto in_control_section(Handler handler) {
    return [handler = std::move(handler)](auto&&... args) mutable {
        ControlSection section;
        handler(std::forward<decltype(args)>(args)...);
    };
}

}  // namespace uroce
