// uroced's command line and configuration file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "device/device.h"

namespace uroce {

struct Options {
    std::vector<DeviceConfig> devices;  // default: uroce0 127.0.0.1, uroce1 127.0.0.2
    std::filesystem::path runtime_dir;
    uint16_t udp_port = 4791;
    bool udp_port_given = false;  // --udp-port or a config line; else chosen (udp_ports())
    bool shortcut = true;         // packets between this daemon's devices skip UDP
    // Sockets through io_uring where it can be set up; false (--no-io-uring,
    // a config line, $UROCE_NO_IO_URING): the readiness loop (net/socket_io.h).
    bool io_uring = true;
    // Devices on loopback take packets from anyone (--open, a config line
    // 'open'), not only from this daemon's own devices.
    bool open = false;
    bool check = false;     // every client in check mode (docs/check.md)
    bool paranoid = false;  // every QP's invariants after every step (transport/invariants.h)
    GidLayout gid_layout = GidLayout::kUroce;  // every device's (device/gid_table.h)
    // Nice value to run at when permitted. Applications busy-poll their
    // CQs; on a small machine the daemon, like a NIC's interrupt work in a
    // kernel, must get the CPU when woken rather than wait for a time slice.
    int nice = -10;
    // The log is started anew past this size, the full one kept as .1.
    uint64_t max_log_bytes = 8 << 20;
    // Engine threads, each with its devices (engine/engines.h); 0 until
    // parsed: --threads, else $UROCE_THREADS, else default_threads().
    uint32_t threads = 0;
};

// Engine threads for a machine of this many CPUs: one below 8, as the
// busy-polling programs need the others; else one per device of the
// default pair.
uint32_t default_threads(unsigned cpus);

// The UDP ports to try, in order: the one given; else 4791 and, when every
// device is on loopback (where no other host needs the standard port), then
// a run of 64 from a place of this user's and runtime directory's own, so
// that the default devices of two users, or of two runtime directories,
// never share a port however many daemons run.
std::vector<uint16_t> udp_ports(const Options& options);

// Parses argv; throws std::invalid_argument with a message for the user.
// Returns false when only help was asked for (printed to stdout).
bool parse_options(int argc, char** argv, Options& options);

// Throws std::invalid_argument unless `name` is one a device may have:
// "uroce" and up to 26 more of [a-z0-9_].
void check_device_name(const std::string& name);

}  // namespace uroce
