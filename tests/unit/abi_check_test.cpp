// The provider's check at load (provider/abi_check.h): which libibverbs it
// registers with and which it refuses, by the release in the library's
// file name and the marker symbols of the releases where a layout changed
// (rdma-core's libibverbs.map.in: __verbs_log from v37,
// ibv_query_port_speed from v62).
#include "abi_check.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include "uroce_abi.h"

namespace uroce::abi {
namespace {

Found libibverbs(int release, bool verbs_log, bool query_port_speed) {
    return Found{"/usr/lib/libibverbs.so.1.14." + std::to_string(release) + ".0", release,
                 verbs_log, query_port_speed};
}

// Markers as each release has them.
Found release(int r) {
    return libibverbs(r, r >= 37, r >= 62);
}

TEST(AbiCheckTest, TheReleaseComesFromTheFileName) {
    EXPECT_EQ(release_of_file("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"), 44);
    EXPECT_EQ(release_of_file("/var/tmp/v39/lib/libibverbs.so.1.14.39.0"), 39);
    EXPECT_EQ(release_of_file("libibverbs.so.1.15.61.0"), 61);
    EXPECT_EQ(release_of_file("/usr/lib64/libibverbs.so.1.14.37.2"), 37);
    EXPECT_EQ(release_of_file("/usr/lib/libibverbs.so.1"), 0);
    EXPECT_EQ(release_of_file("/usr/lib/libibverbs.so.1.14"), 0);
    EXPECT_EQ(release_of_file("/usr/lib/libibverbs.so.1.14.44.0.bak"), 0);
    EXPECT_EQ(release_of_file("/usr/lib/librdmacm.so.1.3.44.0"), 0);
    EXPECT_EQ(release_of_file("/libibverbs.so.1.14.x.0"), 0);
    EXPECT_EQ(release_of_file(""), 0);
}

// ABI 34 covers v34-v56 in three layouts uroce builds for: v37-v43, v44
// (wr_atomic_write) and v45-v56 (wr_flush); v34-v36 are below the floor.
TEST(AbiCheckTest, AbiThirtyFourIsThreeLayouts) {
    const BuiltFor v39{34, 37, 44, 39};
    const BuiltFor v44{34, 44, 45, 44};
    const BuiltFor v50{34, 45, 57, 50};
    for (int r = 34; r <= 56; ++r) {
        EXPECT_EQ(!refusal(v39, release(r)), r >= 37 && r < 44) << "v" << r;
        EXPECT_EQ(!refusal(v44, release(r)), r == 44) << "v" << r;
        EXPECT_EQ(!refusal(v50, release(r)), r >= 45) << "v" << r;
    }
}

// ABI 59: v62 added two ops (v59-v61 against v62-v63).
TEST(AbiCheckTest, AbiFiftyNineIsTwoLayouts) {
    const BuiltFor v61{59, 59, 62, 61};
    const BuiltFor v62{59, 62, 64, 62};
    for (int r = 59; r <= 63; ++r) {
        EXPECT_EQ(!refusal(v61, release(r)), r < 62) << "v" << r;
        EXPECT_EQ(!refusal(v62, release(r)), r >= 62) << "v" << r;
    }
}

// A file whose name gives no release (renamed, or a distribution's): the
// markers alone decide, and they tell v34-v36 and v62 apart.
TEST(AbiCheckTest, WithoutAReleaseTheMarkersDecide) {
    const BuiltFor v61{59, 59, 62, 61};
    const BuiltFor v62{59, 62, 64, 62};
    const BuiltFor v39{34, 37, 44, 39};
    const Found v61_like{"/opt/libibverbs.so", 0, true, false};
    const Found v62_like{"/opt/libibverbs.so", 0, true, true};
    const Found v35_like{"/opt/libibverbs.so", 0, false, false};
    EXPECT_FALSE(refusal(v61, v61_like));
    EXPECT_TRUE(refusal(v61, v62_like));
    EXPECT_TRUE(refusal(v62, v61_like));
    EXPECT_FALSE(refusal(v62, v62_like));
    EXPECT_FALSE(refusal(v39, v61_like));
    EXPECT_TRUE(refusal(v39, v35_like));
    // A name and markers that disagree are refused as well.
    EXPECT_TRUE(refusal(v61, libibverbs(61, true, true)));
    EXPECT_TRUE(refusal(v39, libibverbs(39, false, false)));
}

// The sentence names what the provider was built for, what it found and
// where, and what to do.
TEST(AbiCheckTest, TheRefusalSaysWhatWasBuiltAndWhatWasFound) {
    const std::optional<std::string> why = refusal(BuiltFor{59, 59, 62, 61}, release(62));
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("built for the libibverbs of rdma-core v59-v61"), std::string::npos)
        << *why;
    EXPECT_NE(why->find("private ABI 59, configured against v61"), std::string::npos) << *why;
    EXPECT_NE(why->find("(/usr/lib/libibverbs.so.1.14.62.0) is v62"), std::string::npos) << *why;
    EXPECT_NE(why->find("does not register"), std::string::npos) << *why;
    EXPECT_NE(why->find("build uroce against it"), std::string::npos) << *why;

    const std::optional<std::string> old =
        refusal(BuiltFor{34, 45, 57, 50}, Found{"/opt/libibverbs.so", 0, false, false});
    ASSERT_TRUE(old);
    EXPECT_NE(old->find("rdma-core v45-v56"), std::string::npos) << *old;
    EXPECT_NE(old->find("older than v37 (it does not export __verbs_log)"), std::string::npos)
        << *old;
    const std::optional<std::string> one = refusal(BuiltFor{34, 44, 45, 44}, release(50));
    ASSERT_TRUE(one);
    EXPECT_NE(one->find("rdma-core v44 (private ABI 34"), std::string::npos) << *one;
}

// This build's own range holds the release it was configured against, and
// the libibverbs this test runs with (the one it was built against) passes.
TEST(AbiCheckTest, ThisBuildAcceptsItsOwnLibibverbs) {
    const BuiltFor built{UROCE_PABI, UROCE_RDMA_CORE_FIRST, UROCE_RDMA_CORE_END,
                         UROCE_RDMA_CORE_RELEASE};
    EXPECT_GE(UROCE_RDMA_CORE_RELEASE, UROCE_RDMA_CORE_FIRST);
    EXPECT_LT(UROCE_RDMA_CORE_RELEASE, UROCE_RDMA_CORE_END);
    EXPECT_GE(UROCE_RDMA_CORE_FIRST, 37);
    const Found found = probe(reinterpret_cast<const void*>(&ibv_get_device_list), UROCE_PABI);
    EXPECT_EQ(found.release, UROCE_RDMA_CORE_RELEASE) << found.file;
    EXPECT_TRUE(found.verbs_log) << found.file;
    EXPECT_EQ(found.query_port_speed, UROCE_RDMA_CORE_RELEASE >= 62) << found.file;
    const std::optional<std::string> why = refusal(built, found);
    EXPECT_FALSE(why) << *why;
}

}  // namespace
}  // namespace uroce::abi
