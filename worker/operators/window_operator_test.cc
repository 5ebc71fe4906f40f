#include "worker/operators/window_operator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "worker/operators/dedup_operator.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 3'600'000;
// 2026-10-01T00:00:00Z
constexpr int64_t kDay = 1790812800000;
int64_t T(int h, int m) { return kDay + h * kHour + m * kMin; }

WindowSpec Tumbling(int64_t size, int64_t lateness, int64_t early = 0) {
  WindowSpec s;
  s.kind = WindowSpec::Kind::kTumbling;
  s.size = s.slide = size;
  s.allowed_lateness = lateness;
  s.early_fire_every = early;
  AggregateSpec sum;
  sum.as = "revenue";
  sum.fn = AggFn::kSum;
  sum.field = "amount";
  sum.path = FieldPath::Parse("amount");
  AggregateSpec count;
  count.as = "orders";
  count.fn = AggFn::kCount;
  count.field = "*";
  s.aggregates = {sum, count};
  return s;
}

std::string Amount(int64_t a) { return "{\"amount\":" + std::to_string(a) + "}"; }

TEST(WindowOperatorTest, OnTimeLateFinalAndTooLateByHand) {
  WindowOperator op(Tumbling(kHour, 30 * kMin));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessJson(Amount(100), T(10, 10)));
  ASSERT_OK(h.ProcessJson(Amount(50), T(10, 20)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(T(10, 59)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "window [10,11) is not complete before W=11:00";
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          R"({"window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","revenue":150,"orders":2,"revision":1,"state":"ON_TIME"})"));
  ASSERT_OK(h.ProcessJson(Amount(20), T(10, 30)));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(HasSubstr(R"("revenue":170,"orders":3,"revision":2,"state":"LATE")")));
  ASSERT_OK(h.AdvanceWatermark(T(11, 29)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(T(11, 30)));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(HasSubstr(R"("revenue":170,"orders":3,"revision":3,"state":"FINAL")")));
  EXPECT_EQ(op.window_count(), 0u);
  ASSERT_OK(h.ProcessJson(Amount(30), T(10, 40)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr("\"amount\":30")));
  // Records and amounts by arrival: 100 and 50 on time, 20 late (a LATE
  // revision), 30 too late.
  const MetricsRegistry& m = h.metrics();
  EXPECT_EQ(m.Value("window_records_total", R"(op="op",arrival="on_time")"), 2);
  EXPECT_EQ(m.Value("window_records_total", R"(op="op",arrival="late")"), 1);
  EXPECT_EQ(m.Value("window_records_total", R"(op="op",arrival="too_late")"), 1);
  EXPECT_EQ(m.DoubleValue("window_amount_total", R"(op="op",arrival="on_time",field="amount")"),
            150);
  EXPECT_EQ(m.DoubleValue("window_amount_total", R"(op="op",arrival="late",field="amount")"), 20);
  EXPECT_EQ(m.DoubleValue("window_amount_total", R"(op="op",arrival="too_late",field="amount")"),
            30);
}

TEST(WindowOperatorTest, ArgMaxKeepsEveryTiedRowAndSurvivesARestore) {
  WindowSpec spec = Tumbling(kHour, 0);
  AggregateSpec top;
  top.as = "top";
  top.fn = AggFn::kArgMax;
  top.field = "amount";
  top.path = FieldPath::Parse("amount");
  top.keep = {"id", "amount"};
  top.keep_paths = {FieldPath::Parse("id"), FieldPath::Parse("amount")};
  AggregateSpec low = top;
  low.as = "low";
  low.fn = AggFn::kArgMin;
  low.keep.clear();
  low.keep_paths.clear();  // the whole row
  spec.aggregates = {top, low};
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessJson(R"({"id":"a","amount":5,"x":1})", T(10, 1)));
  ASSERT_OK(h.ProcessJson(R"({"id":"b","amount":9,"x":2})", T(10, 2)));
  ASSERT_OK(h.ProcessJson(R"({"id":"c","amount":null})", T(10, 3)));  // ignored
  const std::string dir = ::testing::TempDir() + "/window_argmax_" + std::to_string(::getpid());
  RemoveTree(dir);
  ASSERT_OK(h.Snapshot(dir));
  // A restored operator goes on from the same rows.
  WindowOperator restored(spec);
  ASSERT_OK(h.RestoreInto(&restored, dir, h.watermark()));
  OperatorHarness& h2 = h;
  ASSERT_OK(h2.ProcessJson(R"({"id":"d","amount":9.0,"x":3})", T(10, 4)));  // a tie
  ASSERT_OK(h2.ProcessJson(R"({"id":"e","amount":1,"x":4})", T(10, 5)));
  ASSERT_OK(h2.AdvanceWatermark(T(11, 0)));
  const std::string want =
      R"("top":[{"id":"b","amount":9},{"id":"d","amount":9.0}],"low":[{"id":"e","amount":1,"x":4}])";
  EXPECT_THAT(h2.TakeOutput(), ElementsAre(HasSubstr(want + R"(,"revision":1,"state":"ON_TIME")"),
                                           HasSubstr(want + R"(,"revision":2,"state":"FINAL")")));
  RemoveTree(dir);
}

