#include "worker/runtime/watermark.h"

#include <gtest/gtest.h>

#include "worker/runtime/event_time.h"

namespace caravela {
namespace {

WatermarkSpec Spec(int64_t ooo, int64_t idle) {
  WatermarkSpec s;
  s.max_out_of_orderness = ooo;
  s.idle_timeout = idle;
  return s;
}
auto NoBacklog = [](int) -> int64_t { return 0; };

TEST(SourceWatermarkTest, MinOverPartitionsMinusOutOfOrderness) {
  SourceWatermark wm(Spec(5, 0), 0);
  wm.EnsurePartitions(2);
  wm.OnRecord(0, 100, 1);
  EXPECT_EQ(wm.Update(1, NoBacklog), kMinTime) << "partition 1 has no record yet";
  wm.OnRecord(1, 50, 2);
  EXPECT_EQ(wm.Update(2, NoBacklog), 45);
  wm.OnRecord(1, 300, 3);
  EXPECT_EQ(wm.Update(3, NoBacklog), 95);
  EXPECT_EQ(wm.partition_watermark(1), 295);
}

TEST(SourceWatermarkTest, NeverGoesBack) {
  SourceWatermark wm(Spec(0, 10), 0);
  wm.OnRecord(0, 100, 0);
  wm.OnRecord(1, 200, 0);
  EXPECT_EQ(wm.Update(0, NoBacklog), 100);
  // Partition 0 goes idle: the min is partition 1 alone.
  wm.OnRecord(1, 250, 5);
  EXPECT_EQ(wm.Update(10, NoBacklog), 250);
  EXPECT_TRUE(wm.partition_idle(0));
  // Partition 0 resumes with an old record: it rejoins, the watermark stays.
  wm.OnRecord(0, 120, 11);
  EXPECT_EQ(wm.Update(11, NoBacklog), 250);
  EXPECT_FALSE(wm.partition_idle(0));
}

TEST(SourceWatermarkTest, BacklogPreventsIdleness) {
  SourceWatermark wm(Spec(0, 10), 0);
  wm.OnRecord(0, 100, 0);
  wm.OnRecord(1, 200, 0);
  EXPECT_EQ(wm.Update(50, [](int p) -> int64_t { return p == 0 ? 7 : 0; }), 100);
  EXPECT_FALSE(wm.partition_idle(0));
  EXPECT_TRUE(wm.partition_idle(1));
}

TEST(SourceWatermarkTest, AllIdleKeepsWatermarkAndNextTransition) {
  SourceWatermark wm(Spec(0, 10), 0);
  wm.OnRecord(0, 100, 3);
  EXPECT_EQ(wm.NextIdleTransition(3), 13);
  EXPECT_EQ(wm.NextIdleTransition(13), kMaxTime);
  EXPECT_EQ(wm.Update(3, NoBacklog), 100);
  EXPECT_EQ(wm.Update(13, NoBacklog), 100);
  EXPECT_TRUE(wm.idle());
  wm.Finish();
  EXPECT_EQ(wm.current(), kMaxTime);
}

TEST(EventTimeTest, FormatsAndErrors) {
  Record r;
  r.AddString("iso", "1497-07-08T10:00:00Z");
  r.AddInt("ms", -15000);
  r.AddDecimal("s", 15, 1);  // 1.5 s
  r.AddString("bad", "soon");
  std::string reason;
  int64_t t = 0;
  EXPECT_TRUE(ExtractEventTime(r, {FieldPath::Parse("iso"), TimeFormat::kIso8601}, &t, &reason));
  EXPECT_LT(t, 0);
  EXPECT_TRUE(ExtractEventTime(r, {FieldPath::Parse("ms"), TimeFormat::kEpochMs}, &t, &reason));
  EXPECT_EQ(t, -15000);
  EXPECT_TRUE(ExtractEventTime(r, {FieldPath::Parse("s"), TimeFormat::kEpochS}, &t, &reason));
  EXPECT_EQ(t, 1500);
  EXPECT_FALSE(ExtractEventTime(r, {FieldPath::Parse("bad"), TimeFormat::kIso8601}, &t, &reason));
  EXPECT_EQ(reason, "unparseable event time \"soon\" in field \"bad\" (expected iso8601)");
  EXPECT_FALSE(
      ExtractEventTime(r, {FieldPath::Parse("missing"), TimeFormat::kIso8601}, &t, &reason));
  EXPECT_EQ(reason, "missing event time field \"missing\"");
}

}  // namespace
}  // namespace caravela
