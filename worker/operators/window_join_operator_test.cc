#include "worker/operators/window_join_operator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

constexpr int64_t kSec = 1'000;
constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 3'600'000;
// 2026-10-01T00:00:00Z
constexpr int64_t kDay = 1790812800000;
int64_t T(int h, int m) { return kDay + h * kHour + m * kMin; }

constexpr int L = WindowJoinOperator::kLeft;
constexpr int R = WindowJoinOperator::kRight;

WindowJoinSpec Spec(JoinType type, int64_t size, int64_t slide, int64_t lateness = 0,
                    const std::vector<std::pair<std::string, std::string>>& keys = {{"k", "k"}}) {
  WindowJoinSpec s;
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
  s.kind = size == slide ? WindowJoinSpec::Kind::kTumbling : WindowJoinSpec::Kind::kHopping;
  s.size = size;
  s.slide = slide;
  s.type = type;
  s.allowed_lateness = lateness;
  return s;
}

std::string Row(const std::string& id, const std::string& k) {
  return R"({"id":")" + id + R"(","k":)" + k + "}";
}
std::string Out(int64_t start, int64_t end, const std::string& l, const std::string& r) {
  return R"({"window_start":")" + FormatIso8601(start) + R"(","window_end":")" +
         FormatIso8601(end) + R"(","left":)" + l + R"(,"right":)" + r + "}";
}

uint64_t Keys(OperatorHarness& h) {
  EXPECT_OK(h.Commit());
  uint64_t n = 0;
  for (const char* t : {"left", "right", "windows"}) {
    auto table = h.state().OpenTable(std::string("op/") + t);
    EXPECT_OK(table.status());
    n += *(*table)->CountKeys();
  }
  return n;
}

TEST(WindowJoinTest, TumblingInnerJoinEmitsEveryPairWhenTheWindowCloses) {
  WindowJoinOperator op(Spec(JoinType::kInner, kHour, kHour));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  const std::string l1 = Row("l1", "1"), l2 = Row("l2", "1"), l3 = Row("l3", "2");
  const std::string r1 = Row("r1", "1"), r2 = Row("r2", "1"), r3 = Row("r3", "1");
  const std::string r4 = Row("r4", "3");
  ASSERT_OK(h.ProcessBatch({{l2, T(10, 50)}, {l1, T(10, 5)}, {l3, T(10, 10)}}, L));
  ASSERT_OK(h.ProcessBatch({{r2, T(11, 0) - 1}, {r1, T(10, 30)}, {r4, T(10, 0)}}, R));
  ASSERT_OK(h.ProcessJson(r3, T(11, 0), R));  // the next window
  ASSERT_OK(h.AdvanceWatermark(T(11, 0) - 1));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "the window is not complete before W = end";
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  const int64_t s = T(10, 0), e = T(11, 0);
  // Key by key; left rows, then right rows, in event-time order.
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Out(s, e, l1, r1), Out(s, e, l1, r2), Out(s, e, l2, r1),
                                          Out(s, e, l2, r2)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "r3 is alone in [11:00, 12:00)";
  EXPECT_EQ(Keys(h), 0u);
  EXPECT_EQ(op.window_count(), 0u);
}

TEST(WindowJoinTest, KeepBuffersAndEmitsOnlyTheNamedFieldsOfASide) {
  WindowJoinSpec spec = Spec(JoinType::kLeft, kHour, kHour);
  spec.keep[L] = {"id", "extra.tag"};
  spec.keep_paths[L] = {FieldPath::Parse("id"), FieldPath::Parse("extra.tag")};
  WindowJoinOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  // The key is read before the row is cut down (k is not kept).
  ASSERT_OK(h.ProcessJson(R"({"id":"l1","k":1,"extra":{"tag":"x","wide":"yyyy"}})", T(10, 5), L));
  ASSERT_OK(h.ProcessJson(R"({"id":"l2","k":2})", T(10, 6), L));
  ASSERT_OK(h.ProcessJson(Row("r1", "1"), T(10, 7), R));  // right: whole rows
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  const int64_t s = T(10, 0), e = T(11, 0);
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(Out(s, e, R"({"id":"l1","extra.tag":"x"})", Row("r1", "1")),
                          Out(s, e, R"({"id":"l2","extra.tag":null})", "null")));
}

