// The engine's lists of QPs that get turns: each slot once, in the order it
// joined; removal takes effect at compact(), and a slot added while the list
// is walked by index is walked in the same pass.
#include "engine/slot_set.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce {
namespace {

std::vector<uint32_t> slots_of(const SlotSet& set) {
    std::vector<uint32_t> slots;
    for (size_t i = 0; i < set.size(); ++i) {
        slots.push_back(set[i]);
    }
    return slots;
}

TEST(SlotSet, HoldsEachSlotOnceInTheOrderItJoined) {
    SlotSet set(16);
    set.add(7);
    set.add(3);
    set.add(7);
    set.add(15);
    EXPECT_EQ(slots_of(set), (std::vector<uint32_t>{7, 3, 15}));
}

TEST(SlotSet, IgnoresSlotsOutOfRange) {
    SlotSet set(16);
    set.add(16);
    set.add(1u << 31);
    EXPECT_EQ(set.size(), 0u);
}

TEST(SlotSet, RemovedSlotsLeaveAtCompactAndMayJoinAgain) {
    SlotSet set(16);
    for (uint32_t slot : {1, 2, 3, 4}) {
        set.add(slot);
    }
    set.remove(2);
    set.remove(4);
    EXPECT_EQ(set.size(), 4u) << "still there until compact()";
    set.compact();
    EXPECT_EQ(slots_of(set), (std::vector<uint32_t>{1, 3}));
    set.add(4);
    EXPECT_EQ(slots_of(set), (std::vector<uint32_t>{1, 3, 4}));
}

// Removed, then added back before compact(): it stays, once, where it was.
TEST(SlotSet, SlotAddedBackBeforeCompactStaysOnce) {
    SlotSet set(16);
    set.add(5);
    set.add(6);
    set.remove(5);
    set.add(5);
    EXPECT_EQ(set.size(), 3u);
    set.compact();
    EXPECT_EQ(slots_of(set), (std::vector<uint32_t>{5, 6}));
    set.add(5);
    EXPECT_EQ(set.size(), 2u) << "a member again after compact()";
}

TEST(SlotSet, SlotsAddedWhileWalkedByIndexAreWalked) {
    SlotSet set(16);
    set.add(0);
    std::vector<uint32_t> walked;
    for (size_t i = 0; i < set.size(); ++i) {
        walked.push_back(set[i]);
        if (set[i] < 3) {
            set.add(set[i] + 1);
        }
    }
    EXPECT_EQ(walked, (std::vector<uint32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace uroce
