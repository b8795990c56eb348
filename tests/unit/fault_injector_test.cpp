#include "net/fault_injector.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <tuple>
#include <vector>

namespace uroce {
namespace {

using std::chrono::microseconds;

constexpr int kDecisions = 100000;
// Six standard deviations of a fraction at p = 0.5 over kDecisions: a correct
// injector fails this about once in 10^9 runs.
const double kTolerance = 6 * std::sqrt(0.25 / kDecisions);

struct Tally {
    int dropped = 0;
    int duplicated = 0;
    int reordered = 0;
};

Tally run(FaultInjector& faults, microseconds base_delay = microseconds(0)) {
    Tally tally;
    for (int i = 0; i < kDecisions; ++i) {
        const FaultVerdict verdict = faults.decide();
        if (verdict.drop) {
            ++tally.dropped;
            continue;
        }
        EXPECT_TRUE(verdict.copies == 1 || verdict.copies == 2) << verdict.copies;
        tally.duplicated += verdict.copies == 2;
        // A packet is either on time or held back by exactly the reorder hold.
        if (verdict.delay == base_delay + FaultInjector::kReorderHold) {
            ++tally.reordered;
        } else {
            EXPECT_EQ(verdict.delay.count(), base_delay.count());
        }
    }
    return tally;
}

FaultInjector with(double drop, double duplicate, double reorder,
                   microseconds delay = microseconds(0)) {
    FaultInjector faults;
    faults.configure({drop, duplicate, reorder, delay});
    return faults;
}

TEST(FaultInjector, InactiveByDefaultAndPassesEveryPacket) {
    FaultInjector faults;
    EXPECT_FALSE(faults.active());
    const Tally tally = run(faults);
    EXPECT_EQ(tally.dropped, 0);
    EXPECT_EQ(tally.duplicated, 0);
    EXPECT_EQ(tally.reordered, 0);
}

TEST(FaultInjector, AnySettingMakesItActive) {
    EXPECT_TRUE(with(0.1, 0, 0).active());
    EXPECT_TRUE(with(0, 0.1, 0).active());
    EXPECT_TRUE(with(0, 0, 0.1).active());
    EXPECT_TRUE(with(0, 0, 0, microseconds(1)).active());
    EXPECT_FALSE(with(0, 0, 0).active());
}

TEST(FaultInjector, ProbabilitiesZeroAndOneAreExact) {
    auto never = with(0, 0, 0, microseconds(5));
    const Tally none = run(never, microseconds(5));
    EXPECT_EQ(none.dropped, 0);
    EXPECT_EQ(none.duplicated, 0);
    EXPECT_EQ(none.reordered, 0);

    auto always_dropped = with(1, 1, 1);
    EXPECT_EQ(run(always_dropped).dropped, kDecisions);

    auto always = with(0, 1, 1, microseconds(5));
    const Tally all = run(always, microseconds(5));
    EXPECT_EQ(all.dropped, 0);
    EXPECT_EQ(all.duplicated, kDecisions);
    EXPECT_EQ(all.reordered, kDecisions);
}

TEST(FaultInjector, DropFractionMatchesProbability) {
    auto faults = with(0.3, 0, 0);
    const double fraction = double(run(faults).dropped) / kDecisions;
    EXPECT_NEAR(fraction, 0.3, kTolerance);
}

TEST(FaultInjector, DuplicateAndReorderFractionsMatchTheirProbabilities) {
    auto faults = with(0, 0.2, 0.05);
    const Tally tally = run(faults);
    EXPECT_EQ(tally.dropped, 0);
    EXPECT_NEAR(double(tally.duplicated) / kDecisions, 0.2, kTolerance);
    EXPECT_NEAR(double(tally.reordered) / kDecisions, 0.05, kTolerance);
}

TEST(FaultInjector, FaultsOfAPacketThatIsNotDroppedAreIndependentOfDrop) {
    auto faults = with(0.5, 0.5, 0, microseconds(100));
    const Tally tally = run(faults, microseconds(100));
    const int kept = kDecisions - tally.dropped;
    EXPECT_NEAR(double(tally.dropped) / kDecisions, 0.5, kTolerance);
    EXPECT_NEAR(double(tally.duplicated) / kept, 0.5, 2 * kTolerance);
}

TEST(FaultInjector, DelayIsAddedToEveryPacketAndReorderHoldsOnTop) {
    auto delayed = with(0, 0, 0, microseconds(250));
    for (int i = 0; i < 1000; ++i) {
        const FaultVerdict verdict = delayed.decide();
        EXPECT_FALSE(verdict.drop);
        EXPECT_EQ(verdict.copies, 1);
        EXPECT_EQ(verdict.delay, microseconds(250));
    }
    auto held = with(0, 0, 1, microseconds(250));
    EXPECT_EQ(held.decide().delay, microseconds(250) + FaultInjector::kReorderHold);
}

FaultInjector seeded(uint64_t seed) {
    FaultInjector faults;
    FaultSettings settings{0.3, 0.3, 0.3, microseconds(0)};
    settings.seed = seed;
    faults.configure(settings);
    return faults;
}

// The fates of the same packets, each sent `attempts` times in turn.
std::vector<std::tuple<bool, int, long>> fates(FaultInjector& faults, int attempts) {
    std::vector<std::tuple<bool, int, long>> out;
    for (int attempt = 0; attempt < attempts; ++attempt) {
        for (uint32_t psn = 0; psn < 1000; ++psn) {
            const FaultVerdict v = faults.decide(PacketIdentity{0x11, 0x12, 0x04, psn, 0});
            out.emplace_back(v.drop, v.copies, static_cast<long>(v.delay.count()));
        }
    }
    return out;
}

TEST(FaultInjector, SeededFatesRepeatForTheSameSeedAndPackets) {
    FaultInjector first = seeded(7);
    FaultInjector second = seeded(7);
    EXPECT_EQ(fates(first, 3), fates(second, 3));
    // Configuring again starts the attempts over.
    first.configure(first.settings());
    FaultInjector third = seeded(7);
    EXPECT_EQ(fates(first, 1), fates(third, 1));
}

TEST(FaultInjector, SeededFatesDependOnSeedAttemptAndPacket) {
    FaultInjector a = seeded(7);
    FaultInjector b = seeded(8);
    EXPECT_NE(fates(a, 1), fates(b, 1));
    FaultInjector c = seeded(7);
    const auto two = fates(c, 2);  // the second sending of each packet is decided anew
    EXPECT_NE(std::vector(two.begin(), two.begin() + 1000),
              std::vector(two.begin() + 1000, two.end()));
    // And at the probabilities asked for: 0.3 of 100000 decisions dropped.
    FaultInjector d = seeded(9);
    int dropped = 0;
    for (uint32_t i = 0; i < kDecisions; ++i) {
        dropped += d.decide(PacketIdentity{i, 1, 0x04, i, 0}).drop;
    }
    EXPECT_NEAR(static_cast<double>(dropped) / kDecisions, 0.3, kTolerance);
}

TEST(FaultInjector, AReplayedScheduleGivesItsPacketsTheirFatesByAttempt) {
    const PacketIdentity packet{0x11, 0x12, 0x04, 5, 0};
    const PacketIdentity other{0x11, 0x12, 0x04, 6, 0};
    FaultInjector faults;
    // A decision repeating an earlier one's packet and attempt is refused whole.
    EXPECT_EQ(faults.replay({{packet, 1, {true, 1, microseconds(0)}},
                             {packet, 1, {false, 2, microseconds(0)}}}),
              std::optional<size_t>(1));
    EXPECT_FALSE(faults.active());
    EXPECT_EQ(faults.replay({{packet, 1, {true, 1, microseconds(0)}},
                             {other, 0, {false, 2, FaultInjector::kReorderHold}}}),
              std::nullopt);
    EXPECT_TRUE(faults.active());
    EXPECT_EQ(faults.replaying(), 2u);
    EXPECT_EQ(faults.text(), "replaying 2 decisions");
    // packet: passes at attempt 0, dropped at attempt 1, passes after.
    EXPECT_FALSE(faults.decide(packet).acts());
    EXPECT_TRUE(faults.decide(packet).drop);
    EXPECT_FALSE(faults.decide(packet).acts());
    const FaultVerdict v = faults.decide(other);
    EXPECT_EQ(v.copies, 2);
    EXPECT_EQ(v.delay, FaultInjector::kReorderHold);
    // Packets the schedule does not name pass; configure() ends the replay.
    EXPECT_FALSE(faults.decide(PacketIdentity{0x11, 0x12, 0x04, 7, 0}).acts());
    faults.configure({});
    EXPECT_FALSE(faults.active());
    EXPECT_EQ(faults.replaying(), 0u);
}

TEST(FaultInjector, TheLogRecordsSettingsAndEveryDecisionThatActs) {
    char path[] = "/tmp/uroce-fault-log-XXXXXX";
    UniqueFd file(mkstemp(path));
    ASSERT_TRUE(file);
    unlink(path);
    const int reader = dup(file.get());
    FaultInjector faults;
    faults.configure({0, 1, 0, microseconds(0), 42});
    faults.record_to(std::move(file));
    EXPECT_TRUE(faults.wants_identity());
    faults.decide(PacketIdentity{0x11, 0x12, 0x04, 3, 0});
    faults.decide(PacketIdentity{0x11, 0x12, 0x04, 3, 0});
    EXPECT_EQ(faults.log().decisions(), 2u);
    faults.configure({});  // nothing acts now: settings recorded, no decision
    faults.decide(PacketIdentity{0x11, 0x12, 0x04, 4, 0});
    char text[1024] = {};
    ASSERT_GT(pread(reader, text, sizeof(text) - 1, 0), 0);
    close(reader);
    EXPECT_STREQ(text,
                 "{\"faults\":{\"drop\":0,\"duplicate\":1,\"reorder\":0,\"delay_us\":0,"
                 "\"seed\":42,\"replay\":0}}\n"
                 "{\"src_qpn\":17,\"dest_qpn\":18,\"opcode\":4,\"psn_offset\":3,\"mad_tid\":0,"
                 "\"attempt\":0,\"drop\":false,\"copies\":2,\"delay_us\":0}\n"
                 "{\"src_qpn\":17,\"dest_qpn\":18,\"opcode\":4,\"psn_offset\":3,\"mad_tid\":0,"
                 "\"attempt\":1,\"drop\":false,\"copies\":2,\"delay_us\":0}\n"
                 "{\"faults\":{\"drop\":0,\"duplicate\":0,\"reorder\":0,\"delay_us\":0,"
                 "\"seed\":null,\"replay\":0}}\n");
}

}  // namespace
}  // namespace uroce
