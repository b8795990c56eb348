// The stages every packet a device sends goes through once it is built, in
// order: the device's trace records it; step mode's gate holds it while
// the device's wire is paused; the device's faults lose, copy or delay it
// (the delay line keeps it until its time); then the engine routes it
// (engine/delivery.cpp: to a device of this daemon, or onto the network).
// The console's packet log records each packet's fate on the way. Without
// a trace, a paused wire, faults or a console, a packet costs a few tests
// of flags here.
#pragma once

#include <map>
#include <vector>

#include "device/device.h"
#include "engine/device_sockets.h"
#include "engine/packet_buffers.h"
#include "net/outgoing_packet.h"
#include "net/packet_log.h"
#include "transport/transport.h"

namespace uroce {

class SendPath {
  public:
    // Where a packet goes once the stages let it.
    class Route {
      public:
        virtual void route(Device& from, OutgoingPacket&& packet) = 0;

      protected:
        ~Route() = default;
    };

    // Packets the delay line holds at once; beyond, the fault drops them.
    static constexpr size_t kMaxDelayed = 16384;

    SendPath(Route& route, const DeviceSockets& sockets, PacketBuffers& buffers,
             PacketLog& packet_log, uint16_t udp_port)
        : route_(route),
          sockets_(sockets),
          buffers_(buffers),
          packet_log_(packet_log),
          udp_port_(udp_port) {}

    void send(Device& from, OutgoingPacket&& packet);
    // What step mode let go on the devices since the last turn: on through
    // the faults.
    bool release_stepped(const std::vector<Device*>& devices);
    // The delayed packets whose time has come: routed.
    bool release_delayed(transport::Clock::time_point now);
    // When the next delayed packet is due; kNever when none is.
    transport::Clock::time_point next_delayed() const {
        return delayed_.empty() ? transport::kNever : delayed_.begin()->first;
    }
    // The delayed packets from `device` go (it leaves, or is reset).
    void forget(const Device& device);

  private:
    struct Delayed {
        Device* from;
        OutgoingPacket packet;
    };
    // Past the gate: faults, when the device has some, then the route.
    void pass_faults(Device& from, OutgoingPacket&& packet);
    void apply_faults(Device& from, OutgoingPacket&& packet);
    // Into the console's log; only while it is enabled.
    void log(const Device& from, const OutgoingPacket& packet, PacketLog::Fate fate,
             uint64_t step_id = 0);

    Route& route_;
    const DeviceSockets& sockets_;
    PacketBuffers& buffers_;
    PacketLog& packet_log_;
    const uint16_t udp_port_;
    std::multimap<transport::Clock::time_point, Delayed> delayed_;
};

}  // namespace uroce