TEST(WindowJoinTest, OutputEventTimeIsWindowEndMinusOneAndWatermarkIsHeldBack) {
  WindowJoinOperator op(Spec(JoinType::kFull, kHour, kHour, 10 * kMin));
  MetricsRegistry metrics;
  ManualClock clock(5);
  auto backend = NewMemoryBackend();
  OperatorContext ctx("op", backend.get(), &metrics, &clock);
  ASSERT_OK(op.Open(ctx));
  Output out(1);
  JsonDecoder decoder;
  RecordBatch batch;
  for (int side : {L, R}) {
    batch.clear();
    Record& r = batch.Append();
    ASSERT_OK(decoder.Decode(Row("x", "1"), &r));
    r.event_time = T(10, 20);
    ASSERT_OK(op.ProcessBatch(ctx, side, batch, out));
  }
  ctx.set_watermark(T(11, 0));
  ASSERT_OK(op.OnWatermark(ctx, out));
  ASSERT_EQ(out.main().size(), 1u);
  EXPECT_EQ(out.main()[0].event_time, T(11, 0) - 1);
  EXPECT_EQ(op.OutputWatermark(T(12, 0)), T(12, 0) - 10 * kMin);
  EXPECT_EQ(op.OutputWatermark(kMinTime), kMinTime);
  EXPECT_EQ(op.OutputWatermark(kMaxTime), kMaxTime);
}

TEST(WindowJoinTest, OuterRowsOnlyWhenFinalAndLateRowsJoinAtOnce) {
  WindowJoinOperator op(Spec(JoinType::kFull, kHour, kHour, 10 * kMin));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  const int64_t s = T(10, 0), e = T(11, 0);
  const std::string l1 = Row("l1", "1"), r1 = Row("r1", "2");
  ASSERT_OK(h.ProcessJson(l1, T(10, 10), L));
  ASSERT_OK(h.ProcessJson(r1, T(10, 20), R));
  ASSERT_OK(h.AdvanceWatermark(T(11, 5)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "closed, no pairs; not final, so no padding yet";
  // Late (10:30 < W) but within the lateness: joins l1 at once.
  const std::string r2 = Row("r2", "1");
  ASSERT_OK(h.ProcessJson(r2, T(10, 30), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Out(s, e, l1, r2)));
  ASSERT_OK(h.AdvanceWatermark(T(11, 10) - 1));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(T(11, 10)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Out(s, e, "null", r1)))
      << "final: only the row whose key found no partner";
  // After the window is final: too late, on either side; no output, ever.
  ASSERT_OK(h.ProcessJson(Row("l_late", "2"), T(10, 59), L));
  ASSERT_OK(h.ProcessJson(Row("r_late", "1"), T(10, 0), R));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_THAT(h.TakeSide("too_late"),
              ElementsAre(HasSubstr(R"("record":{"id":"l_late","k":2},"side":"left")"),
                          HasSubstr(R"("record":{"id":"r_late","k":1},"side":"right")")));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_EQ(Keys(h), 0u);
}

TEST(WindowJoinTest, AWindowWhoseFirstRowIsLateJoinsOnArrivalOnly) {
  WindowJoinOperator op(Spec(JoinType::kInner, kHour, kHour, kHour));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.AdvanceWatermark(T(11, 30)));
  const std::string l = Row("l", "1"), r = Row("r", "1");
  ASSERT_OK(h.ProcessJson(l, T(10, 10), L));
  ASSERT_OK(h.ProcessJson(r, T(10, 20), R));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(Out(T(10, 0), T(11, 0), l, r)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "no second emission when the window closes";
}

TEST(WindowJoinTest, LeftAndRightJoinsPadOnlyTheirOuterSide) {
  for (JoinType type : {JoinType::kInner, JoinType::kLeft, JoinType::kRight}) {
    WindowJoinOperator op(Spec(type, kHour, kHour));
    OperatorHarness h(&op);
    ASSERT_OK(h.Open());
    const std::string l = Row("l", "1"), r = Row("r", "2");
    ASSERT_OK(h.ProcessJson(l, T(10, 0), L));
    ASSERT_OK(h.ProcessJson(r, T(10, 0), R));
    ASSERT_OK(h.AdvanceWatermark(kMaxTime));
    std::vector<std::string> want;
    if (type == JoinType::kLeft) want = {Out(T(10, 0), T(11, 0), l, "null")};
    if (type == JoinType::kRight) want = {Out(T(10, 0), T(11, 0), "null", r)};
    EXPECT_EQ(h.TakeOutput(), want) << JoinTypeName(type);
  }
}

TEST(WindowJoinTest, HoppingWindowsJoinOncePerSharedWindow) {
  WindowJoinOperator op(Spec(JoinType::kLeft, 10 * kMin, 5 * kMin));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  const std::string l = Row("l", "1"), r1 = Row("r1", "1"), r2 = Row("r2", "1");
  ASSERT_OK(h.ProcessJson(l, T(10, 7), L));    // [10:00, 10:10) and [10:05, 10:15)
  ASSERT_OK(h.ProcessJson(r1, T(10, 8), R));   // both
  ASSERT_OK(h.ProcessJson(r2, T(10, 12), R));  // [10:05, 10:15) and [10:10, 10:20)
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(Out(T(10, 0), T(10, 10), l, r1), Out(T(10, 5), T(10, 15), l, r1),
                          Out(T(10, 5), T(10, 15), l, r2)));
  // A record with one final and one open window joins in the open one and is
  // not too late.
  WindowJoinOperator op2(Spec(JoinType::kInner, 10 * kMin, 5 * kMin));
  OperatorHarness h2(&op2);
  ASSERT_OK(h2.Open());
  ASSERT_OK(h2.ProcessJson(r1, T(10, 8), R));
  ASSERT_OK(h2.AdvanceWatermark(T(10, 10)));
  EXPECT_THAT(h2.TakeOutput(), IsEmpty());
  ASSERT_OK(h2.ProcessJson(l, T(10, 7), L));
  EXPECT_THAT(h2.TakeOutput(), IsEmpty());
  EXPECT_THAT(h2.TakeSide("too_late"), IsEmpty());
  ASSERT_OK(h2.AdvanceWatermark(T(10, 15)));
  EXPECT_THAT(h2.TakeOutput(), ElementsAre(Out(T(10, 5), T(10, 15), l, r1)));
}