TEST(WindowOperatorTest, ArgMaxRowsOfMergedSessionsKeepTheHigherOrBothOnATie) {
  WindowSpec spec;
  spec.kind = WindowSpec::Kind::kSession;
  spec.gap = 10 * kMin;
  AggregateSpec top;
  top.as = "top";
  top.fn = AggFn::kArgMax;
  top.field = "amount";
  top.path = FieldPath::Parse("amount");
  top.keep = {"id"};
  top.keep_paths = {FieldPath::Parse("id")};
  spec.aggregates = {top};
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  // Two sessions, 20 min apart, each with a 9; then a record between them
  // merges them: both 9s are kept, the earlier session's first.
  ASSERT_OK(h.ProcessJson(R"({"id":"a","amount":9})", T(10, 0)));
  ASSERT_OK(h.ProcessJson(R"({"id":"b","amount":9})", T(10, 20)));
  ASSERT_OK(h.ProcessJson(R"({"id":"c","amount":1})", T(10, 10)));
  // And a third, merged with a higher value: it replaces them.
  ASSERT_OK(h.ProcessJson(R"({"id":"d","amount":5})", T(11, 0)));
  ASSERT_OK(h.ProcessJson(R"({"id":"e","amount":12})", T(10, 40)));
  ASSERT_OK(h.ProcessJson(R"({"id":"f","amount":2})", T(10, 50)));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), Contains(HasSubstr(R"("top":[{"id":"e"}],"revision")")));
  WindowOperator two(spec);
  OperatorHarness h2(&two);
  ASSERT_OK(h2.Open());
  ASSERT_OK(h2.ProcessJson(R"({"id":"a","amount":9})", T(10, 0)));
  ASSERT_OK(h2.ProcessJson(R"({"id":"b","amount":9})", T(10, 20)));
  ASSERT_OK(h2.ProcessJson(R"({"id":"c","amount":1})", T(10, 10)));
  ASSERT_OK(h2.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h2.TakeOutput(), Contains(HasSubstr(R"("top":[{"id":"a"},{"id":"b"}],"revision")")));
}

// A watermark that completes many windows hands them on in pieces
// (Output::MaybeDrain), each ON_TIME and FINAL once, in key order.
TEST(WindowOperatorTest, WatermarkBurstIsHandedOnInPieces) {
  WindowSpec spec = Tumbling(kHour, 0);
  spec.group_by = {"k"};
  spec.group_paths = {FieldPath::Parse("k")};
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  constexpr int kKeys = 3 * static_cast<int>(Output::kDrainAt);
  std::vector<std::pair<std::string, int64_t>> batch;
  for (int k = kKeys - 1; k >= 0; --k) {
    batch.emplace_back("{\"k\":" + std::to_string(k) + ",\"amount\":1}", T(10, k % 60));
  }
  ASSERT_OK(h.ProcessBatch(batch));
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  EXPECT_GE(h.drains(), 5);
  const std::vector<std::string> out = h.TakeOutput();
  ASSERT_EQ(out.size(), 2u * kKeys);
  // ON_TIME for every key, then FINAL for every key, keys in the order of
  // their JSON text.
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(std::to_string(k));
  std::sort(keys.begin(), keys.end());
  for (int i = 0; i < 2 * kKeys; ++i) {
    const std::string& key = keys[i % kKeys];
    EXPECT_THAT(out[i], HasSubstr("\"k\":" + key + ",\"revenue\":1"));
    EXPECT_THAT(out[i], HasSubstr(i < kKeys ? "ON_TIME" : "FINAL"));
  }
  EXPECT_EQ(op.window_count(), 0u);
}

