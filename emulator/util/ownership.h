// Who may touch a device's state (engine/engines.h). Each device belongs to
// one engine, and only that engine's thread changes its state, during its
// turns. The control plane (requests, the CM, the console, link news) runs
// on engine 0's thread, in control turns: a turn pauses another engine, between
// two of its turns, the first time it touches one of that engine's
// devices (ownership::touch, called by the device's accessors), or every
// engine where the whole daemon is its subject (ownership::claim_all), and
// lets them go when it ends. So a program's requests on one engine's
// devices never stall the others, and no handler takes the section by hand.
//
// uroced --paranoid: a touch from any other thread than the owner's, or
// from engine 0's thread outside a control turn, aborts the daemon.
#pragma once

#include <stdint.h>

#include <utility>

namespace uroce {
namespace ownership {

// What pauses and resumes an engine (the daemon's Engines): pause returns
// once the engine is between two turns and waits; resume lets it go on.
// `for_daemon`: whether the pause was for the whole daemon rather than
// for the engine's own devices (what `uroce status` tells apart).
class Pauser {
  public:
    virtual void pause(uint32_t engine) = 0;
    virtual void resume(uint32_t engine, bool for_daemon) = 0;
    virtual uint32_t engines() const = 0;

  protected:
    ~Pauser() = default;
};
void set_pauser(Pauser* pauser);
// --paranoid (and any sanitizer build): a touch out of turn aborts.
void set_paranoid(bool paranoid);
// This thread runs engine `engine`'s turns (engine 0's: the control plane's too).
void set_thread_engine(uint32_t engine);

// The engine whose turns this thread runs; -1 for none (a test's thread).
extern thread_local int32_t thread_engine;
void touch_other(uint32_t engine);
// Before the state of a device of engine `engine` is read or changed.
inline void touch(uint32_t engine) {
    if (thread_engine != static_cast<int32_t>(engine)) [[unlikely]] {
        touch_other(engine);
    }
}
// In a control turn: pauses every engine until the turn ends (reset, a
// device added or removed, the console's packet log switched).
void claim_all();
// Whether this thread is in a control turn.
bool in_control_turn();

}  // namespace ownership

// A control handler's turn (see above). Turns nest; the outermost lets the
// paused engines go.
class ControlTurn {
  public:
    ControlTurn();
    ~ControlTurn();
    ControlTurn(const ControlTurn&) = delete;
    ControlTurn& operator=(const ControlTurn&) = delete;
};

// `handler`, run in a ControlTurn when called: how every io_context handler
// of the control plane is wrapped.
template <class Handler>
auto in_control_turn(Handler handler) {
    return [handler = std::move(handler)](auto&&... args) mutable {
        ControlTurn turn;
        handler(std::forward<decltype(args)>(args)...);
    };
}

}  // namespace uroce
