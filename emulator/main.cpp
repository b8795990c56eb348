// uroced: the emulated RDMA devices.
#include <iostream>
#include <stdexcept>

#include "daemon.h"
#include "options.h"
#include "util/log.h"

int main(int argc, char** argv) {
    uroce::Options options;
    try {
        if (!uroce::parse_options(argc, argv, options)) {
            return 0;
        }
    } catch (const std::invalid_argument& e) {
        std::cerr << "uroced: " << e.what() << "\n";
        return 2;
    }
    try {
        uroce::Daemon daemon(options);
        daemon.run();
    } catch (const std::exception& e) {
        uroce::log_warn("cannot run: %s", e.what());
        std::cerr << "uroced: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