TEST(WindowOperatorTest, RecordExactlyAtWatermarkIsNotLate) {
  WindowOperator op(Tumbling(kHour, 0));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  ASSERT_OK(h.ProcessJson(Amount(1), T(11, 0)));
  EXPECT_THAT(h.TakeSide("too_late"), IsEmpty());
  ASSERT_OK(h.ProcessJson(Amount(1), T(11, 0) - 1));
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr("\"amount\":1")));
}

TEST(WindowOperatorTest, WindowWhoseFirstRecordIsLateStartsWithLate) {
  WindowOperator op(Tumbling(kHour, kHour));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));  // exactly the window's end
  ASSERT_OK(h.ProcessJson(Amount(4), T(10, 59)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr(R"("revision":1,"state":"LATE")")));
  ASSERT_OK(h.AdvanceWatermark(T(12, 0)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr(R"("revision":2,"state":"FINAL")")));
}

TEST(WindowOperatorTest, EarlyFiresOnlyWhenChanged) {
  WindowOperator op(Tumbling(kHour, 0, kMin));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.SetProcessingTime(5'000));
  ASSERT_OK(h.ProcessJson(Amount(7), T(10, 0)));
  EXPECT_EQ(op.NextTimer(), 60'000);
  ASSERT_OK(h.SetProcessingTime(59'999));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.SetProcessingTime(60'000));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(HasSubstr(R"("revenue":7,"orders":1,"revision":1,"state":"EARLY")")));
  ASSERT_OK(h.SetProcessingTime(300'000));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "nothing new since the last emission";
  ASSERT_OK(h.ProcessJson(Amount(3), T(10, 1)));
  ASSERT_OK(h.SetProcessingTime(360'000));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(HasSubstr(R"("revenue":10,"orders":2,"revision":2,"state":"EARLY")")));
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr("\"revision\":3,\"state\":\"ON_TIME\""),
                                          HasSubstr("\"revision\":4,\"state\":\"FINAL\"")));
}

TEST(WindowOperatorTest, SnapshotRestoreContinuesRevisionsAndState) {
  std::string dir = ::testing::TempDir() + "/window_snapshot_" + std::to_string(::getpid());
  RemoveTree(dir);
  WindowSpec spec = Tumbling(kHour, kHour, kMin);
  spec.group_by = {"country"};
  spec.group_paths = {FieldPath::Parse("country")};
  AggregateSpec distinct;
  distinct.as = "users";
  distinct.fn = AggFn::kCountDistinct;
  distinct.field = "user";
  distinct.path = FieldPath::Parse("user");
  spec.aggregates.push_back(distinct);
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{R"({"country":"PT","amount":1.25,"user":"a"})", T(10, 5)},
                            {R"({"country":"PT","amount":2,"user":"b"})", T(10, 6)},
                            {R"({"country":"ES","amount":5,"user":"a"})", T(10, 7)}}));
  ASSERT_OK(h.SetProcessingTime(60'000));
  EXPECT_EQ(h.TakeOutput().size(), 2u);
  ASSERT_OK(h.ProcessJson(R"({"country":"PT","amount":0.5,"user":"a"})", T(10, 8)));
  ASSERT_OK(h.Snapshot(dir));

  // The uninterrupted run...
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  ASSERT_OK(h.ProcessJson(R"({"country":"PT","amount":1,"user":"c"})", T(10, 9)));
  ASSERT_OK(h.AdvanceWatermark(T(12, 0)));
  std::vector<std::string> uninterrupted = h.TakeOutput();

  // ...equals the restored one.
  WindowOperator restored(spec);
  OperatorHarness h2(&restored);
  ASSERT_OK(h2.Open());
  ASSERT_OK(h2.RestoreInto(&restored, dir, T(10, 7) - 1));
  EXPECT_EQ(restored.window_count(), 2u);
  ASSERT_OK(h2.AdvanceWatermark(T(11, 0)));
  ASSERT_OK(h2.ProcessJson(R"({"country":"PT","amount":1,"user":"c"})", T(10, 9)));
  ASSERT_OK(h2.AdvanceWatermark(T(12, 0)));
  EXPECT_EQ(h2.TakeOutput(), uninterrupted);
  EXPECT_THAT(
      uninterrupted,
      testing::Contains(HasSubstr(
          R"("country":"PT","revenue":4.75,"orders":4,"users":3,"revision":3,"state":"LATE")")));
  RemoveTree(dir);
}

TEST(WindowOperatorTest, ExpiredStateIsDeletedFromTheBackend) {
  WindowOperator op(Tumbling(kHour, 0));
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  for (int i = 0; i < 10; ++i) ASSERT_OK(h.ProcessJson(Amount(i), T(i, 0)));
  ASSERT_OK(h.Commit());
  auto table = h.state().OpenTable("op/windows");
  ASSERT_OK(table.status());
  EXPECT_EQ(*(*table)->CountKeys(), 10u);
  ASSERT_OK(h.AdvanceWatermark(T(5, 0)));
  ASSERT_OK(h.Commit());
  EXPECT_EQ(*(*table)->CountKeys(), 5u);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  ASSERT_OK(h.Commit());
  EXPECT_EQ(*(*table)->CountKeys(), 0u);
}

TEST(DedupOperatorTest, DuplicatesConflictsHorizonAndExpiry) {
  DedupOperator op(FieldPath::Parse("id"), kHour, {}, "arrival");
  OperatorHarness h(&op, nullptr, "unique");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{R"({"id":"a","amount":1,"arrival":1})", T(10, 0)},
                            {R"({"id":"a","amount":1,"arrival":2})", T(10, 0)},
                            {R"({"amount":1,"id":"a","arrival":2})", T(10, 0)},
                            {R"({"id":"a","amount":2,"arrival":3})", T(10, 0)},
                            {R"({"id":"b","amount":1})", T(10, 1)},
                            {R"({"amount":9})", T(10, 1)}}));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr("\"arrival\":1"), HasSubstr("\"id\":\"b\""),
                                          HasSubstr("\"amount\":9")));
  // Top-level field order is not part of the payload: the reordered copy is a
  // duplicate; the copy with another amount is a conflict.
  std::vector<std::string> conflicts = h.TakeSide("conflicts");
  ASSERT_EQ(conflicts.size(), 1u);
  EXPECT_THAT(conflicts[0], HasSubstr("\"amount\":2"));
  EXPECT_THAT(conflicts[0], HasSubstr("first_fingerprint"));
  EXPECT_EQ(h.metrics().Value("dedup_duplicates_total", "op=\"unique\""), 2);
  EXPECT_EQ(h.metrics().Value("dedup_conflicts_total", "op=\"unique\""), 1);
  EXPECT_EQ(h.metrics().Value("dedup_missing_id_total", "op=\"unique\""), 1);

  ASSERT_OK(h.Commit());
  auto ids = h.state().OpenTable("unique/ids");
  ASSERT_OK(ids.status());
  EXPECT_EQ(*(*ids)->CountKeys(), 2u);
  // W = 11:00:30: a (10:00) and b (10:01) are still inside the 1h horizon... a is not.
  ASSERT_OK(h.AdvanceWatermark(T(11, 0) + 30'000));
  ASSERT_OK(h.Commit());
  EXPECT_EQ(*(*ids)->CountKeys(), 1u);
  // A retry of a now is older than the horizon: too_late, not passed on.
  ASSERT_OK(h.ProcessJson(R"({"id":"a","amount":1,"arrival":9})", T(10, 0)));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr("dedup horizon")));
}