TEST(WindowJoinTest, CompositeAndNullKeys) {
  WindowJoinOperator op(Spec(JoinType::kFull, kHour, kHour, 0, {{"a", "a"}, {"b", "bb"}}));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  const std::string l = R"({"a":1,"b":"x"})", l_null = R"({"a":1,"b":null})",
                    l_missing = R"({"a":1})";
  const std::string r = R"({"a":1.0,"bb":"x"})", r_other = R"({"a":1,"bb":"y"})",
                    r_null = R"({"a":1,"bb":null})";
  ASSERT_OK(h.ProcessBatch({{l, T(10, 1)}, {l_null, T(10, 2)}, {l_missing, T(10, 3)}}, L));
  ASSERT_OK(h.ProcessBatch({{r, T(10, 4)}, {r_other, T(10, 5)}, {r_null, T(10, 6)}}, R));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  const int64_t s = T(10, 0), e = T(11, 0);
  std::vector<std::string> got = h.TakeOutput();
  EXPECT_THAT(got, UnorderedElementsAreArray(
                       {Out(s, e, l, r), Out(s, e, l_null, "null"), Out(s, e, l_missing, "null"),
                        Out(s, e, "null", r_other), Out(s, e, "null", r_null)}));
  EXPECT_EQ(got.front(), Out(s, e, l, r)) << "pairs at close come before padding at final";
  EXPECT_EQ(Keys(h), 0u);
}

