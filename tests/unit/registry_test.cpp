// Registry: a number and its entry come and go together, numbers are handed
// out round-robin (a late packet for a destroyed QP must not reach the next
// one), and a full registry says so instead of reusing a number.
#include "device/registry.h"

#include <gtest/gtest.h>

#include <memory>

namespace uroce {
namespace {

TEST(RegistryTest, AnEntryIsFoundByItsNumberUntilRemoved) {
    Registry<int*> registry(0x11, 0xff);
    int first = 1, second = 2;
    const auto a = registry.add(&first);
    const auto b = registry.add(&second);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, 0x11u);
    EXPECT_EQ(*b, 0x12u);
    EXPECT_EQ(registry.find(*a), &first);
    EXPECT_EQ(registry.find(*b), &second);
    EXPECT_EQ(registry.find(0x13), nullptr);
    EXPECT_EQ(registry.size(), 2u);
    registry.remove(*a);
    EXPECT_EQ(registry.find(*a), nullptr);
    EXPECT_EQ(registry.find(*b), &second);
    EXPECT_EQ(registry.size(), 1u);
}

TEST(RegistryTest, ARemovedNumberIsNotReusedAtOnce) {
    Registry<int*> registry(1, 3);
    int object = 0;
    const auto first = registry.add(&object);
    registry.remove(*first);
    EXPECT_EQ(registry.add(&object), 2u);
    EXPECT_EQ(registry.add(&object), 3u);
    EXPECT_EQ(registry.add(&object), 1u);  // wrapped round to the freed one
}

TEST(RegistryTest, AFullRegistryRefusesAndKeepsItsEntries) {
    Registry<int*> registry(1, 2);
    int a = 0, b = 0, c = 0;
    ASSERT_TRUE(registry.add(&a));
    ASSERT_TRUE(registry.add(&b));
    EXPECT_FALSE(registry.add(&c));
    EXPECT_EQ(registry.size(), 2u);
    EXPECT_EQ(registry.find(1), &a);
    EXPECT_EQ(registry.find(2), &b);
}

TEST(RegistryTest, AWeakEntryOutlivedByItsNumberFindsNothing) {
    Registry<std::weak_ptr<int>> registry(1, 10);
    auto object = std::make_shared<int>(7);
    const auto number = registry.add(object);
    ASSERT_TRUE(number);
    EXPECT_EQ(*registry.find(*number).lock(), 7);
    object.reset();
    EXPECT_EQ(registry.find(*number).lock(), nullptr);
    EXPECT_EQ(registry.find(99).lock(), nullptr);
}

}  // namespace
}  // namespace uroce