// ---------------------------------------------------------------------------
// Randomized comparison against a naive reference model of SPEC §4.
//
// The model keeps every accepted amount per window and recomputes sums from
// scratch; it knows nothing of the operator's indexes, caches or state
// encoding. Emission rules, straight from SPEC §4:
//  * a record updates each of its windows with W < end + L; if none, too_late;
//  * a changed window with W >= end is corrected at the end of the batch (LATE);
//  * an EARLY timer emits changed windows with W < end;
//  * W >= end: ON_TIME once; W >= end + L: FINAL once.
struct ModelWindow {
  std::vector<int64_t> amounts;
  int64_t revision = 0;
  bool complete = false;
  bool final = false;
  bool changed = false;
};

struct Emission {
  int64_t revision;
  std::string state;
  int64_t sum;
  int64_t count;
  bool operator==(const Emission& o) const {
    return revision == o.revision && state == o.state && sum == o.sum && count == o.count;
  }
};

std::ostream& operator<<(std::ostream& os, const Emission& e) {
  return os << "{rev " << e.revision << " " << e.state << " sum " << e.sum << " n " << e.count
            << "}";
}

using WindowKey = std::pair<std::string, int64_t>;  // group, start

class Model {
 public:
  Model(int64_t size, int64_t slide, int64_t lateness)
      : size_(size), slide_(slide), lateness_(lateness) {}

  int too_late = 0;
  std::map<WindowKey, std::vector<Emission>> out;

