#include "worker/operators/interval_join_operator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr int64_t kSec = 1'000;
constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 3'600'000;
// 2026-10-01T00:00:00Z
constexpr int64_t kDay = 1790812800000;
int64_t T(int h, int m) { return kDay + h * kHour + m * kMin; }

constexpr int L = IntervalJoinOperator::kLeft;
constexpr int R = IntervalJoinOperator::kRight;

IntervalJoinSpec Spec(JoinType type, int64_t lower, int64_t upper, int64_t lateness = 0,
                      const std::vector<std::pair<std::string, std::string>>& keys = {{"k", "k"}},
                      std::string where = "") {
  IntervalJoinSpec s;
  s.left = "l";
  s.right = "r";
  for (auto& [l, r] : keys) {
    JoinKeySpec k;
    k.left = l;
    k.right = r;
    k.left_path = FieldPath::Parse(l);
    k.right_path = FieldPath::Parse(r);
    s.on.push_back(std::move(k));
  }
  s.lower = lower;
  s.upper = upper;
  s.type = type;
  s.allowed_lateness = lateness;
  s.where = std::move(where);
  return s;
}

std::unique_ptr<IntervalJoinOperator> Make(IntervalJoinSpec spec) {
  auto op = IntervalJoinOperator::Create(std::move(spec));
  EXPECT_OK(op.status());
  return std::move(op).value();
}

std::string Row(const std::string& id, const std::string& k) {
  return R"({"id":")" + id + R"(","k":)" + k + "}";
}
std::string Match(const std::string& l, const std::string& r) {
  return R"({"left":)" + l + R"(,"right":)" + r + "}";
}
std::string LeftOnly(const std::string& l) { return R"({"left":)" + l + R"(,"right":null})"; }
std::string RightOnly(const std::string& r) { return R"({"left":null,"right":)" + r + "}"; }

uint64_t Keys(OperatorHarness& h, const std::string& table) {
  EXPECT_OK(h.Commit());
  auto t = h.state().OpenTable("op/" + table);
  EXPECT_OK(t.status());
  auto n = (*t)->CountKeys();
  EXPECT_OK(n.status());
  return *n;
}

TEST(IntervalJoinTest, BoundsAreInclusiveAndOneMillisecondOutsideDoesNotMatch) {
  auto op = Make(Spec(JoinType::kInner, -5 * kMin, 30 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l = Row("l", "1");
  ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
  const std::string at_lower = Row("at_lower", "1"), below = Row("below", "1");
  const std::string at_upper = Row("at_upper", "1"), above = Row("above", "1");
  ASSERT_OK(h.ProcessJson(at_lower, T(10, 0) - 5 * kMin, R));
  ASSERT_OK(h.ProcessJson(below, T(10, 0) - 5 * kMin - 1, R));
  ASSERT_OK(h.ProcessJson(at_upper, T(10, 30), R));
  ASSERT_OK(h.ProcessJson(above, T(10, 30) + 1, R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l, at_lower), Match(l, at_upper)));
  // The same from the other side: right rows first, then left rows.
  const std::string r = Row("r", "2");
  ASSERT_OK(h.ProcessJson(r, T(12, 0), R));
  const std::string l_lo = Row("l_lo", "2"), l_lo_out = Row("l_lo_out", "2");
  const std::string l_hi = Row("l_hi", "2"), l_hi_out = Row("l_hi_out", "2");
  // r - l in [-5m, 30m]  <=>  l in [r - 30m, r + 5m].
  ASSERT_OK(h.ProcessJson(l_lo, T(11, 30), L));
  ASSERT_OK(h.ProcessJson(l_lo_out, T(11, 30) - 1, L));
  ASSERT_OK(h.ProcessJson(l_hi, T(12, 5), L));
  ASSERT_OK(h.ProcessJson(l_hi_out, T(12, 5) + 1, L));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l_lo, r), Match(l_hi, r)));
  EXPECT_THAT(h.TakeSide("too_late"), IsEmpty());
}

