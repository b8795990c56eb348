// A device's port follows its interface's link as rxe's does.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "device/device.h"

namespace uroce {
namespace {

TEST(device_port, ActiveMtuIsTheLargestThatFitsTheLinkLessRxesHeaders) {
    EXPECT_EQ(ib_mtu_for_link(65536), IBV_MTU_4096);  // lo
    EXPECT_EQ(ib_mtu_for_link(9000), IBV_MTU_4096);
    EXPECT_EQ(ib_mtu_for_link(4096 + 80), IBV_MTU_4096);
    EXPECT_EQ(ib_mtu_for_link(4096 + 79), IBV_MTU_2048);
    EXPECT_EQ(ib_mtu_for_link(1500), IBV_MTU_1024);  // Ethernet's default
    EXPECT_EQ(ib_mtu_for_link(1024 + 80), IBV_MTU_1024);
    EXPECT_EQ(ib_mtu_for_link(1024 + 79), IBV_MTU_512);
    EXPECT_EQ(ib_mtu_for_link(1280), IBV_MTU_1024);  // IPv6's minimum
    EXPECT_EQ(ib_mtu_for_link(576), IBV_MTU_256);
    EXPECT_EQ(ib_mtu_for_link(68), IBV_MTU_256);  // below 256: still 256, as rxe_set_mtu
    EXPECT_EQ(ib_mtu_for_link(0), IBV_MTU_256);
}

Device make_device() {
    DeviceConfig config;
    config.name = "uroce0";
    config.address = *wire::IpAddress::parse("127.0.0.1");
    return Device(config, 0);
}

TEST(device_port, FollowsTheLinkAndSaysWhatChanged) {
    Device device = make_device();
    EXPECT_EQ(device.port_attr().state, IBV_PORT_ACTIVE);
    EXPECT_EQ(device.port_attr().active_mtu, IBV_MTU_4096);

    PortChange change = device.follow_link({1500, true});
    EXPECT_FALSE(change.state);
    EXPECT_TRUE(change.mtu);
    EXPECT_EQ(device.port_attr().active_mtu, IBV_MTU_1024);
    EXPECT_EQ(device.port_attr().max_mtu, IBV_MTU_4096);  // what the device can, whatever the link

    change = device.follow_link({1500, false});
    EXPECT_TRUE(change.state);
    EXPECT_FALSE(change.mtu);
    EXPECT_EQ(device.port_attr().state, IBV_PORT_DOWN);
    EXPECT_EQ(device.port_attr().phys_state, 3);  // Disabled

    change = device.follow_link({1500, false});
    EXPECT_FALSE(change.state || change.mtu);  // nothing new: no event

    change = device.follow_link({9000, true});
    EXPECT_TRUE(change.state && change.mtu);
    EXPECT_EQ(device.port_attr().state, IBV_PORT_ACTIVE);
    EXPECT_EQ(device.port_attr().phys_state, 5);  // LinkUp
    EXPECT_EQ(device.link(), (Link{9000, true}));
}

}  // namespace
}  // namespace uroce