  void Process(const std::vector<std::tuple<std::string, int64_t, int64_t>>& batch) {
    for (const auto& [group, t, amount] : batch) {
      bool used = false;
      for (int64_t s = FloorDiv(t, slide_) * slide_; s > t - size_; s -= slide_) {
        if (w_ >= s + size_ + lateness_) continue;
        ModelWindow& mw = windows_[{group, s}];
        mw.amounts.push_back(amount);
        mw.changed = true;
        if (w_ >= s + size_) mw.complete = true;
        used = true;
      }
      if (!used) ++too_late;
    }
    for (auto& [k, mw] : windows_) {
      if (!mw.final && mw.complete && mw.changed) Emit(k, mw, "LATE");
    }
  }
  void Early() {
    for (auto& [k, mw] : windows_) {
      if (!mw.final && !mw.complete && mw.changed) Emit(k, mw, "EARLY");
    }
  }
  void Watermark(int64_t w) {
    w_ = std::max(w_, w);
    for (auto& [k, mw] : windows_) {
      if (!mw.final && !mw.complete && w_ >= k.second + size_) {
        mw.complete = true;
        Emit(k, mw, "ON_TIME");
      }
    }
    for (auto& [k, mw] : windows_) {
      if (!mw.final && w_ >= k.second + size_ + lateness_) {
        Emit(k, mw, "FINAL");
        mw.final = true;
      }
    }
  }

 private:
  void Emit(const WindowKey& k, ModelWindow& mw, const char* state) {
    int64_t sum = 0;
    for (int64_t a : mw.amounts) sum += a;
    mw.changed = false;
    out[k].push_back({++mw.revision, state, sum, static_cast<int64_t>(mw.amounts.size())});
  }
  int64_t size_, slide_, lateness_;
  int64_t w_ = kMinTime;
  std::map<WindowKey, ModelWindow> windows_;
};

class WindowModelTest : public ::testing::TestWithParam<int> {};

