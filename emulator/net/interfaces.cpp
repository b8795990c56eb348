#include "net/interfaces.h"

#include <ifaddrs.h>

namespace uroce {

std::string interface_holding(in_addr address) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        return "lo";
    }
    std::string name = "lo";
    for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr ==
                address.s_addr) {
            name = ifa->ifa_name;
            name = name.substr(0, name.find(':'));  // an address label ("eth0:1") names eth0
            break;
        }
    }
    freeifaddrs(list);
    return name;
}

}  // namespace uroce