TEST(IntervalJoinTest, NegativeBounds) {
  // Right rows 10 to 2 minutes before the left row.
  auto op = Make(Spec(JoinType::kInner, -10 * kMin, -2 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  std::vector<std::string> rights;
  for (int64_t dt : {-11 * kMin, -10 * kMin - 1, -10 * kMin, -6 * kMin, -2 * kMin, -2 * kMin + 1,
                     0L, 5 * kMin}) {
    rights.push_back(Row("r" + std::to_string(dt), "1"));
    ASSERT_OK(h.ProcessJson(rights.back(), T(10, 0) + dt, R));
  }
  const std::string l = Row("l", "1");
  ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(Match(l, rights[2]), Match(l, rights[3]), Match(l, rights[4])));
}

TEST(IntervalJoinTest, OutOfOrderArrivalOnBothSides) {
  auto op = Make(Spec(JoinType::kInner, 0, kHour));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  ASSERT_OK(h.AdvanceWatermark(T(9, 0)));
  // Arrival order: r2, l2, r1, l1 (event times decreasing on both sides).
  const std::string r2 = Row("r2", "1"), l2 = Row("l2", "1"), r1 = Row("r1", "1"),
                    l1 = Row("l1", "1");
  ASSERT_OK(h.ProcessJson(r2, T(11, 30), R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.ProcessJson(l2, T(11, 0), L));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l2, r2)));
  ASSERT_OK(h.ProcessJson(r1, T(10, 15), R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "r1 is before l2";
  ASSERT_OK(h.ProcessJson(l1, T(10, 0), L));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l1, r1)));  // r2 is 90 min after l1
  EXPECT_THAT(h.TakeSide("too_late"), IsEmpty());
}