TEST_P(WindowModelTest, MatchesReferenceModel) {
  std::mt19937_64 rng(GetParam());
  const bool hopping = GetParam() % 2 == 1;
  const bool int_groups = GetParam() % 4 >= 2;
  const int64_t size = 10 * kMin;
  const int64_t slide = hopping ? 5 * kMin : size;
  const int64_t lateness = std::vector<int64_t>{0, 3 * kMin, 20 * kMin}[GetParam() % 3];
  WindowSpec spec = Tumbling(size, lateness, kMin);
  if (hopping) {
    spec.kind = WindowSpec::Kind::kHopping;
    spec.slide = slide;
  }
  spec.group_by = {"g"};
  spec.group_paths = {FieldPath::Parse("g")};
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  Model model(size, slide, lateness);

  const int64_t ooo = 4 * kMin;
  int64_t max_seen = T(0, 0);
  int64_t now = 0;
  int records = 0;
  while (records < 4000) {
    std::vector<std::tuple<std::string, int64_t, int64_t>> batch;
    std::vector<std::pair<std::string, int64_t>> json_batch;
    int n = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) {
      // Mostly moving forward, with disorder up to 15 minutes back.
      // Whole minutes, so records land exactly on window bounds and on the
      // watermark often (the boundaries are where off-by-one bugs live).
      int64_t t = max_seen + static_cast<int64_t>(rng() % 3) * kMin -
                  static_cast<int64_t>(rng() % 15) * kMin;
      if (rng() % 50 == 0) t -= 40 * kMin;  // now and then, very late
      // Groups come and go (their windows final), so a freed group id is
      // taken by another key: string keys for some seeds, integers for
      // others (InternGroup's cache holds both).
      std::string g = std::string(1, static_cast<char>((int_groups ? '1' : 'a') + rng() % 3));
      int64_t amount = static_cast<int64_t>(rng() % 100) - 10;
      batch.emplace_back(g, t, amount);
      const std::string g_json = int_groups ? g : "\"" + g + "\"";
      json_batch.emplace_back("{\"g\":" + g_json + ",\"amount\":" + std::to_string(amount) + "}",
                              t);
      max_seen = std::max(max_seen, t);
      ++records;
    }
    model.Process(batch);
    ASSERT_OK(h.ProcessBatch(json_batch));
    if (rng() % 3 == 0) {
      now += static_cast<int64_t>(rng() % (2 * kMin));
      // Timers are aligned to multiples of a minute: fire the model's EARLY
      // pass once per crossed boundary, like the harness does.
      while (op.NextTimer() <= now) {
        model.Early();
        ASSERT_OK(h.SetProcessingTime(op.NextTimer()));
      }
      ASSERT_OK(h.SetProcessingTime(now));
    }
    if (rng() % 2 == 0) {
      model.Watermark(max_seen - ooo);
      ASSERT_OK(h.AdvanceWatermark(max_seen - ooo));
    }
    if (rng() % 97 == 0) {
      ASSERT_OK(h.Commit());
    }
  }
  model.Watermark(kMaxTime);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));

  std::map<WindowKey, std::vector<Emission>> actual;
  JsonDecoder dec;
  Record r;
  for (const std::string& line : h.TakeOutput()) {
    ASSERT_OK(dec.Decode(line, &r));
    const Value gv = r.GetPath(FieldPath::Parse("g"));
    const std::string g = gv.type == ValueType::kInt ? std::to_string(gv.i) : std::string(gv.s);
    int64_t start = *ParseIso8601(r.GetPath(FieldPath::Parse("window_start")).s);
    actual[{g, start}].push_back({r.GetPath(FieldPath::Parse("revision")).i,
                                  std::string(r.GetPath(FieldPath::Parse("state")).s),
                                  r.GetPath(FieldPath::Parse("revenue")).i,
                                  r.GetPath(FieldPath::Parse("orders")).i});
  }
  EXPECT_EQ(static_cast<int>(h.TakeSide("too_late").size()), model.too_late);
  ASSERT_EQ(actual.size(), model.out.size());
  for (const auto& [k, seq] : model.out) {
    EXPECT_EQ(actual[k], seq) << "window " << k.first << "@" << FormatIso8601(k.second);
  }
  EXPECT_GT(model.too_late, 0) << "the generator should produce some too-late records";
  EXPECT_EQ(op.window_count(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, WindowModelTest, ::testing::Range(1, 13));

// Sessions against a naive model: per group a map of sessions merged by
// scanning them all. Many short sessions that merge often, so windows are
// freed and their slots reused, stale timer references pile up and are
// compacted, and stored sessions are replaced by merged ones after commits.
// Checks every window's emission sequence, the too-late count, and that one
// watermark step emits ON_TIME and then FINAL results each in (end, group,
// start) order.
class SessionModelTest : public ::testing::TestWithParam<int> {};

TEST_P(SessionModelTest, MatchesReferenceModel) {
  std::mt19937_64 rng(GetParam());
  const int64_t gap = 3 * kMin;
  const int64_t lateness = std::vector<int64_t>{0, 5 * kMin, 30 * kMin}[GetParam() % 3];
  WindowSpec spec = Tumbling(kHour, lateness);
  spec.kind = WindowSpec::Kind::kSession;
  spec.size = spec.slide = 0;
  spec.gap = gap;
  spec.group_by = {"g"};
  spec.group_paths = {FieldPath::Parse("g")};
  WindowOperator op(spec);
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());

  struct Session {
    int64_t end, sum, count, revision;
    bool fired, changed;
  };
  using Key = std::tuple<std::string, int64_t, int64_t>;  // group, start, end
  std::map<std::string, std::map<int64_t, Session>> model;
  std::map<Key, std::vector<Emission>> want;
  int64_t W = kMinTime;
  int too_late = 0;
  auto emit = [&](const std::string& g, int64_t start, Session& s, const char* state) {
    s.changed = false;
    want[{g, start, s.end}].push_back({++s.revision, state, s.sum, s.count});
  };
  // Group names share their first 8 bytes, so ordering needs the whole key.
  const std::vector<std::string> groups = {"groupname-a", "groupname-b", "g", "groupname-"};

  std::map<Key, std::vector<Emission>> got;
  JsonDecoder dec;
  Record r;
  auto take = [&](bool check_order) {
    std::vector<std::tuple<int64_t, std::string, int64_t>> on_time, final;  // end, key, start
    for (const std::string& line : h.TakeOutput()) {
      ASSERT_OK(dec.Decode(line, &r));
      std::string g(r.GetPath(FieldPath::Parse("g")).s);
      int64_t start = *ParseIso8601(r.GetPath(FieldPath::Parse("window_start")).s);
      int64_t end = *ParseIso8601(r.GetPath(FieldPath::Parse("window_end")).s);
      std::string state(r.GetPath(FieldPath::Parse("state")).s);
      got[{g, start, end}].push_back({r.GetPath(FieldPath::Parse("revision")).i, state,
                                      r.GetPath(FieldPath::Parse("revenue")).i,
                                      r.GetPath(FieldPath::Parse("orders")).i});
      // The group key is the value's JSON text: compare "g" with quotes.
      if (state == "ON_TIME") on_time.emplace_back(end, "\"" + g + "\"", start);
      if (state == "FINAL") final.emplace_back(end, "\"" + g + "\"", start);
    }
    if (check_order) {
      EXPECT_TRUE(std::is_sorted(on_time.begin(), on_time.end()));
      EXPECT_TRUE(std::is_sorted(final.begin(), final.end()));
    }
  };

  int64_t max_seen = T(0, 0);
  for (int records = 0; records < 6000;) {
    std::vector<std::pair<std::string, int64_t>> batch;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i, ++records) {
      int64_t t = max_seen + static_cast<int64_t>(rng() % 9) * kMin / 2 -
                  static_cast<int64_t>(rng() % 12) * kMin;
      if (rng() % 40 == 0) t -= 45 * kMin;
      const std::string& g = groups[rng() % groups.size()];
      const int64_t amount = static_cast<int64_t>(rng() % 50);
      batch.emplace_back("{\"g\":\"" + g + "\",\"amount\":" + std::to_string(amount) + "}", t);
      max_seen = std::max(max_seen, t);
      // The model: merge every session that [t, t + gap] touches.
      auto& sessions = model[g];
      int64_t start = t, end = t + gap, sum = amount, count = 1, revision = 0;
      std::vector<int64_t> merged;
      for (auto& [s, ses] : sessions) {
        if (s <= t + gap && ses.end >= t) merged.push_back(s);
      }
      for (int64_t s : merged) {
        start = std::min(start, s);
        end = std::max(end, sessions[s].end);
      }
      if (W >= end + lateness) {
        ++too_late;
        continue;
      }
      for (int64_t s : merged) {
        sum += sessions[s].sum;
        count += sessions[s].count;
        revision = std::max(revision, sessions[s].revision);
        sessions.erase(s);
      }
      sessions[start] = Session{end, sum, count, revision, W >= end, true};
    }
    ASSERT_OK(h.ProcessBatch(batch));
    for (auto& [g, sessions] : model) {
      for (auto& [s, ses] : sessions) {
        if (ses.fired && ses.changed) emit(g, s, ses, "LATE");
      }
    }
    take(false);
    if (rng() % 2 == 0) {
      W = std::max(W, max_seen - 2 * kMin);
      for (auto& [g, sessions] : model) {
        for (auto& [s, ses] : sessions) {
          if (!ses.fired && W >= ses.end) {
            ses.fired = true;
            emit(g, s, ses, "ON_TIME");
          }
        }
      }
      for (auto& [g, sessions] : model) {
        for (auto it = sessions.begin(); it != sessions.end();) {
          if (W >= it->second.end + lateness) {
            emit(g, it->first, it->second, "FINAL");
            it = sessions.erase(it);
          } else {
            ++it;
          }
        }
      }
      ASSERT_OK(h.AdvanceWatermark(W));
      take(true);
    }
    if (rng() % 7 == 0) {
      ASSERT_OK(h.Commit());
    }
  }
  for (auto& [g, sessions] : model) {
    for (auto& [s, ses] : sessions) {
      if (!ses.fired) emit(g, s, ses, "ON_TIME");
    }
    for (auto& [s, ses] : sessions) emit(g, s, ses, "FINAL");
  }
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  take(true);
  EXPECT_EQ(static_cast<int>(h.TakeSide("too_late").size()), too_late);
  EXPECT_GT(too_late, 0) << "the generator should produce some too-late records";
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(want.size(), 300u) << "the generator should make many sessions";
  for (const auto& [k, seq] : want) {
    EXPECT_EQ(got[k], seq) << "session " << std::get<0>(k) << "@" << FormatIso8601(std::get<1>(k));
  }
  EXPECT_EQ(op.window_count(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SessionModelTest, ::testing::Range(1, 7));

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// The audit trail: a too_late record names the window it missed and that
// window's last revision, across a snapshot/restore, until the horizon.
TEST(WindowOperatorTest, TooLateRecordsSayWhichWindowTheyMissedAndItsLastRevision) {
  WindowSpec spec = Tumbling(kHour, 30 * kMin);
  spec.group_by = {"country"};
  spec.group_paths = {FieldPath::Parse("country")};
  WindowOperator op(spec);
  WindowOperator restored(spec);  // declared before the harness: outlives it
  const std::string dir = ::testing::TempDir() + "/audit_" + std::to_string(::getpid());
  RemoveTree(dir);
  auto backend = OpenRocksDbBackend(dir + "/db");
  ASSERT_OK(backend.status());
  OperatorHarness h(&op, std::move(*backend));
  ASSERT_OK(h.Open());
  auto rec = [](const char* country, int amount) {
    return absl::StrCat(R"({"country":")", country, R"(","amount":)", amount, "}");
  };
  ASSERT_OK(h.ProcessJson(rec("FR", 5), T(10, 10)));
  ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
  ASSERT_OK(h.ProcessJson(rec("FR", 7), T(10, 15)));  // LATE, revision 2
  ASSERT_OK(h.AdvanceWatermark(T(11, 30)));           // FINAL, revision 3
  EXPECT_THAT(h.TakeOutput(),
              Contains(HasSubstr(R"("revenue":12,"orders":2,"revision":3,"state":"FINAL")")));
  const std::string fr_window =
      R"("window":{"country":"FR","window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","revision":3})";
  ASSERT_OK(h.ProcessJson(rec("FR", 1), T(10, 20)));
  ASSERT_OK(h.ProcessJson(rec("PT", 1), T(10, 20)));
  EXPECT_THAT(
      h.TakeSide("too_late"),
      ElementsAre(
          AllOf(HasSubstr(R"("reason":"after_final","detail":"window already final)"),
                HasSubstr(fr_window)),
          HasSubstr(
              R"("window":{"country":"PT","window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","revision":null})")));
  EXPECT_EQ(h.metrics().Value("too_late_total", R"(op="op",reason="after_final")"), 2);

  ASSERT_OK(h.Snapshot(dir + "/snap"));
  ASSERT_OK(h.RestoreInto(&restored, dir + "/snap", h.watermark()));
  ASSERT_OK(h.ProcessJson(rec("FR", 1), T(10, 25)));
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(HasSubstr(fr_window)));

  // Seven days of event time later it is forgotten.
  ASSERT_OK(h.AdvanceWatermark(T(11, 30) + WindowOperator::kAuditHorizon + kHour + 1));
  ASSERT_OK(h.Commit());
  ASSERT_OK(h.ProcessJson(rec("FR", 1), T(10, 25)));
  EXPECT_THAT(
      h.TakeSide("too_late"),
      ElementsAre(HasSubstr(R"("window_end":"2026-10-01T11:00:00.000Z","revision":null})")));
  RemoveTree(dir);
}

