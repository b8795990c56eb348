#include "options.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "net/interfaces.h"
#include "protocol/queues.h"
#include "protocol/runtime_dir.h"

namespace uroce {
namespace {

constexpr const char* kUsage =
    "usage: uroced [--device NAME=ADDRESS|IFACE]... [--config FILE] [--runtime-dir DIR]\n"
    "              [--udp-port N] [--no-shortcut] [--nice N] [--max-log-bytes N]\n"
    "              [--threads N] [--no-io-uring] [--open] [--check] [--paranoid]\n"
    "              [--gid-layout uroce|rxe|mlx5]\n"
    "\n"
    "Runs the emulated RDMA devices in the foreground. Without --device or a\n"
    "config file: uroce0 on 127.0.0.1 and uroce1 on 127.0.0.2.\n"
    "ADDRESS: IPv4 or IPv6. IFACE: a network interface; the device is then its\n"
    "RDMA port, with a GID for each address the interface has, as they come and go.\n"
    "Config file lines: 'device NAME ADDRESS', 'udp-port N', 'no-io-uring', 'open';\n"
    "'#' starts a comment.\n"
    "--no-shortcut: packets between this daemon's own devices cross their UDP\n"
    "sockets, as between hosts, so that tcpdump or Wireshark on their interface (lo)\n"
    "sees them ('udp port N'); by default they pass in memory. uroce trace DEVICE\n"
    "--pcap FILE records a device's packets either way.\n"
    "--udp-port N: RoCEv2's UDP port (default 4791; when it is taken and every device\n"
    "is on loopback, another of this user's own). --open: devices on loopback take\n"
    "packets from anyone; by default only from this daemon's own devices.\n"
    "--threads N: engine threads, each running the data path of every Nth device\n"
    "(default: $UROCE_THREADS, else 1 on machines of fewer than 8 CPUs, else 2).\n"
    "--no-io-uring: sockets through epoll and sendmmsg/recvmmsg instead of io_uring\n"
    "(also $UROCE_NO_IO_URING=1). Without it, io_uring is used where it can be set\n"
    "up, and the readiness loop where it is refused (container seccomp profiles,\n"
    "kernel.io_uring_disabled); the log and uroce status say which.\n"
    "--check: every client checks its use of the verbs and reports its bugs\n"
    "(docs/check.md; one program: uroce exec --check).\n"
    "--paranoid: checks each QP's invariants after every step and aborts with a\n"
    "report naming the program's case when one breaks (docs/fuzzing.md).\n"
    "--gid-layout: the GID table as programs see it: uroce (default: the device's\n"
    "address at index 0), rxe (the link-local GID at 0, the address at 1) or mlx5\n"
    "(RoCE v1 and v2 entries per address: the IPv4 address's v2 GID at index 3;\n"
    "v1 entries are refused when used). docs/uroced.md.\n";

GidLayout parse_gid_layout(const std::string& name) {
    const auto layout = gid_layout_named(name);
    if (!layout) {
        throw std::invalid_argument("--gid-layout takes uroce, rxe or mlx5, not '" + name + "'");
    }
    return *layout;
}

DeviceConfig parse_device(const std::string& name, const std::string& address) {
    check_device_name(name);
    DeviceConfig config;
    config.name = name;
    const auto ip = wire::IpAddress::parse(address);
    if (!ip && if_nametoindex(address.c_str()) != 0) {
        const std::vector<wire::IpAddress> addresses = addresses_of(address);
        if (addresses.empty()) {
            throw std::invalid_argument("device " + name + ": interface " + address +
                                        " has no IPv4 or global IPv6 address");
        }
        config.address = addresses.front();
        config.netdev = address;
        config.follows_interface = true;
        return config;
    }
    if (!ip || ip->unspecified() || ip->multicast()) {
        throw std::invalid_argument("device " + name + ": '" + address +
                                    "' is neither an IPv4 or IPv6 address of a host nor an "
                                    "interface");
    }
    config.address = *ip;
    return config;
}

// The CPUs this process may run on (its affinity, as a container's limit).
unsigned available_cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        return static_cast<unsigned>(CPU_COUNT(&set));
    }
    return std::thread::hardware_concurrency();
}

uint32_t parse_threads(const std::string& text, const char* where) {
    try {
        size_t used = 0;
        const unsigned long threads = std::stoul(text, &used);
        if (used == text.size() && threads >= 1 && threads <= queues::kMaxEngines) {
            return static_cast<uint32_t>(threads);
        }
    } catch (const std::exception&) {
    }
    throw std::invalid_argument(std::string(where) + " takes a count from 1 to " +
                                std::to_string(queues::kMaxEngines) + ", not '" + text + "'");
}

// $UROCE_THREADS (how a test suite runs every daemon with N engines), else
// what suits the machine.
uint32_t threads_from_environment() {
    const char* threads = getenv("UROCE_THREADS");
    return threads && *threads ? parse_threads(threads, "UROCE_THREADS")
                               : default_threads(available_cpus());
}

uint16_t parse_port(const std::string& text) {
    try {
        size_t used = 0;
        const unsigned long port = std::stoul(text, &used);
        if (used == text.size() && port >= 1 && port <= 65535) {
            return static_cast<uint16_t>(port);
        }
    } catch (const std::exception&) {
    }
    throw std::invalid_argument("'" + text + "' is not a UDP port");
}