TEST(WindowJoinTest, SnapshotRestoreBetweenCloseAndFinalEqualsTheUninterruptedRun) {
  const std::string dir = ::testing::TempDir() + "/window_join_" + std::to_string(::getpid());
  RemoveTree(dir);
  const WindowJoinSpec spec = Spec(JoinType::kFull, kHour, kHour, 30 * kMin);
  auto run_rest = [&](OperatorHarness& h) {
    EXPECT_OK(h.ProcessJson(Row("r_late", "1"), T(10, 40), R));
    EXPECT_OK(h.ProcessJson(Row("l_next", "9"), T(11, 10), L));
    EXPECT_OK(h.AdvanceWatermark(T(11, 30)));
    EXPECT_OK(h.ProcessJson(Row("too_late", "1"), T(10, 40), R));
    EXPECT_OK(h.AdvanceWatermark(kMaxTime));
  };
  WindowJoinOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{Row("l1", "1"), T(10, 5)}, {Row("l2", "2"), T(10, 6)}}, L));
  ASSERT_OK(h.ProcessJson(Row("r1", "1"), T(10, 7), R));
  ASSERT_OK(h.AdvanceWatermark(T(11, 1)));
  std::vector<std::string> before = h.TakeOutput();
  EXPECT_THAT(before, ElementsAre(Out(T(10, 0), T(11, 0), Row("l1", "1"), Row("r1", "1"))));
  ASSERT_OK(h.Snapshot(dir));
  run_rest(h);
  std::vector<std::string> uninterrupted = h.TakeOutput();
  EXPECT_THAT(uninterrupted,
              ElementsAre(Out(T(10, 0), T(11, 0), Row("l1", "1"), Row("r_late", "1")),
                          Out(T(10, 0), T(11, 0), Row("l2", "2"), "null"),
                          Out(T(11, 0), T(12, 0), Row("l_next", "9"), "null")));
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr("too_late")));

  WindowJoinOperator restored(spec);
  OperatorHarness h2(&restored);
  ASSERT_OK(h2.Open());
  ASSERT_OK(h2.RestoreInto(&restored, dir, T(11, 1)));
  EXPECT_EQ(restored.window_count(), 1u);
  run_rest(h2);
  EXPECT_EQ(h2.TakeOutput(), uninterrupted);
  RemoveTree(dir);
}

// ---------------------------------------------------------------------------
// Randomized comparison against a brute-force reference of the window join.
//
// The reference keeps, per window, every accepted row (a record joins window
// [s, e) iff W < e + allowed_lateness when it is processed; it is too late iff
// it joins no window) and emits, per step:
//  * a pair of rows with equal non-null keys in one window at the later of
//    the second row's arrival and the window's close (the first watermark
//    W >= e);
//  * once the window is final (W >= e + lateness), a padded row for each row
//    of an outer side whose key has no row on the other side.
struct RefRow {
  int side;
  int key;  // -1: null
  std::string json;
};

struct RefWindow {
  std::vector<RefRow> rows;
  bool closed = false;
};

class WindowJoinModelTest : public ::testing::TestWithParam<std::tuple<JoinType, int>> {};

