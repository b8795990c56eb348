// The daemon's store of check-mode findings: bounded, counted, and its
// JSON readable whatever a client sent.
#include "control/check_findings.h"

#include <gtest/gtest.h>
#include <string.h>

#include <nlohmann/json.hpp>

namespace uroce {
namespace {

rpc::CheckFindingRequest finding(const char* kind, uint32_t qpn, const char* text) {
    rpc::CheckFindingRequest request{};
    snprintf(request.kind, sizeof(request.kind), "%s", kind);
    request.qpn = qpn;
    snprintf(request.text, sizeof(request.text), "%s", text);
    return request;
}

TEST(CheckFindings, KeepsEachFindingWithItsClient) {
    CheckFindings findings;
    findings.add(42, "uroce0", finding("leak", 0, "the program exits..."));
    findings.add(43, "uroce1", finding("dereg-in-use", 0x11, "ibv_dereg_mr of..."), "case-3");
    const auto report = nlohmann::json::parse(findings.json());
    EXPECT_EQ(report["total"], 2);
    ASSERT_EQ(report["kept"].size(), 2u);
    EXPECT_EQ(report["kept"][0]["pid"], 42);
    EXPECT_EQ(report["kept"][0]["device"], "uroce0");
    EXPECT_EQ(report["kept"][0]["kind"], "leak");
    EXPECT_EQ(report["kept"][1]["qpn"], 0x11);
    EXPECT_EQ(report["kept"][1]["text"], "ibv_dereg_mr of...");
    EXPECT_EQ(report["kept"][0]["case"], "");
    EXPECT_EQ(report["kept"][1]["case"], "case-3");
}

TEST(CheckFindings, KeepsTheLatestAtItsBoundAndCountsThemAll) {
    CheckFindings findings;
    const size_t sent = CheckFindings::kKept + 10;
    for (size_t i = 0; i < sent; ++i) {
        findings.add(1, "uroce0", finding("leak", static_cast<uint32_t>(i), "x"));
    }
    const auto report = nlohmann::json::parse(findings.json());
    EXPECT_EQ(report["total"], sent);
    ASSERT_EQ(report["kept"].size(), CheckFindings::kKept);
    EXPECT_EQ(report["kept"][0]["qpn"], 10) << "the oldest ten went";
    EXPECT_EQ(report["kept"][CheckFindings::kKept - 1]["qpn"], sent - 1);
}

TEST(CheckFindings, AClientsFieldsNeedNotEndOrBeUtf8) {
    CheckFindings findings;
    rpc::CheckFindingRequest request{};
    memset(request.kind, 'k', sizeof(request.kind));  // no NUL
    memset(request.text, '\xff', sizeof(request.text));
    findings.add(1, "uroce0", request);
    const auto report = nlohmann::json::parse(findings.json());
    EXPECT_EQ(report["kept"][0]["kind"].get<std::string>().size(), sizeof(request.kind));
    EXPECT_EQ(report["kept"][0]["text"].get<std::string>().size(),
              sizeof(request.text) * 3)  // each byte replaced by U+FFFD
        << "the text is cut at the field's end and made valid UTF-8";
}

TEST(CheckFindings, EveryClientChecksOnlyWhenAsked) {
    CheckFindings findings;
    EXPECT_FALSE(findings.every_client());
    findings.set_every_client(true);
    EXPECT_TRUE(findings.every_client());
}

}  // namespace
}  // namespace uroce