TEST(IntervalJoinTest, TooLateRecordsOnEachSideGoToTheSideOutput) {
  auto op = Make(Spec(JoinType::kFull, 0, kHour, /*lateness=*/10 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l = Row("l", "1"), r = Row("r", "1");
  ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
  ASSERT_OK(h.ProcessJson(r, T(10, 20), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l, r)));
  ASSERT_OK(h.AdvanceWatermark(T(10, 30)));
  // Exactly W - allowed_lateness is not too late.
  const std::string l_ok = Row("l_ok", "1"), r_ok = Row("r_ok", "1");
  ASSERT_OK(h.ProcessJson(l_ok, T(10, 20), L));
  ASSERT_OK(h.ProcessJson(r_ok, T(10, 20), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l_ok, r), Match(l, r_ok), Match(l_ok, r_ok)));
  // One millisecond earlier is: side output, no output row, no padding later.
  ASSERT_OK(h.ProcessJson(Row("l_late", "1"), T(10, 20) - 1, L));
  ASSERT_OK(h.ProcessJson(Row("r_late", "1"), T(10, 20) - 1, R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  std::vector<std::string> late = h.TakeSide("too_late");
  ASSERT_EQ(late.size(), 2u);
  EXPECT_THAT(late[0], HasSubstr(R"("operator":"op")"));
  EXPECT_THAT(late[0], HasSubstr(R"("event_time":"2026-10-01T10:19:59.999Z")"));
  EXPECT_THAT(late[0], HasSubstr(R"("watermark":"2026-10-01T10:30:00.000Z")"));
  EXPECT_THAT(late[0], HasSubstr(R"("record":{"id":"l_late","k":1},"side":"left")"));
  EXPECT_THAT(late[1], HasSubstr(R"("record":{"id":"r_late","k":1},"side":"right")"));
  EXPECT_EQ(h.metrics().Sum("too_late_total", "op=\"op\""), 2);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "every accepted row matched";
}

TEST(IntervalJoinTest, OuterRowsAppearOnlyAfterTheWatermarkPassesTheBound) {
  // Left row at 10:00 can match right rows up to 11:00 (+ 10 min lateness);
  // right row at 10:00 can match left rows down to 10:00 - 15 min... i.e. its
  // last possible match time is r - lower = 10:15 (+ 10 min lateness).
  auto op = Make(Spec(JoinType::kFull, -15 * kMin, kHour, 10 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l = Row("l", "1"), r = Row("r", "2");
  ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
  ASSERT_OK(h.ProcessJson(r, T(10, 0), R));
  ASSERT_OK(h.AdvanceWatermark(T(10, 25)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "W == r - lower + lateness is not past the bound";
  ASSERT_OK(h.AdvanceWatermark(T(10, 25) + 1));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(RightOnly(r)));
  ASSERT_OK(h.AdvanceWatermark(T(11, 10)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "W == l + upper + lateness is not past the bound";
  ASSERT_OK(h.AdvanceWatermark(T(11, 10) + 1));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(LeftOnly(l)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "emitted once";
  EXPECT_EQ(Keys(h, "left") + Keys(h, "right"), 0u);
}

TEST(IntervalJoinTest, LeftAndRightJoinsPadOnlyTheirOuterSide) {
  for (JoinType type : {JoinType::kInner, JoinType::kLeft, JoinType::kRight}) {
    auto op = Make(Spec(type, 0, kHour));
    OperatorHarness h(op.get());
    ASSERT_OK(h.Open());
    const std::string l = Row("l", "1"), r = Row("r", "2");
    ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
    ASSERT_OK(h.ProcessJson(r, T(10, 0), R));
    ASSERT_OK(h.AdvanceWatermark(kMaxTime));
    std::vector<std::string> want;
    if (type == JoinType::kLeft) want = {LeftOnly(l)};
    if (type == JoinType::kRight) want = {RightOnly(r)};
    EXPECT_EQ(h.TakeOutput(), want) << JoinTypeName(type);
  }
}

TEST(IntervalJoinTest, NoRetractions) {
  auto op = Make(Spec(JoinType::kLeft, 0, 30 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string matched = Row("matched", "1"), lonely = Row("lonely", "2");
  const std::string r = Row("r", "1");
  ASSERT_OK(h.ProcessJson(matched, T(10, 0), L));
  ASSERT_OK(h.ProcessJson(lonely, T(10, 0), L));
  ASSERT_OK(h.ProcessJson(r, T(10, 10), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(matched, r)));
  ASSERT_OK(h.AdvanceWatermark(T(10, 31)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(LeftOnly(lonely)))
      << "a matched row is never padded; the unmatched one once";
  // A partner of `lonely` arriving now is too late: it cannot turn the padded
  // row into a match (that would need a retraction).
  ASSERT_OK(h.ProcessJson(Row("r2", "2"), T(10, 20), R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr(R"("side":"right")")));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
}

TEST(IntervalJoinTest, DuplicateKeysGiveTheFullCrossProductWithinBounds) {
  auto op = Make(Spec(JoinType::kFull, 0, 10 * kMin));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l1 = Row("l1", "7"), l2 = Row("l2", "7");
  const std::string r1 = Row("r1", "7"), r2 = Row("r2", "7"), r3 = Row("r3", "7");
  const std::string r_out = Row("r_out", "7");
  ASSERT_OK(h.ProcessBatch({{l1, T(10, 0)}, {l2, T(10, 0)}}, L));
  ASSERT_OK(h.ProcessBatch({{r1, T(10, 0)}, {r2, T(10, 5)}, {r3, T(10, 10)}}, R));
  ASSERT_OK(h.ProcessJson(r_out, T(10, 10) + 1, R));
  EXPECT_THAT(h.TakeOutput(), UnorderedElementsAre(Match(l1, r1), Match(l2, r1), Match(l1, r2),
                                                   Match(l2, r2), Match(l1, r3), Match(l2, r3)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(RightOnly(r_out)));
}

TEST(IntervalJoinTest, CompositeKeysAndNumericKeyEquality) {
  auto op = Make(Spec(JoinType::kInner, 0, kHour, 0, {{"ad", "ad"}, {"user", "uid"}}));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l = R"({"ad":1,"user":"u1"})";
  ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
  const std::string same = R"({"ad":1.0,"uid":"u1"})";      // 1 == 1.0
  const std::string other_user = R"({"ad":1,"uid":"u2"})";  // no fan-out across users
  const std::string other_ad = R"({"ad":2,"uid":"u1"})";
  const std::string string_ad = R"({"ad":"1","uid":"u1"})";  // "1" is not 1
  const std::string swapped = R"({"ad":"u1","uid":1})";
  for (const std::string& r : {same, other_user, other_ad, string_ad, swapped}) {
    ASSERT_OK(h.ProcessJson(r, T(10, 30), R));
  }
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l, same)));
}

TEST(IntervalJoinTest, NullOrMissingKeysNeverMatchButOuterRowsStillAppear) {
  auto op = Make(Spec(JoinType::kFull, 0, kHour, 0, {{"a", "a"}, {"b", "b"}}));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l_null = R"({"id":"l_null","a":1,"b":null})";
  const std::string l_missing = R"({"id":"l_missing","a":1})";
  const std::string r_null = R"({"id":"r_null","a":1,"b":null})";
  const std::string r_missing = R"({"id":"r_missing","a":1})";
  ASSERT_OK(h.ProcessBatch({{l_null, T(10, 0)}, {l_missing, T(10, 0)}}, L));
  ASSERT_OK(h.ProcessBatch({{r_null, T(10, 0)}, {r_missing, T(10, 0)}}, R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "null never equals null";
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(RightOnly(r_null), RightOnly(r_missing)));
  ASSERT_OK(h.AdvanceWatermark(T(11, 0) + 1));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(LeftOnly(l_null), LeftOnly(l_missing)));
  EXPECT_EQ(Keys(h, "left") + Keys(h, "right"), 0u);

  // An inner join does not even store rows that can never match.
  auto inner = Make(Spec(JoinType::kInner, 0, kHour));
  OperatorHarness hi(inner.get());
  ASSERT_OK(hi.Open());
  ASSERT_OK(hi.ProcessJson(R"({"k":null})", T(10, 0), L));
  EXPECT_EQ(inner->buffered_rows(L), 0u);
}

TEST(IntervalJoinTest, WhereIsPartOfTheJoinConditionAppliedBeforePadding) {
  auto op = Make(Spec(JoinType::kLeft, 0, kHour, 0, {{"k", "k"}}, "right.v > left.v"));
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());
  const std::string l1 = R"({"k":1,"v":5})", l2 = R"({"k":1,"v":50})";
  const std::string r = R"({"k":1,"v":10})";
  ASSERT_OK(h.ProcessBatch({{l1, T(10, 0)}, {l2, T(10, 0)}}, L));
  ASSERT_OK(h.ProcessJson(r, T(10, 30), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Match(l1, r)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(LeftOnly(l2)))
      << "l2's only equal-key partner fails the condition: it is unmatched";
  EXPECT_FALSE(
      IntervalJoinOperator::Create(Spec(JoinType::kInner, 0, 1, 0, {{"k", "k"}}, "a ==")).ok());
}

TEST(IntervalJoinTest, OutputEventTimesAndOutputWatermark) {
  auto op = Make(Spec(JoinType::kFull, -5 * kMin, 30 * kMin, 2 * kMin));
  MetricsRegistry metrics;
  ManualClock clock(77);
  auto backend = NewMemoryBackend();
  OperatorContext ctx("op", backend.get(), &metrics, &clock);
  ASSERT_OK(op->Open(ctx));
  Output out(1);
  JsonDecoder decoder;
  RecordBatch batch;
  auto feed = [&](int side, const std::string& json, int64_t t) {
    batch.clear();
    Record& r = batch.Append();
    ASSERT_OK(decoder.Decode(json, &r));
    r.event_time = t;
    ASSERT_OK(op->ProcessBatch(ctx, side, batch, out));
  };
  feed(L, Row("l", "1"), T(10, 0));
  feed(R, Row("r", "1"), T(10, 20));
  feed(R, Row("r_early", "1"), T(9, 56));
  ASSERT_EQ(out.main().size(), 2u);
  EXPECT_EQ(out.main()[0].event_time, T(10, 20)) << "max(l, r)";
  EXPECT_EQ(out.main()[1].event_time, T(10, 0)) << "max(l, r)";
  out.clear();
  feed(L, Row("lonely", "2"), T(10, 0));
  ctx.set_watermark(kMaxTime);
  ASSERT_OK(op->OnWatermark(ctx, out));
  ASSERT_EQ(out.main().size(), 1u);
  EXPECT_EQ(out.main()[0].event_time, T(10, 0)) << "a padded row keeps its own time";
  EXPECT_EQ(out.main()[0].arrival, 77);

  // Held back by allowed_lateness + max(upper (left outer), -lower (right outer)).
  EXPECT_EQ(op->OutputWatermark(T(12, 0)), T(12, 0) - 2 * kMin - 30 * kMin);
  EXPECT_EQ(op->OutputWatermark(kMinTime), kMinTime);
  EXPECT_EQ(op->OutputWatermark(kMaxTime), kMaxTime);
  EXPECT_EQ(Make(Spec(JoinType::kInner, -5 * kMin, 30 * kMin, 2 * kMin))->OutputWatermark(T(12, 0)),
            T(12, 0) - 2 * kMin);
  EXPECT_EQ(Make(Spec(JoinType::kRight, -5 * kMin, 30 * kMin, 0))->OutputWatermark(T(12, 0)),
            T(12, 0) - 5 * kMin);
  EXPECT_EQ(Make(Spec(JoinType::kLeft, -50 * kMin, -10 * kMin, 0))->OutputWatermark(T(12, 0)),
            T(12, 0));
}

TEST(IntervalJoinTest, StateIsBoundedAndExpiresExactlyWhenNoFutureRecordCanMatch) {
  const int64_t lower = -3 * kMin, upper = 7 * kMin, lateness = 2 * kMin;
  auto op = Make(Spec(JoinType::kInner, lower, upper, lateness));
  OperatorHarness h(op.get(), NewMemoryBackend());
  ASSERT_OK(h.Open());
  std::mt19937_64 rng(7);
  std::vector<std::pair<int, int64_t>> rows;  // accepted (side, time)
  int64_t max_t = T(0, 0);
  for (int i = 0; i < 5000; ++i) {
    int side = static_cast<int>(rng() % 2);
    int64_t t = T(0, 0) + i * 2 * kSec - static_cast<int64_t>(rng() % (4 * kMin));
    std::string json = R"({"k":)" + std::to_string(rng() % 50) + "}";
    if (t >= h.watermark() - lateness) rows.emplace_back(side, t);
    ASSERT_OK(h.ProcessJson(json, t, side));
    max_t = std::max(max_t, t);
    ASSERT_OK(h.AdvanceWatermark(max_t - kMin));
  }
  h.TakeOutput();
  const int64_t w = h.watermark();
  size_t live[2] = {0, 0};
  for (auto [side, t] : rows) {
    // Still matchable by a future record (time >= W - lateness)?
    int64_t last = side == L ? t + upper : t - lower;
    if (last >= w - lateness) ++live[side];
  }
  EXPECT_GT(rows.size(), 4000u);
  EXPECT_LT(live[L] + live[R], 400u) << "only a few minutes of rows";
  EXPECT_EQ(Keys(h, "left"), live[L]);
  EXPECT_EQ(Keys(h, "right"), live[R]);
  EXPECT_EQ(op->buffered_rows(L), live[L]);
  EXPECT_EQ(op->buffered_rows(R), live[R]);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_EQ(Keys(h, "left") + Keys(h, "right"), 0u);
}

// A scripted run with every kind of event, used for snapshot/restore.
struct Step {
  enum Kind { kRecord, kWatermark } kind;
  int side = 0;
  std::string json;
  int64_t t = 0;
};

std::vector<Step> Script() {
  std::vector<Step> s;
  auto rec = [&](int side, const std::string& json, int64_t t) {
    s.push_back({Step::kRecord, side, json, t});
  };
  auto wm = [&](int64_t w) { s.push_back({Step::kWatermark, 0, "", w}); };
  rec(L, Row("l1", "1"), T(10, 0));
  rec(L, Row("l2", "2"), T(10, 1));
  rec(R, Row("r1", "1"), T(10, 5));
  rec(L, R"({"id":"lnull"})", T(10, 2));
  wm(T(10, 3));
  rec(R, Row("r2", "1"), T(10, 20));
  rec(R, Row("r3", "3"), T(10, 6));
  rec(L, Row("l3", "1"), T(10, 10));
  wm(T(10, 8));
  // <- snapshot here (after step 8)
  rec(R, Row("r4", "2"), T(10, 25));
  rec(L, Row("l4", "3"), T(10, 4));
  rec(L, Row("l_late", "1"), T(9, 0));
  wm(T(10, 32));
  rec(R, Row("r5", "1"), T(10, 31));
  wm(T(11, 0));
  rec(L, Row("l5", "9"), T(11, 0));
  wm(kMaxTime);
  return s;
}

absl::Status RunSteps(OperatorHarness& h, const std::vector<Step>& steps, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    const Step& s = steps[i];
    if (s.kind == Step::kRecord) {
      RETURN_IF_ERROR(h.ProcessJson(s.json, s.t, s.side));
    } else {
      RETURN_IF_ERROR(h.AdvanceWatermark(s.t));
    }
  }
  return absl::OkStatus();
}

class IntervalJoinRestoreTest : public ::testing::TestWithParam<bool> {};

TEST_P(IntervalJoinRestoreTest, SnapshotRestoreMidJoinEqualsTheUninterruptedRun) {
  const bool rocksdb = GetParam();
  const std::string dir = ::testing::TempDir() + "/interval_join_" + std::to_string(::getpid()) +
                          (rocksdb ? "_rocks" : "_mem");
  RemoveTree(dir);
  auto backend = [&](const std::string& name) -> std::unique_ptr<StateBackend> {
    if (!rocksdb) return NewMemoryBackend();
    auto b = OpenRocksDbBackend(dir + "/" + name);
    EXPECT_OK(b.status());
    return std::move(b).value();
  };
  const IntervalJoinSpec spec = Spec(JoinType::kFull, -5 * kMin, 15 * kMin, 5 * kMin);
  const std::vector<Step> steps = Script();
  const size_t cut = 8;

  auto op = Make(spec);
  OperatorHarness h(op.get(), backend("a"));
  ASSERT_OK(h.Open());
  ASSERT_OK(RunSteps(h, steps, 0, cut));
  std::vector<std::string> before = h.TakeOutput();
  ASSERT_OK(h.Snapshot(dir + "/snap"));
  const int64_t w = h.watermark();
  EXPECT_EQ(op->buffered_rows(L), 4u);  // l1, l2, lnull, l3
  EXPECT_EQ(op->buffered_rows(R), 3u);  // r1, r2, r3
  ASSERT_OK(RunSteps(h, steps, cut, steps.size()));
  std::vector<std::string> uninterrupted = h.TakeOutput();
  std::vector<std::string> uninterrupted_late = h.TakeSide("too_late");

  auto restored = Make(spec);
  OperatorHarness h2(restored.get(), backend("b"));
  ASSERT_OK(h2.Open());
  ASSERT_OK(h2.RestoreInto(restored.get(), dir + "/snap", w));
  EXPECT_EQ(restored->buffered_rows(L), 4u);
  EXPECT_EQ(restored->buffered_rows(R), 3u);
  ASSERT_OK(RunSteps(h2, steps, cut, steps.size()));
  EXPECT_EQ(h2.TakeOutput(), uninterrupted);
  EXPECT_EQ(h2.TakeSide("too_late"), uninterrupted_late);

  // The whole story, checked by hand against SPEC §5: full join, r - l in
  // [-5m, 15m], lateness 5m; a left row at l expires (and is padded if it
  // never matched) when W > l + 20m, a right row at r when W > r + 10m.
  const std::string l1 = Row("l1", "1"), l2 = Row("l2", "2"), r1 = Row("r1", "1");
  const std::string r2 = Row("r2", "1"), r3 = Row("r3", "3"), l3 = Row("l3", "1");
  const std::string r4 = Row("r4", "2"), l4 = Row("l4", "3"), r5 = Row("r5", "1");
  const std::string l5 = Row("l5", "9"), lnull = R"({"id":"lnull"})";
  // r1 (10:05) - l1 (10:00) = 5m; r2 (10:20) - l1 = 20m: out of bounds;
  // l3 (10:10) pairs with r1 (-5m, the lower bound) and r2 (+10m).
  EXPECT_THAT(before, ElementsAre(Match(l1, r1), Match(l3, r1), Match(l3, r2)));
  EXPECT_THAT(uninterrupted,
              ElementsAre(Match(l4, r3),    // l4 at 10:04 >= W - 5m = 10:03
                          LeftOnly(l2),     // W = 10:32 > 10:01 + 20m
                          LeftOnly(lnull),  // null key: never matches, padded at 10:22
                          RightOnly(r4),    // W = 11:00 > 10:25 + 10m (l2 at 10:01 is 24m before)
                          RightOnly(r5),    // l3 (10:10) is 21m before r5 (10:31)
                          LeftOnly(l5)));   // end of input
  EXPECT_THAT(uninterrupted_late, ElementsAre(HasSubstr("l_late")));
  RemoveTree(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, IntervalJoinRestoreTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "RocksDb" : "Memory"; });

// ---------------------------------------------------------------------------
// Randomized comparison against a brute-force reference of SPEC §5.
//
// The reference keeps every accepted record (a record is too late iff its
// event time < W - allowed_lateness when it is processed, W being the
// watermark before its batch) and knows nothing of the operator's state:
//  * processing an accepted record emits its pairs with every earlier accepted
//    record of the other side: equal non-null keys, r - l in [lower, upper],
//    and the `where` condition;
//  * an accepted row of an outer side that never matched is padded once, at
//    the first step (watermark advance or end of a batch) where
//    W > last possible match time + allowed_lateness.
// Outputs are compared step by step as multisets.
struct RefRow {
  int side;
  int64_t t;
  int key;  // -1: null/missing
  int v;
  std::string json;
  bool matched = false;
  bool padded = false;
};

class IntervalJoinModelTest : public ::testing::TestWithParam<std::tuple<JoinType, int>> {};

TEST_P(IntervalJoinModelTest, MatchesBruteForceReference) {
  const auto [type, seed] = GetParam();
  std::mt19937_64 rng(seed * 1000 + static_cast<int>(type));
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  const int64_t lower = pick({-10 * kSec, -3 * kSec, 0, 2 * kSec});
  const int64_t upper = lower + pick({0, 1 * kSec, 5 * kSec, 12 * kSec});
  const int64_t lateness = pick({0, 0, 2 * kSec, 6 * kSec});
  const int64_t disorder = pick({1 * kSec, 4 * kSec});
  const bool use_where = seed % 2 == 1;
  const int keys = static_cast<int>(pick({2, 5, 20}));
  IntervalJoinSpec spec =
      Spec(type, lower, upper, lateness, {{"k", "k"}}, use_where ? "left.v != right.v" : "");
  const bool outer[2] = {type == JoinType::kLeft || type == JoinType::kFull,
                         type == JoinType::kRight || type == JoinType::kFull};
  SCOPED_TRACE(::testing::Message()
               << JoinTypeName(type) << " seed " << seed << " bounds [" << lower << ", " << upper
               << "] lateness " << lateness << " disorder " << disorder << " keys " << keys
               << (use_where ? " where" : ""));

  const std::string dir = ::testing::TempDir() + "/interval_join_model_" +
                          std::to_string(::getpid()) + "_" + std::to_string(seed) + "_" +
                          JoinTypeName(type);
  RemoveTree(dir);
  auto op = Make(spec);
  std::unique_ptr<IntervalJoinOperator> restored;
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());

  std::vector<RefRow> rows;  // accepted
  int64_t w = kMinTime;
  int64_t max_seen[2] = {kMinTime, kMinTime};
  int too_late = 0;
  auto expiry = [&](const RefRow& r) {
    return (r.side == L ? r.t + upper : r.t - lower) + lateness;
  };
  auto pad = [&](std::vector<std::string>* want) {
    for (RefRow& r : rows) {
      if (outer[r.side] && !r.matched && !r.padded && w > expiry(r)) {
        r.padded = true;
        want->push_back(r.side == L ? LeftOnly(r.json) : RightOnly(r.json));
      }
    }
  };
  const int n = 3000;
  const size_t snapshot_at = static_cast<size_t>(n / 2 + rng() % (n / 4));
  int64_t clock = T(0, 0);
  int id = 0;
  for (int step = 0; id < n; ++step) {
    // A batch of 1-4 records of one side.
    const int side = static_cast<int>(rng() % 2);
    const int size = 1 + static_cast<int>(rng() % 4);
    std::vector<std::pair<std::string, int64_t>> batch;
    std::vector<std::string> want;
    const int64_t oldest = w == kMinTime ? kMinTime : w - lateness;
    for (int b = 0; b < size && id < n; ++b, ++id) {
      // Times on a 200 ms grid, so that rows land exactly on the bounds.
      clock += 200 * static_cast<int64_t>(rng() % 2);
      int64_t t = clock - 200 * static_cast<int64_t>(rng() % (disorder / 200));
      if (rng() % 50 == 0) t -= 2 * disorder + lateness;  // very late
      RefRow row;
      row.side = side;
      row.t = t;
      row.key = rng() % 20 == 0 ? -1 : static_cast<int>(rng() % keys);
      row.v = static_cast<int>(rng() % 3);
      row.json = R"({"id":)" + std::to_string(id) +
                 (row.key < 0 ? (rng() % 2 ? std::string() : std::string(R"(,"k":null)"))
                              : R"(,"k":)" + std::to_string(row.key)) +
                 R"(,"v":)" + std::to_string(row.v) + "}";
      batch.emplace_back(row.json, t);
      max_seen[side] = std::max(max_seen[side], t);
      if (t < oldest) {
        ++too_late;
        continue;
      }
      for (RefRow& o : rows) {
        if (o.side == side || o.key < 0 || o.key != row.key) continue;
        const RefRow& l = side == L ? row : o;
        const RefRow& r = side == L ? o : row;
        if (r.t - l.t < lower || r.t - l.t > upper) continue;
        if (use_where && l.v == r.v) continue;
        ASSERT_FALSE(o.padded) << "reference: a padded row matched later (a retraction)";
        o.matched = row.matched = true;
        want.push_back(Match(l.json, r.json));
      }
      rows.push_back(row);
    }
    pad(&want);  // rows of this batch that are already past their bound
    ASSERT_OK(h.ProcessBatch(batch, side));
    std::vector<std::string> got = h.TakeOutput();
    ASSERT_THAT(got, UnorderedElementsAreArray(want)) << "batch at step " << step;

    // The watermark: min over both sides of max seen - disorder, now and then.
    if (rng() % 3 == 0 && max_seen[L] != kMinTime && max_seen[R] != kMinTime) {
      int64_t nw = std::min(max_seen[L], max_seen[R]) - disorder;
      if (nw > w) {
        w = nw;
        want.clear();
        pad(&want);
        ASSERT_OK(h.AdvanceWatermark(w));
        ASSERT_THAT(h.TakeOutput(), UnorderedElementsAreArray(want)) << "watermark " << w;
      }
    }
    // Snapshot and continue on a restored operator once, mid-run.
    if (restored == nullptr && static_cast<size_t>(id) >= snapshot_at) {
      ASSERT_OK(h.Snapshot(dir));
      restored = Make(spec);
      ASSERT_OK(h.RestoreInto(restored.get(), dir, h.watermark()));
      RemoveTree(dir);
    }
  }
  IntervalJoinOperator* cur = restored != nullptr ? restored.get() : op.get();
  // State holds exactly the rows a future record can still match.
  size_t live[2] = {0, 0};
  for (const RefRow& r : rows) {
    bool stored = r.key >= 0 || outer[r.side];
    if (stored && w <= expiry(r)) ++live[r.side];
  }
  EXPECT_EQ(Keys(h, "left"), live[L]);
  EXPECT_EQ(Keys(h, "right"), live[R]);
  EXPECT_EQ(cur->buffered_rows(L), live[L]);
  EXPECT_EQ(cur->buffered_rows(R), live[R]);
  EXPECT_EQ(static_cast<int>(h.TakeSide("too_late").size()), too_late);
  EXPECT_GT(too_late, 0);

  // End of input: every unmatched outer row, once.
  w = kMaxTime;
  std::vector<std::string> want;
  for (RefRow& r : rows) {
    if (outer[r.side] && !r.matched && !r.padded) {
      r.padded = true;
      want.push_back(r.side == L ? LeftOnly(r.json) : RightOnly(r.json));
    }
  }
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), UnorderedElementsAreArray(want));
  EXPECT_EQ(Keys(h, "left") + Keys(h, "right"), 0u);
  int matches = 0;
  for (const RefRow& r : rows) matches += r.matched ? 1 : 0;
  EXPECT_GT(matches, 50) << "the test should exercise matching";
}

INSTANTIATE_TEST_SUITE_P(TypesAndSeeds, IntervalJoinModelTest,
                         ::testing::Combine(::testing::Values(JoinType::kInner, JoinType::kLeft,
                                                              JoinType::kRight, JoinType::kFull),
                                            ::testing::Range(1, 7)),
                         [](const auto& info) {
                           return std::string(JoinTypeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace caravela