TEST_P(WindowJoinModelTest, MatchesBruteForceReference) {
  const auto [type, seed] = GetParam();
  std::mt19937_64 rng(seed * 7919 + static_cast<int>(type));
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  const int64_t size = pick({2 * kSec, 5 * kSec});
  const int64_t slide = seed % 2 == 0 ? size : size / 2;
  const int64_t lateness = pick({0, 1 * kSec, 4 * kSec});
  const int64_t disorder = pick({1 * kSec, 3 * kSec});
  const int keys = static_cast<int>(pick({2, 5, 20}));
  const WindowJoinSpec spec = Spec(type, size, slide, lateness);
  const bool outer[2] = {type == JoinType::kLeft || type == JoinType::kFull,
                         type == JoinType::kRight || type == JoinType::kFull};
  SCOPED_TRACE(::testing::Message()
               << JoinTypeName(type) << " seed " << seed << " size " << size << " slide " << slide
               << " lateness " << lateness << " disorder " << disorder << " keys " << keys);
  const std::string dir = ::testing::TempDir() + "/window_join_model_" +
                          std::to_string(::getpid()) + "_" + std::to_string(seed) + "_" +
                          JoinTypeName(type);
  RemoveTree(dir);
  auto op = std::make_unique<WindowJoinOperator>(spec);
  std::unique_ptr<WindowJoinOperator> restored;
  OperatorHarness h(op.get());
  ASSERT_OK(h.Open());

  std::map<int64_t, RefWindow> windows;
  int64_t w = kMinTime;
  int64_t max_seen[2] = {kMinTime, kMinTime};
  int too_late = 0, matches = 0, padded = 0;
  auto out = [&](int64_t s, const std::string& l, const std::string& r) {
    return Out(s, s + size, l, r);
  };
  // Watermark step: close, then finish windows.
  auto advance = [&](std::vector<std::string>* want) {
    for (auto& [s, win] : windows) {
      if (win.closed || w < s + size) continue;
      win.closed = true;
      for (const RefRow& a : win.rows) {
        for (const RefRow& b : win.rows) {
          if (a.side == L && b.side == R && a.key >= 0 && a.key == b.key) {
            want->push_back(out(s, a.json, b.json));
            ++matches;
          }
        }
      }
    }
    for (auto it = windows.begin(); it != windows.end();) {
      if (w < it->first + size + lateness) break;
      for (const RefRow& a : it->second.rows) {
        if (!outer[a.side]) continue;
        bool partner = std::any_of(
            it->second.rows.begin(), it->second.rows.end(),
            [&](const RefRow& b) { return b.side != a.side && a.key >= 0 && b.key == a.key; });
        if (!partner) {
          want->push_back(a.side == L ? out(it->first, a.json, "null")
                                      : out(it->first, "null", a.json));
          ++padded;
        }
      }
      it = windows.erase(it);
    }
  };
  const int n = 3000;
  const int snapshot_at = n / 2 + static_cast<int>(rng() % (n / 4));
  int64_t clock = T(0, 0);
  int id = 0;
  for (int step = 0; id < n; ++step) {
    const int side = static_cast<int>(rng() % 2);
    const int count = 1 + static_cast<int>(rng() % 4);
    std::vector<std::pair<std::string, int64_t>> batch;
    std::vector<std::string> want;
    for (int b = 0; b < count && id < n; ++b, ++id) {
      clock += 100 * static_cast<int64_t>(rng() % 3);
      int64_t t = clock - 100 * static_cast<int64_t>(rng() % (disorder / 100));
      if (rng() % 40 == 0) t -= 2 * disorder + lateness + size;  // very late
      RefRow row{side, rng() % 15 == 0 ? -1 : static_cast<int>(rng() % keys), ""};
      row.json = R"({"id":)" + std::to_string(id) +
                 (row.key < 0 ? std::string() : R"(,"k":)" + std::to_string(row.key)) + "}";
      batch.emplace_back(row.json, t);
      max_seen[side] = std::max(max_seen[side], t);
      bool used = false;
      for (int64_t s = FloorDiv(t, slide) * slide; s > t - size; s -= slide) {
        if (w >= s + size + lateness) continue;
        used = true;
        if (row.key < 0 && !outer[side]) continue;  // never matches, never padded: not kept
        RefWindow& win = windows[s];
        if (w >= s + size) {
          win.closed = true;  // created closed, or already closed
          for (const RefRow& o : win.rows) {
            if (o.side != side && row.key >= 0 && o.key == row.key) {
              want.push_back(side == L ? out(s, row.json, o.json) : out(s, o.json, row.json));
              ++matches;
            }
          }
        }
        win.rows.push_back(row);
      }
      if (!used) ++too_late;
    }
    ASSERT_OK(h.ProcessBatch(batch, side));
    ASSERT_THAT(h.TakeOutput(), UnorderedElementsAreArray(want)) << "batch at step " << step;

    if (rng() % 3 == 0 && max_seen[L] != kMinTime && max_seen[R] != kMinTime) {
      int64_t nw = std::min(max_seen[L], max_seen[R]) - disorder;
      if (nw > w) {
        w = nw;
        want.clear();
        advance(&want);
        ASSERT_OK(h.AdvanceWatermark(w));
        ASSERT_THAT(h.TakeOutput(), UnorderedElementsAreArray(want)) << "watermark " << w;
      }
    }
    if (restored == nullptr && id >= snapshot_at) {
      ASSERT_OK(h.Snapshot(dir));
      restored = std::make_unique<WindowJoinOperator>(spec);
      ASSERT_OK(h.RestoreInto(restored.get(), dir, h.watermark()));
      RemoveTree(dir);
    }
  }
  EXPECT_EQ(static_cast<int>(h.TakeSide("too_late").size()), too_late);
  EXPECT_GT(too_late, 0);
  // State: exactly the windows that are not final yet.
  EXPECT_EQ((restored != nullptr ? restored.get() : op.get())->window_count(), windows.size());
  w = kMaxTime;
  std::vector<std::string> want;
  advance(&want);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), UnorderedElementsAreArray(want));
  EXPECT_EQ(Keys(h), 0u) << "all state freed";
  EXPECT_GT(matches, 50);
  if (outer[L] || outer[R]) {
    EXPECT_GT(padded, 10);
  }
}

INSTANTIATE_TEST_SUITE_P(TypesAndSeeds, WindowJoinModelTest,
                         ::testing::Combine(::testing::Values(JoinType::kInner, JoinType::kLeft,
                                                              JoinType::kRight, JoinType::kFull),
                                            ::testing::Range(1, 7)),
                         [](const auto& info) {
                           return std::string(JoinTypeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace caravela
