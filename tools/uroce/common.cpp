// What the uroce commands share (uroce.h).
#include <errno.h>
#include <string.h>

#include <iostream>

#include "uroce.h"
#include "uroce_abi.h"

namespace fs = std::filesystem;

namespace uroce::tool {

int usage_error(const std::string& why) {
    std::cerr << "uroce: " << why << "\n" << kUsage;
    return kExitUsage;
}

// Beside the uroce command: in a build tree, lib/ holds the bridge and the
// provider; where it is installed, the prefix's libdir/uroce and
// libdir/libibverbs (CMakeLists.txt). Both are found from where the
// command is, whatever prefix it was installed under.
Locations locate() {
    const fs::path bin = fs::read_symlink("/proc/self/exe").parent_path();
    const fs::path prefix = bin.parent_path();
    Locations where{bin / "uroced", prefix / "lib" / "liburoce-bridge.so",
                    prefix / "lib" / "liburoce"};
    if (!fs::exists(where.bridge)) {
        where.bridge = prefix / UROCE_BRIDGE_INSTALL_DIR / "liburoce-bridge.so";
        where.provider = prefix / UROCE_PROVIDER_INSTALL_DIR / "liburoce";
    }
    if (!fs::exists(where.provider.parent_path() / UROCE_PROVIDER_LIBRARY)) {
        where.provider.clear();  // only through uroce.driver, wherever libibverbs has it
    }
    return where;
}

std::string query_status(const RuntimePaths& paths, std::string* refusal) {
    std::string why;
    std::unique_ptr<ControlClient> client(
        ControlClient::connect(paths.socket().c_str(), "", -1, why));
    if (!client) {
        // ENODEV: nothing answers on the socket; anything else was the daemon's answer.
        if (refusal && errno != ENODEV) {
            *refusal = why;
        }
        return {};
    }
    std::string text;
    if (client->call_status(text) != 0) {
        if (refusal) {
            *refusal = client->last_error();
        }
        return {};
    }
    return text;
}

int not_running(const RuntimePaths& paths) {
    std::cerr << "uroced is not running (runtime directory " << paths.dir.native()
              << ").\nStart it with: uroce start\n";
    return kExitNotRunning;
}

std::unique_ptr<ControlClient> connect_tool(const RuntimePaths& paths, int& exit_code) {
    std::string why;
    std::unique_ptr<ControlClient> client(
        ControlClient::connect(paths.socket().c_str(), "", -1, why));
    if (!client) {
        // ENODEV: nothing answers on the socket. Anything else is a daemon
        // that refused the hello (another protocol version, say).
        if (errno == ENODEV) {
            exit_code = not_running(paths);
        } else {
            std::cerr << "uroce: " << why << "\n";
            exit_code = kExitFailure;
        }
    }
    return client;
}

int refused(const ControlClient& client) {
    std::cerr << "uroce: " << client.last_error() << "\n";
    return kExitFailure;
}

int ask_about_device(const RuntimePaths& paths, const Args& args, const std::string& command,
                     rpc::Op op, void* reply, size_t reply_size) {
    if (args.size() > 1) {
        return usage_error(command + " takes at most one device");
    }
    rpc::DeviceRequest request{};
    if (!args.empty() && !set_device_name(request.device, args.front())) {
        return kExitFailure;
    }
    int exit_code;
    auto client = connect_tool(paths, exit_code);
    if (!client) {
        return exit_code;
    }
    return client->call(op, &request, sizeof(request), reply, reply_size) ? refused(*client) : 0;
}

bool set_device_name(char (&field)[rpc::kNameLen], const std::string& name) {
    if (name.size() >= sizeof(field)) {
        std::cerr << "uroce: no device named " << name << "\n";
        return false;
    }
    memset(field, 0, sizeof(field));
    memcpy(field, name.data(), name.size());
    return true;
}

}  // namespace uroce::tool
