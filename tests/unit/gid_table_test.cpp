#include "device/gid_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace uroce {
namespace {

wire::IpAddress ip(const char* text) {
    const auto address = wire::IpAddress::parse(text);
    EXPECT_TRUE(address.has_value()) << text;
    return address.value_or(wire::IpAddress());
}

constexpr uint64_t kGuid = 0x0002c9fffe000001ull;

std::string text_of(const std::optional<wire::IpAddress>& a) {
    return a ? a->text() : "(empty)";
}

// Before the interface is read: the device's address and a link-local GID
// made from the node GUID.
TEST(GidTable, StartsWithTheAddressAndAMadeLinkLocalGid) {
    GidTable table(ip("10.0.0.1"), kGuid);
    ASSERT_EQ(table.gids().size(), 2u);
    EXPECT_EQ(text_of(table.address(0)), "10.0.0.1");
    EXPECT_EQ(text_of(table.address(1)), "fe80::2:c9ff:fe00:1");
    EXPECT_FALSE(table.address(2));
    EXPECT_FALSE(table.interface_address(0));
    EXPECT_FALSE(table.interface_address(1));
}

// The interface's link-local address takes slot 1; its other addresses,
// IPv4 and IPv6, the slots from 2; the device's own is not repeated.
TEST(GidTable, FollowsTheInterfacesAddresses) {
    GidTable table(ip("10.0.0.1"), kGuid);
    const auto change =
        table.follow({ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1"), ip("fe80::1234")});
    EXPECT_EQ(text_of(table.address(1)), "fe80::1234");
    EXPECT_EQ(text_of(table.address(2)), "10.0.0.9");
    EXPECT_EQ(text_of(table.address(3)), "fd00::1");
    EXPECT_EQ(table.gids().size(), 4u);
    EXPECT_EQ(change.added.size(), 3u);
    EXPECT_TRUE(change.removed.empty());
    EXPECT_EQ(table.index_of(ip("fd00::1")), 3u);
    EXPECT_EQ(text_of(table.interface_address(1)), "fe80::1234");
    EXPECT_EQ(text_of(table.interface_address(3)), "fd00::1");
    EXPECT_FALSE(table.interface_address(0));
    EXPECT_EQ(table.index_of(ip("10.0.0.1")), 0u);
    EXPECT_FALSE(table.index_of(ip("10.0.0.2")));
    EXPECT_FALSE(
        table.follow({ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1"), ip("fe80::1234")}).any());
}

// A removed address empties its slot; the others keep their indexes, and
// the next address takes the first empty slot.
TEST(GidTable, ARemovedAddressLeavesAHoleTheNextOneFills) {
    GidTable table(ip("10.0.0.1"), kGuid);
    table.follow({ip("10.0.0.7"), ip("10.0.0.8"), ip("10.0.0.9")});
    auto change = table.follow({ip("10.0.0.7"), ip("10.0.0.9")});
    ASSERT_EQ(change.removed.size(), 1u);
    EXPECT_EQ(change.removed[0], ip("10.0.0.8"));
    EXPECT_FALSE(table.address(3));
    EXPECT_EQ(text_of(table.address(4)), "10.0.0.9");
    EXPECT_EQ(table.gids().size(), 5u);
    change = table.follow({ip("10.0.0.7"), ip("10.0.0.9"), ip("fd00::5")});
    EXPECT_EQ(text_of(table.address(3)), "fd00::5");
    // The last slots emptied: the table ends at the last used one.
    table.follow({ip("10.0.0.7")});
    EXPECT_EQ(table.gids().size(), 3u);
}

// Losing the link-local address brings the made one back.
TEST(GidTable, WithoutALinkLocalAddressSlot1IsTheMadeOne) {
    GidTable table(ip("fd00::1"), kGuid);
    table.follow({ip("fd00::1"), ip("fe80::9")});
    const auto change = table.follow({ip("fd00::1")});
    ASSERT_EQ(change.removed.size(), 1u);
    EXPECT_EQ(change.removed[0], ip("fe80::9"));
    EXPECT_TRUE(change.added.empty());
    EXPECT_EQ(text_of(table.address(1)), "fe80::2:c9ff:fe00:1");
}

// Beyond the table's 16 slots, addresses are left out and counted.
TEST(GidTable, AddressesBeyondTheTableAreLeftOut) {
    GidTable table(ip("10.0.0.1"), kGuid);
    std::vector<wire::IpAddress> many;
    for (int i = 0; i < 20; ++i) {
        many.push_back(ip(("10.0.1." + std::to_string(i + 1)).c_str()));
    }
    const auto change = table.follow(many);
    EXPECT_EQ(change.added.size(), GidTable::kLength - 2);
    EXPECT_EQ(change.left_out, 20 - (GidTable::kLength - 2));
    EXPECT_EQ(table.gids().size(), GidTable::kLength);
}

// What a shown entry holds, as "ADDRESS TYPE slot N" ("-" when empty).
std::string shown_text(const GidTable::Shown& entry) {
    const bool empty = std::all_of(std::begin(entry.gid.raw), std::end(entry.gid.raw),
                                   [](uint8_t b) { return b == 0; });
    if (empty) {
        return "-";
    }
    return wire::IpAddress(entry.gid.raw).text() +
           (entry.type == IBV_GID_TYPE_ROCE_V2 ? " v2" : " v1") +
           (entry.slot ? " slot " + std::to_string(*entry.slot) : "");
}

std::vector<std::string> shown_texts(const GidTable& table, GidLayout layout) {
    std::vector<std::string> texts;
    for (const GidTable::Shown& entry : table.shown(layout)) {
        texts.push_back(shown_text(entry));
    }
    return texts;
}

// uroce's layout shows the slots as they are; rxe's puts the link-local
// GID first; mlx5's shows each address as RoCE v1 then v2, the link-local
// one first, so that the device's IPv4 address is the v2 GID at index 3.
TEST(GidTable, ShowsEachLayoutAsItsNicDoes) {
    GidTable table(ip("10.0.0.1"), kGuid);
    table.follow({ip("10.0.0.1"), ip("10.0.0.9"), ip("fe80::1234")});
    EXPECT_EQ(shown_texts(table, GidLayout::kUroce),
              (std::vector<std::string>{"10.0.0.1 v2 slot 0", "fe80::1234 v2 slot 1",
                                        "10.0.0.9 v2 slot 2"}));
    EXPECT_EQ(shown_texts(table, GidLayout::kRxe),
              (std::vector<std::string>{"fe80::1234 v2 slot 1", "10.0.0.1 v2 slot 0",
                                        "10.0.0.9 v2 slot 2"}));
    EXPECT_EQ(
        shown_texts(table, GidLayout::kMlx5),
        (std::vector<std::string>{"fe80::1234 v1", "fe80::1234 v2 slot 1", "10.0.0.1 v1",
                                  "10.0.0.1 v2 slot 0", "10.0.0.9 v1", "10.0.0.9 v2 slot 2"}));
    for (GidLayout layout : {GidLayout::kUroce, GidLayout::kRxe, GidLayout::kMlx5}) {
        const auto shown = table.shown(layout);
        for (size_t slot = 0; slot < 3; ++slot) {
            const size_t index = GidTable::shown_index(layout, slot);
            ASSERT_LT(index, shown.size());
            EXPECT_EQ(shown[index].slot, slot) << gid_layout_name(layout);
            EXPECT_EQ(shown[index].type, IBV_GID_TYPE_ROCE_V2);
        }
    }
}

// A removed address leaves its entries empty in every layout; mlx5's two
// entries an address show 8 addresses in the 16 entries, no more.
TEST(GidTable, ShownTablesKeepIndexesAndTheirLength) {
    GidTable table(ip("10.0.0.1"), kGuid);
    std::vector<wire::IpAddress> addresses{ip("10.0.0.1")};
    for (int i = 2; i < 14; ++i) {
        addresses.push_back(ip(("10.0.0." + std::to_string(i)).c_str()));
    }
    table.follow(addresses);
    EXPECT_EQ(table.shown(GidLayout::kUroce).size(), 14u);
    const auto mlx5 = table.shown(GidLayout::kMlx5);
    ASSERT_EQ(mlx5.size(), GidTable::kLength);
    EXPECT_EQ(shown_text(mlx5[15]), "10.0.0.7 v2 slot 7");
    addresses.erase(addresses.begin() + 1);  // 10.0.0.2, slot 2
    table.follow(addresses);
    for (GidLayout layout : {GidLayout::kUroce, GidLayout::kRxe, GidLayout::kMlx5}) {
        const auto shown = table.shown(layout);
        EXPECT_EQ(shown_text(shown[GidTable::shown_index(layout, 2)]), "-")
            << gid_layout_name(layout);
        EXPECT_EQ(shown_text(shown[GidTable::shown_index(layout, 3)]), "10.0.0.3 v2 slot 3")
            << gid_layout_name(layout);
    }
}

TEST(GidTable, LayoutsAreNamed) {
    for (GidLayout layout : {GidLayout::kUroce, GidLayout::kRxe, GidLayout::kMlx5}) {
        EXPECT_EQ(gid_layout_named(gid_layout_name(layout)), layout);
    }
    EXPECT_FALSE(gid_layout_named("mlx4"));
}

}  // namespace
}  // namespace uroce