void read_config(const std::filesystem::path& path, Options& options) {
    std::ifstream in(path);
    if (!in) {
        throw std::invalid_argument("cannot read config file " + path.native());
    }
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        std::string key, a, b, extra;
        if (!(words >> key)) {
            continue;
        }
        words >> a >> b >> extra;
        const std::string where = path.native() + ":" + std::to_string(number) + ": ";
        try {
            if (key == "device" && !b.empty() && extra.empty()) {
                options.devices.push_back(parse_device(a, b));
            } else if (key == "udp-port" && !a.empty() && b.empty()) {
                options.udp_port = parse_port(a);
                options.udp_port_given = true;
            } else if (key == "open" && a.empty()) {
                options.open = true;
            } else if (key == "no-io-uring" && a.empty()) {
                options.io_uring = false;
            } else {
                throw std::invalid_argument("cannot parse '" + line + "'");
            }
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(where + e.what());
        }
    }
}

}  // namespace

std::vector<uint16_t> udp_ports(const Options& options) {
    std::vector<uint16_t> ports{options.udp_port};
    const bool loopback = std::all_of(options.devices.begin(), options.devices.end(),
                                      [](const DeviceConfig& d) { return d.address.loopback(); });
    if (options.udp_port_given || !loopback) {
        return ports;
    }
    // FNV-1a over the uid and the directory: where this daemon's run starts,
    // below the ephemeral ports (32768-) that clients' sockets take.
    uint64_t hash = 0xcbf29ce484222325ull;
    const std::string key = std::to_string(getuid()) + ":" + options.runtime_dir.native();
    for (const unsigned char c : key) {
        hash = (hash ^ c) * 0x100000001b3ull;
    }
    constexpr uint16_t kFirst = 20000, kCount = 12000, kTries = 64;
    const auto start = static_cast<uint16_t>(hash % kCount);
    for (uint16_t i = 0; i < kTries; ++i) {
        ports.push_back(static_cast<uint16_t>(kFirst + (start + i) % kCount));
    }
    return ports;
}

uint32_t default_threads(unsigned cpus) {
    return cpus < 8 ? 1 : 2;
}

void check_device_name(const std::string& name) {
    static const std::regex kName("[a-z][a-z0-9_]{0,30}");
    if (!std::regex_match(name, kName) || name.rfind("uroce", 0) != 0) {
        throw std::invalid_argument("device name '" + name +
                                    "' must start with 'uroce' and use [a-z0-9_]");
    }
}

namespace {

// `text` as a whole number from `low` to `high`, else `refusal` and it.
int64_t parse_number(const std::string& text, int64_t low, int64_t high,
                     const std::string& refusal) {
    try {
        size_t used = 0;
        const long long number = std::stoll(text, &used);
        if (used == text.size() && number >= low && number <= high) {
            return number;
        }
    } catch (const std::exception&) {
    }
    throw std::invalid_argument(refusal + ", not '" + text + "'");
}

}  // namespace

bool parse_options(int argc, char** argv, Options& options) {
    options.runtime_dir = default_runtime_dir();
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                throw std::invalid_argument(arg + " needs a value");
            }
            return argv[++i];
        };
        if (arg == "--help" || arg == "-h") {
            std::cout << kUsage;
            return false;
        } else if (arg == "--device") {
            const std::string spec = value();
            const auto eq = spec.find('=');
            if (eq == std::string::npos) {
                throw std::invalid_argument("--device takes NAME=ADDRESS or NAME=IFACE, not '" +
                                            spec + "'");
            }
            options.devices.push_back(parse_device(spec.substr(0, eq), spec.substr(eq + 1)));
        } else if (arg == "--config") {
            read_config(value(), options);
        } else if (arg == "--runtime-dir") {
            options.runtime_dir = value();
        } else if (arg == "--nice") {
            options.nice = static_cast<int>(
                parse_number(value(), -20, 19, "--nice takes a value from -20 to 19"));
        } else if (arg == "--max-log-bytes") {
            options.max_log_bytes = parse_number(value(), 4096, std::numeric_limits<int64_t>::max(),
                                                 "--max-log-bytes takes a size of at least 4096");
        } else if (arg == "--threads") {
            options.threads = parse_threads(value(), "--threads");
        } else if (arg == "--no-shortcut") {
            options.shortcut = false;
        } else if (arg == "--no-io-uring") {
            options.io_uring = false;
        } else if (arg == "--check") {
            options.check = true;
        } else if (arg == "--paranoid") {
            options.paranoid = true;
        } else if (arg == "--gid-layout") {
            options.gid_layout = parse_gid_layout(value());
        } else if (arg == "--udp-port") {
            options.udp_port = parse_port(value());
            options.udp_port_given = true;
        } else if (arg == "--open") {
            options.open = true;
        } else {
            throw std::invalid_argument("unknown argument '" + arg + "'\n" + kUsage);
        }
    }
    if (options.threads == 0) {
        options.threads = threads_from_environment();
    }
    // How a test suite runs every daemon on the readiness loop.
    if (const char* no = getenv("UROCE_NO_IO_URING"); no && *no && std::string(no) != "0") {
        options.io_uring = false;
    }
    if (options.devices.empty()) {
        options.devices = {parse_device("uroce0", "127.0.0.1"),
                           parse_device("uroce1", "127.0.0.2")};
    }
    for (size_t i = 0; i < options.devices.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (options.devices[i].name == options.devices[j].name) {
                throw std::invalid_argument("device " + options.devices[i].name +
                                            " is given twice");
            }
            if (options.devices[i].address == options.devices[j].address) {
                throw std::invalid_argument("devices " + options.devices[j].name + " and " +
                                            options.devices[i].name + " share an address");
            }
        }
    }
    return true;
}

}  // namespace uroce