// reconcile: {id: event_id}: results carry the number of records aggregated
// and an order-independent digest of their ids, kept across snapshot/restore.
TEST(WindowOperatorTest, ReconcileCountsEventsAndDigestsIdsInAnyOrder) {
  WindowSpec spec = Tumbling(kHour, 0);
  spec.reconcile_id = "event_id";
  spec.reconcile_path = FieldPath::Parse("event_id");
  auto rec = [](const std::string& id, int amount) {
    return "{\"event_id\":\"" + id + "\",\"amount\":" + std::to_string(amount) + "}";
  };
  auto final_line = [&](const std::vector<std::string>& ids, bool restore) {
    WindowOperator op(spec);
    WindowOperator restored(spec);  // declared before the harness: outlives it
    std::string dir = ::testing::TempDir() + "/reconcile_" + std::to_string(::getpid());
    RemoveTree(dir);
    auto backend = OpenRocksDbBackend(dir + "/db");
    EXPECT_OK(backend.status());
    OperatorHarness h(&op, std::move(*backend));
    EXPECT_OK(h.Open());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_OK(h.ProcessJson(rec(ids[i], 10), T(10, static_cast<int>(i))));
      if (restore && i == ids.size() / 2) {
        EXPECT_OK(h.Snapshot(dir + "/snap"));
        EXPECT_OK(h.RestoreInto(&restored, dir + "/snap", h.watermark()));
      }
    }
    EXPECT_OK(h.AdvanceWatermark(T(11, 0)));
    std::vector<std::string> out = h.TakeOutput();
    RemoveTree(dir);
    return out.empty() ? std::string() : out.back();
  };
  const std::string a = final_line({"a", "b", "c", "d"}, false);
  EXPECT_THAT(a, HasSubstr("\"events\":4,\"id_digest\":\""));
  EXPECT_EQ(final_line({"d", "c", "b", "a"}, false), a) << "order must not matter";
  EXPECT_EQ(final_line({"a", "b", "c", "d"}, true), a) << "kept across snapshot/restore";
  EXPECT_NE(final_line({"a", "b", "c", "e"}, false), a) << "another id changes the digest";
}

}  // namespace
}  // namespace caravela
