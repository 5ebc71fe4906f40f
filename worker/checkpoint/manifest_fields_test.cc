// The task runtime's manifest fields: typed, with the form older releases
// wrote (`extra`, an operator's decimal `state`) still read, and both written
// for one release.
#include "worker/checkpoint/manifest_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time_util.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;

TEST(ManifestFieldsTest, SettersWriteTheTypedFieldsAndTheOldForm) {
  ManifestProto m;
  auto* sc = m.add_sources();
  sc->set_name("purchases");
  SetSourceWatermarkState(&m, sc, "wm-state");
  SetSourcePartitionIds(&m, sc, {"PT", "BR"});
  SetSourceLastArrival(&m, sc, 1234);
  SetManifestClock(&m, 5678);
  auto* oc = m.add_operators();
  oc->set_name("revenue");
  SetOperatorWatermark(oc, kMinTime);

  EXPECT_EQ(sc->watermark_state(), "wm-state");
  EXPECT_THAT(sc->partition_ids(), ElementsAre("PT", "BR"));
  EXPECT_EQ(sc->last_arrival(), 1234);
  EXPECT_EQ(m.clock_ms(), 5678);
  EXPECT_EQ(oc->watermark(), kMinTime);
  // What the previous release reads.
  EXPECT_EQ(m.extra().at("wm/purchases"), "wm-state");
  EXPECT_EQ(m.extra().at("pids/purchases"), "PT\nBR");
  EXPECT_EQ(m.extra().at("last_arrival/purchases"), "1234");
  EXPECT_EQ(m.extra().at("clock"), "5678");
  EXPECT_EQ(oc->state(), "-9223372036854775808");
}

TEST(ManifestFieldsTest, TheOldFormAloneIsRead) {
  ManifestProto m;
  auto* sc = m.add_sources();
  sc->set_name("purchases");
  (*m.mutable_extra())["wm/purchases"] = "old-wm";
  (*m.mutable_extra())["pids/purchases"] = "a\nb\nc";
  (*m.mutable_extra())["last_arrival/purchases"] = "42";
  (*m.mutable_extra())["clock"] = "43";
  auto* oc = m.add_operators();
  oc->set_state("1790848800000");
  EXPECT_THAT(SourceWatermarkState(m, *sc), Optional(std::string("old-wm")));
  EXPECT_THAT(SourcePartitionIds(m, *sc), ElementsAre("a", "b", "c"));
  EXPECT_THAT(SourceLastArrival(m, *sc), Optional(int64_t{42}));
  EXPECT_THAT(ManifestClock(m), Optional(int64_t{43}));
  EXPECT_THAT(OperatorWatermark(*oc), Optional(int64_t{1790848800000}));
}

TEST(ManifestFieldsTest, TheTypedFieldsAloneAreReadAndWinOverTheOldForm) {
  ManifestProto m;
  auto* sc = m.add_sources();
  sc->set_name("s");
  sc->set_watermark_state("typed");
  sc->add_partition_ids("x");
  sc->set_last_arrival(7);
  m.set_clock_ms(8);
  auto* oc = m.add_operators();
  oc->set_watermark(9);
  EXPECT_THAT(SourceWatermarkState(m, *sc), Optional(std::string("typed")));
  EXPECT_THAT(SourcePartitionIds(m, *sc), ElementsAre("x"));
  EXPECT_THAT(SourceLastArrival(m, *sc), Optional(int64_t{7}));
  EXPECT_THAT(ManifestClock(m), Optional(int64_t{8}));
  EXPECT_THAT(OperatorWatermark(*oc), Optional(int64_t{9}));
  (*m.mutable_extra())["wm/s"] = "old";
  (*m.mutable_extra())["clock"] = "1";
  oc->set_state("1");
  EXPECT_THAT(SourceWatermarkState(m, *sc), Optional(std::string("typed")));
  EXPECT_THAT(ManifestClock(m), Optional(int64_t{8}));
  EXPECT_THAT(OperatorWatermark(*oc), Optional(int64_t{9}));
}

TEST(ManifestFieldsTest, NothingRecordedIsNothing) {
  ManifestProto m;
  auto* sc = m.add_sources();
  sc->set_name("s");
  auto* oc = m.add_operators();
  oc->set_state("not a number");
  EXPECT_EQ(SourceWatermarkState(m, *sc), std::nullopt);
  EXPECT_THAT(SourcePartitionIds(m, *sc), IsEmpty());
  EXPECT_EQ(SourceLastArrival(m, *sc), std::nullopt);
  EXPECT_EQ(ManifestClock(m), std::nullopt);
  EXPECT_EQ(OperatorWatermark(*oc), std::nullopt);
}

}  // namespace
}  // namespace caravela
