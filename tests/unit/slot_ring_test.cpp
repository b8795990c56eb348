// A QP's send window: first in, first out across growth and wrap-around,
// and a slot that is reused starts as a new element but keeps its memory.
#include "objects/slot_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace uroce {
namespace {

struct Element {
    int id = -1;
    std::vector<int> list;
    void recycle() {
        id = -1;
        list.clear();
    }
};

std::vector<int> ids(const SlotRing<Element>& ring) {
    std::vector<int> out;
    for (const Element& e : ring) {
        out.push_back(e.id);
    }
    return out;
}

TEST(SlotRingTest, KeepsOrderAcrossWrapAroundAndGrowth) {
    SlotRing<Element> ring;
    std::vector<int> expected;
    int next = 0;
    // Pops between pushes move the head, so growth happens with the
    // elements wrapped around the end of the slots.
    for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < 3; ++i) {
            ring.emplace_back().id = next;
            expected.push_back(next++);
        }
        ring.pop_front();
        expected.erase(expected.begin());
        ASSERT_EQ(ids(ring), expected);
        ASSERT_EQ(ring.front().id, expected.front());
        ASSERT_EQ(ring.back().id, expected.back());
    }
    EXPECT_EQ(ring.size(), 100u);
    ring.clear();
    EXPECT_TRUE(ring.empty());
    EXPECT_TRUE(ids(ring).empty());
}

TEST(SlotRingTest, AReusedSlotIsRecycledButKeepsItsMemory) {
    SlotRing<Element> ring;
    Element& first = ring.emplace_back();
    first.id = 1;
    first.list.assign(100, 7);
    const int* memory = first.list.data();
    ring.pop_front();
    // Sixteen slots to start with: the seventeenth element reuses the first.
    for (int i = 0; i < 15; ++i) {
        ring.emplace_back();
        ring.pop_front();
    }
    Element& reused = ring.emplace_back();
    EXPECT_EQ(reused.id, -1);
    EXPECT_TRUE(reused.list.empty());
    EXPECT_GE(reused.list.capacity(), 100u);
    EXPECT_EQ(reused.list.data(), memory);
}

TEST(SlotRingTest, FindsLikeAStandardContainer) {
    SlotRing<Element> ring;
    for (int i = 0; i < 5; ++i) {
        ring.emplace_back().id = i * 10;
    }
    auto it = std::find_if(ring.begin(), ring.end(), [](const Element& e) { return e.id > 15; });
    ASSERT_NE(it, ring.end());
    EXPECT_EQ(it->id, 20);
    EXPECT_EQ(ring[3].id, 30);
}

}  // namespace
}  // namespace uroce
