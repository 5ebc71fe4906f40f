#include "worker/reconcile/reconcile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDay = 24 * 3600 * 1000;
constexpr int64_t kOct1 = 1790812800000;  // 2026-10-01T00:00:00Z

TEST(ParseTimeRangeTest, IsoBoundsOpenEndsAndNamedDays) {
  auto r = ParseTimeRange("2026-10-01T00:00:00Z..2026-10-02T00:00:00Z", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, kOct1);
  EXPECT_EQ(r->second, kOct1 + kDay);
  r = ParseTimeRange("2026-10-01T00:00:00Z..", 0);
  ASSERT_OK(r);
  EXPECT_EQ(r->second, kMaxTime);
  r = ParseTimeRange("..2026-10-01T00:00:00Z", 0);
  ASSERT_OK(r);
  EXPECT_EQ(r->first, kMinTime);
  // "Now" is 2026-10-02T05:00Z: yesterday is October 1st, today the 2nd.
  r = ParseTimeRange("yesterday", kOct1 + kDay + 5 * 3600 * 1000);
  ASSERT_OK(r);
  EXPECT_EQ(*r, std::make_pair(kOct1, kOct1 + kDay));
  r = ParseTimeRange("today", kOct1 + kDay + 5 * 3600 * 1000);
  ASSERT_OK(r);
  EXPECT_EQ(*r, std::make_pair(kOct1 + kDay, kOct1 + 2 * kDay));
}

TEST(ParseTimeRangeTest, MalformedRangesSayWhatIsWrong) {
  EXPECT_THAT(std::string(ParseTimeRange("2026-10-01", 0).status().message()),
              HasSubstr("expected START..END"));
  EXPECT_THAT(std::string(ParseTimeRange("2026-10-01T00:00:00Z..tomorrow", 0).status().message()),
              HasSubstr("\"tomorrow\" is not an ISO-8601 UTC time"));
  EXPECT_THAT(
      std::string(
          ParseTimeRange("2026-10-02T00:00:00Z..2026-10-01T00:00:00Z", 0).status().message()),
      HasSubstr("the start must be before the end"));
}

// Revisions are epoch * 10^9 + n: a reconciled one is the last of the next
// epoch, above anything the writing epoch (or a restore of it) publishes.
TEST(ReconciledRevisionTest, LastRevisionOfTheNextEpoch) {
  EXPECT_EQ(ReconciledRevision(3), 1'999'999'999);
  EXPECT_EQ(ReconciledRevision(2'000'000'007), 3'999'999'999);
  EXPECT_EQ(ReconciledRevision(1'999'999'999), 2'999'999'999);    // reconciled again
  EXPECT_GT(ReconciledRevision(5), 1'000'000'000 + 999'999'998);  // a restore's revisions
}

}  // namespace
}  // namespace caravela
