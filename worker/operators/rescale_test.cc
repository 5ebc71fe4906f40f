// Operator::AdoptState (SPEC §8 rescaling): the state one task built is split
// over two new tasks by the exchange key's hash. Each test routes records
// after the split the way the exchange does (by key group, common/key_groups.h) and checks
// that the two new tasks together behave exactly like the old one: no key's
// state is lost or held twice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/json.h"
#include "worker/operators/dedup_operator.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/table_join_operators.h"
#include "worker/operators/window_join_operator.h"
#include "worker/operators/window_operator.h"
#include "worker/state/key_codec.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 60 * kMin;
constexpr int64_t kDay = 1790812800000;  // 2026-10-01T00:00:00Z

// The task of 2 an exchange sends `json` to when keyed by `key`.
int TaskOf(const std::string& json, const std::string& key) {
  JsonDecoder decoder;
  Record r;
  EXPECT_OK(decoder.Decode(json, &r));
  std::string scratch;
  return TaskOfKeyHash(ExchangeKeyHash(r, {FieldPath::Parse(key)}, &scratch),
                       kDefaultMaxParallelism, 2);
}

// Splits `old`'s state over two new operators made by `make`, opened in
// harnesses of their own (same operator name, so the same tables).
template <typename Op>
void Split(OperatorHarness& old, const std::vector<std::vector<FieldPath>>& keys,
           const std::function<std::unique_ptr<Op>()>& make, std::unique_ptr<Op> ops[2],
           std::unique_ptr<OperatorHarness> harnesses[2], int64_t watermark,
           bool key_groups = false) {
  ASSERT_OK(old.Commit());
  for (int i = 0; i < 2; ++i) {
    ops[i] = make();
    harnesses[i] = std::make_unique<OperatorHarness>(ops[i].get());
    KeyOwner owner;
    owner.keys = keys;
    owner.tasks = 2;
    owner.index = i;
    // As the runtime does for an operator fed by keyed exchanges.
    if (key_groups) harnesses[i]->context().set_key_groups(std::make_shared<KeyOwner>(owner));
    ASSERT_OK(ops[i]->AdoptState(old.context(), harnesses[i]->context(), owner));
    ASSERT_OK(harnesses[i]->Open());
    ASSERT_OK(harnesses[i]->AdvanceWatermark(watermark));
  }
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Every key of `table` in `h`'s state (the operator's own name prefix).
std::vector<std::string> TableKeys(OperatorHarness& h, const std::string& table) {
  std::vector<std::string> keys;
  auto t = h.context().OpenTable(table);
  EXPECT_OK(t.status());
  if (!t.ok()) return keys;
  EXPECT_OK((*t)->Scan("", "", [&](std::string_view k, std::string_view) {
    keys.emplace_back(k);
    return true;
  }));
  return keys;
}

// The key group a row key laid out by key group names at `offset` (-1: none).
int RowKeyGroup(const std::string& key, size_t offset) {
  std::string_view rest(key);
  rest.remove_prefix(std::min(offset, rest.size()));
  return ReadKeyGroupPrefix(&rest);
}

TEST(DedupRescaleTest, IdsGoToTheTaskTheirCopiesAreRoutedTo) {
  auto make = [] {
    return std::make_unique<DedupOperator>(FieldPath::Parse("event_id"), 24 * kHour,
                                           std::vector<FieldPath>{}, "");
  };
  auto old_op = make();
  OperatorHarness old(old_op.get());
  ASSERT_OK(old.Open());
  std::vector<std::pair<std::string, int64_t>> first;
  for (int i = 0; i < 200; ++i) {
    first.emplace_back(absl::StrCat(R"({"event_id":"e)", i, R"(","amount":)", i, "}"),
                       kDay + i * kMin);
  }
  // Numeric ids too: 7 and 7.0 are one id, routed alike.
  first.emplace_back(R"({"event_id":7,"amount":1})", kDay);
  ASSERT_OK(old.ProcessBatch(first));
  ASSERT_EQ(old.TakeOutput().size(), first.size());

  std::unique_ptr<DedupOperator> ops[2];
  std::unique_ptr<OperatorHarness> tasks[2];
  Split<DedupOperator>(old, {{FieldPath::Parse("event_id")}}, make, ops, tasks, kMinTime);
  // Every copy of an old id is a duplicate at the task it is routed to; a
  // changed payload is a conflict there (7.0 is id 7 with another payload
  // text); new ids pass.
  std::vector<std::pair<std::string, int64_t>> again = first;
  again.emplace_back(R"({"event_id":7.0,"amount":1})", kDay);
  again.emplace_back(R"({"event_id":"e3","amount":999})", kDay + 3 * kMin);
  again.emplace_back(R"({"event_id":"new","amount":1})", kDay);
  for (const auto& [json, t] : again) {
    ASSERT_OK(tasks[TaskOf(json, "event_id")]->ProcessJson(json, t));
  }
  std::vector<std::string> passed = tasks[0]->TakeOutput(), more = tasks[1]->TakeOutput();
  passed.insert(passed.end(), more.begin(), more.end());
  EXPECT_THAT(passed, ::testing::ElementsAre(::testing::HasSubstr(R"("new")")));
  EXPECT_EQ(tasks[0]->TakeSide("conflicts").size() + tasks[1]->TakeSide("conflicts").size(), 2u);
  // Each id went to exactly one task.
  EXPECT_EQ(tasks[0]->metrics().Value("dedup_duplicates_total", "op=\"op\"") +
                tasks[1]->metrics().Value("dedup_duplicates_total", "op=\"op\""),
            static_cast<int64_t>(first.size()));
}

// 2 -> 1: the runtime restores old task 0's part as it is and adopts task
// 1's onto it. Both numbered their blobs from 0 in the same buckets; the
// adopted ones take sequences the table does not hold, so no blob of the
// restored part is overwritten and every id of both stays known.
TEST(DedupRescaleTest, AdoptsOntoARestoredPartWithoutOverwritingItsBlobs) {
  auto make = [] {
    return std::make_unique<DedupOperator>(FieldPath::Parse("event_id"), 24 * kHour,
                                           std::vector<FieldPath>{}, "");
  };
  std::vector<std::pair<std::string, int64_t>> ids[2];
  for (int i = 0; i < 300; ++i) {
    std::string json = absl::StrCat(R"({"event_id":"e)", i, R"("})");
    ids[TaskOf(json, "event_id")].emplace_back(std::move(json), kDay + (i % 30) * kMin);
  }
  ASSERT_FALSE(ids[0].empty());
  ASSERT_FALSE(ids[1].empty());
  // New task 0 of 1 holds old task 0's part (built here as task 0 built it).
  auto op = make();
  OperatorHarness task(op.get());
  ASSERT_OK(task.Open());
  ASSERT_OK(task.ProcessBatch(ids[0]));
  ASSERT_EQ(task.TakeOutput().size(), ids[0].size());
  ASSERT_OK(task.Commit());
  const std::vector<std::string> restored = TableKeys(task, "ids");
  auto old_op = make();
  OperatorHarness old(old_op.get());
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(ids[1]));
  ASSERT_OK(old.Commit());
  ASSERT_THAT(TableKeys(old, "ids"), ::testing::ContainerEq(restored));  // the same blob keys
  KeyOwner owner;
  owner.keys = {{FieldPath::Parse("event_id")}};
  auto adopter = make();
  ASSERT_OK(adopter->AdoptState(old.context(), task.context(), owner));
  ASSERT_OK(task.Commit());
  EXPECT_EQ(TableKeys(task, "ids").size(), 2 * restored.size());
  // Opened on the merged table (as after the restore): every id of either
  // old task is a duplicate.
  ASSERT_OK(op->Open(task.context()));
  ASSERT_OK(task.ProcessBatch(ids[0]));
  ASSERT_OK(task.ProcessBatch(ids[1]));
  EXPECT_TRUE(task.TakeOutput().empty());
  EXPECT_EQ(task.metrics().Value("dedup_duplicates_total", "op=\"op\""),
            static_cast<int64_t>(ids[0].size() + ids[1].size()));
}

WindowSpec HourlyByCountry() {
  WindowSpec s;
  s.kind = WindowSpec::Kind::kTumbling;
  s.size = s.slide = kHour;
  s.allowed_lateness = kHour;
  s.group_by = {"country", "city"};
  s.group_paths = {FieldPath::Parse("country"), FieldPath::Parse("city")};
  AggregateSpec sum;
  sum.as = "revenue";
  sum.fn = AggFn::kSum;
  sum.field = "amount";
  sum.path = FieldPath::Parse("amount");
  s.aggregates = {sum};
  return s;
}

// The window operator split over two tasks, the old one and the new ones with
// or without key groups (its windows and finals laid out by key group or
// not; either is read).
class WindowRescaleTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(WindowRescaleTest, WindowsMoveWithTheirGroupAndKeepTheirRevisions) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  auto make = [] { return std::make_unique<WindowOperator>(HourlyByCountry()); };
  const char* countries[] = {"PT", "ES", "FR", "DE", "IT", "NL", "BE", "PL"};
  std::vector<std::pair<std::string, int64_t>> records;
  for (int i = 0; i < 64; ++i) {
    records.emplace_back(absl::StrCat(R"({"country":")", countries[i % 8], R"(","city":"c)", i % 3,
                                      R"(","amount":)", i, "}"),
                         kDay + (i % 2) * kHour + i * kMin % kHour);
  }
  // The reference: one task sees everything, the hour 0 windows fire, then
  // late records and the end.
  std::vector<std::pair<std::string, int64_t>> late;
  for (int i = 0; i < 16; ++i) {
    late.emplace_back(absl::StrCat(R"({"country":")", countries[i % 8], R"(","city":"c)", i % 3,
                                   R"(","amount":1000})"),
                      kDay + 10 * kMin);
  }
  auto ref_op = make();
  OperatorHarness ref(ref_op.get());
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(records));
  ASSERT_OK(ref.AdvanceWatermark(kDay + kHour));
  for (const auto& r : late) ASSERT_OK(ref.ProcessJson(r.first, r.second));
  ASSERT_OK(ref.AdvanceWatermark(kMaxTime));
  const std::vector<std::string> ref_out = ref.TakeOutput();

  // The same, split over two tasks (keyed by country) after the hour-0 windows fired.
  auto old_op = make();
  OperatorHarness old(old_op.get());
  KeyOwner one_task;
  one_task.keys = {{FieldPath::Parse("country")}};
  if (old_key_groups) old.context().set_key_groups(std::make_shared<KeyOwner>(one_task));
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(records));
  ASSERT_OK(old.AdvanceWatermark(kDay + kHour));
  std::vector<std::string> out = old.TakeOutput();
  std::unique_ptr<WindowOperator> ops[2];
  std::unique_ptr<OperatorHarness> tasks[2];
  Split<WindowOperator>(old, {{FieldPath::Parse("country")}}, make, ops, tasks, kDay + kHour,
                        new_key_groups);
  // Laid out by key group when either side had key groups (opened anew).
  for (auto& t : tasks) {
    ASSERT_OK(t->Commit());
    for (const std::string& k : TableKeys(*t, "windows")) {
      EXPECT_EQ(RowKeyGroup(k, 0) >= 0, old_key_groups || new_key_groups);
    }
  }
  for (const auto& r : late)
    ASSERT_OK(tasks[TaskOf(r.first, "country")]->ProcessJson(r.first, r.second));
  for (auto& t : tasks) {
    ASSERT_OK(t->AdvanceWatermark(kMaxTime));
    for (std::string& s : t->TakeOutput()) out.push_back(std::move(s));
  }
  EXPECT_FALSE(tasks[0]->TakeOutput().size() + tasks[1]->TakeOutput().size());
  // Same records (revisions included: the counters moved with the windows),
  // in another order.
  EXPECT_EQ(Sorted(out), Sorted(ref_out));
  EXPECT_GT(ref_out.size(), records.size() / 8);
}

TEST_P(WindowRescaleTest, WindowFinalsMoveSoTooLateRecordsStillNameTheFinalRevision) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  auto make = [] { return std::make_unique<WindowOperator>(HourlyByCountry()); };
  const char* countries[] = {"PT", "ES", "FR", "DE", "IT", "NL", "BE", "PL"};
  std::vector<std::pair<std::string, int64_t>> records, too_late;
  for (int i = 0; i < 32; ++i) {
    records.emplace_back(absl::StrCat(R"({"country":")", countries[i % 8], R"(","city":"c)", i % 3,
                                      R"(","amount":)", i, "}"),
                         kDay + i * kMin);
  }
  // After hour 0's windows are FINAL (end + lateness), one record per group
  // is too late for them.
  for (int i = 0; i < 24; ++i) {
    too_late.emplace_back(absl::StrCat(R"({"country":")", countries[i % 8], R"(","city":"c)", i % 3,
                                       R"(","amount":5})"),
                          kDay + 30 * kMin);
  }
  auto ref_op = make();
  OperatorHarness ref(ref_op.get());
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(records));
  ASSERT_OK(ref.AdvanceWatermark(kDay + 2 * kHour));
  for (const auto& r : too_late) ASSERT_OK(ref.ProcessJson(r.first, r.second));
  const std::vector<std::string> ref_side = ref.TakeSide("too_late");
  ASSERT_EQ(ref_side.size(), too_late.size());
  for (const std::string& s : ref_side) EXPECT_THAT(s, ::testing::HasSubstr(R"("revision":)"));
  EXPECT_THAT(ref_side,
              ::testing::Each(::testing::Not(::testing::HasSubstr(R"("revision":null)"))));

  auto old_op = make();
  OperatorHarness old(old_op.get());
  KeyOwner one_task;
  one_task.keys = {{FieldPath::Parse("country")}};
  if (old_key_groups) old.context().set_key_groups(std::make_shared<KeyOwner>(one_task));
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(records));
  ASSERT_OK(old.AdvanceWatermark(kDay + 2 * kHour));
  std::unique_ptr<WindowOperator> ops[2];
  std::unique_ptr<OperatorHarness> tasks[2];
  ASSERT_OK(old.Commit());
  for (const std::string& k : TableKeys(old, "finals")) {
    EXPECT_EQ(RowKeyGroup(k, 8) >= 0, old_key_groups);
  }
  Split<WindowOperator>(old, {{FieldPath::Parse("country")}}, make, ops, tasks, kDay + 2 * kHour,
                        new_key_groups);
  for (const auto& r : too_late) {
    ASSERT_OK(tasks[TaskOf(r.first, "country")]->ProcessJson(r.first, r.second));
  }
  std::vector<std::string> side = tasks[0]->TakeSide("too_late"),
                           more = tasks[1]->TakeSide("too_late");
  EXPECT_FALSE(side.empty());
  EXPECT_FALSE(more.empty());
  side.insert(side.end(), more.begin(), more.end());
  EXPECT_EQ(Sorted(side), Sorted(ref_side));
}

// A join split over two tasks, its old task and its new ones with or
// without key groups (OperatorContext::key_groups): with them its rows are
// laid out by key group (the prefix at `key_offset` of a row key: after the
// window start for the window join) and a new task copies its range as it
// is; rows stored without them (an old checkpoint) are read by their
// record's key and laid out anew when a task with key groups opens them.
// `prefix`: the key part before the key group of a row in the first window.
template <typename Op>
void JoinRowsMoveWithTheirKey(const std::function<std::unique_ptr<Op>()>& make, size_t key_offset,
                              const std::string& prefix, bool old_key_groups, bool new_key_groups,
                              size_t expected_results) {
  std::vector<std::pair<std::string, int64_t>> left, right;
  for (int i = 0; i < 50; ++i) {
    left.emplace_back(absl::StrCat(R"({"id":"l)", i, R"(","k":)", i % 20, "}"), kDay + i * kMin);
    if (i % 3 == 0) {
      right.emplace_back(absl::StrCat(R"({"id":"r)", i, R"(","k":)", i % 20, "}"),
                         kDay + i * kMin + 5 * kMin);
    }
  }
  left.emplace_back(R"({"id":"lnull","k":null})", kDay);  // a null key: only padded

  auto ref_op = make();
  OperatorHarness ref(ref_op.get());
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(left, 0));
  ASSERT_OK(ref.ProcessBatch(right, 1));
  ASSERT_OK(ref.AdvanceWatermark(kMaxTime));
  const std::vector<std::string> ref_out = ref.TakeOutput();

  const std::vector<std::vector<FieldPath>> keys = {{FieldPath::Parse("k")},
                                                    {FieldPath::Parse("k")}};
  auto old_op = make();
  OperatorHarness old(old_op.get());
  KeyOwner one_task;
  one_task.keys = keys;
  if (old_key_groups) old.context().set_key_groups(std::make_shared<KeyOwner>(one_task));
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(left, 0));
  ASSERT_TRUE(old.TakeOutput().empty());
  ASSERT_OK(old.Commit());
  const std::vector<std::string> old_keys = TableKeys(old, "left");
  ASSERT_EQ(old_keys.size(), left.size());
  for (const std::string& k : old_keys) EXPECT_EQ(RowKeyGroup(k, key_offset) >= 0, old_key_groups);
  std::unique_ptr<Op> ops[2];
  std::unique_ptr<OperatorHarness> tasks[2];
  Split<Op>(old, keys, make, ops, tasks, kMinTime, new_key_groups);
  size_t moved = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(tasks[i]->Commit());
    const std::vector<std::string> task_keys = TableKeys(*tasks[i], "left");
    moved += task_keys.size();
    for (const std::string& k : task_keys) {
      const int g = RowKeyGroup(k, key_offset);
      // Laid out anew on open; a task without key groups keeps what it got.
      EXPECT_EQ(g >= 0, new_key_groups || old_key_groups);
      if (g >= 0) {
        EXPECT_EQ(TaskOfKeyGroup(kDefaultMaxParallelism, 2, g), i);
      }
    }
  }
  EXPECT_EQ(moved, left.size());  // no row lost or held twice
  for (const auto& r : right) {
    ASSERT_OK(tasks[TaskOf(r.first, "k")]->ProcessJson(r.first, r.second, 1));
  }
  std::vector<std::string> out;
  for (auto& t : tasks) {
    ASSERT_OK(t->AdvanceWatermark(kMaxTime));
    for (std::string& s : t->TakeOutput()) out.push_back(std::move(s));
  }
  EXPECT_EQ(Sorted(out), Sorted(ref_out));
  EXPECT_EQ(ref_out.size(), expected_results);

  if (old_key_groups) {
    // Rows of key groups another task owns are not read at all: a row
    // nobody could decode, in the last key group, does not bother task 0.
    auto table = old.context().OpenTable("left");
    ASSERT_OK(table.status());
    (*table)->Put(prefix + std::string("\x02\x00\x7f\x01zz", 6) + std::string(16, '\0'),
                  "-{not json");
    ASSERT_OK(old.Commit());
    auto op = make();
    OperatorHarness task0(op.get());
    KeyOwner owner;
    owner.keys = keys;
    owner.tasks = 2;
    owner.index = 0;
    EXPECT_OK(op->AdoptState(old.context(), task0.context(), owner));
    owner.index = 1;
    OperatorHarness task1(op.get());
    ASSERT_OK(op->AdoptState(old.context(), task1.context(), owner));
    EXPECT_EQ(task1.Open().code(), absl::StatusCode::kDataLoss);  // copied as it is, then read
  }
}

// The join key `k` on both sides.
JoinKeySpec KeyK() {
  JoinKeySpec k;
  k.left = k.right = "k";
  k.left_path = k.right_path = FieldPath::Parse("k");
  return k;
}

class JoinRescaleTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(JoinRescaleTest, IntervalJoinRowsMoveWithTheirKey) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  IntervalJoinSpec spec;
  spec.left = "l";
  spec.right = "r";
  spec.on = {KeyK()};
  spec.lower = 0;
  spec.upper = kHour;
  spec.type = JoinType::kLeft;
  std::function<std::unique_ptr<IntervalJoinOperator>()> make = [&] {
    auto op = IntervalJoinOperator::Create(spec);
    EXPECT_OK(op.status());
    return std::move(op).value();
  };
  // 17 matches + 34 unmatched left rows (one with a null key).
  JoinRowsMoveWithTheirKey(make, 0, "", old_key_groups, new_key_groups, 51);
}

TEST_P(JoinRescaleTest, WindowJoinRowsMoveWithTheirKey) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  WindowJoinSpec spec;
  spec.left = "l";
  spec.right = "r";
  spec.on = {KeyK()};
  spec.size = spec.slide = kHour;
  spec.type = JoinType::kLeft;
  std::function<std::unique_ptr<WindowJoinOperator>()> make = [&] {
    return std::make_unique<WindowJoinOperator>(spec);
  };
  // Keys 0..19 in one hour: 17 pairs + left rows of keys without a right one.
  JoinRowsMoveWithTheirKey(make, 8, EncodeBigEndian64(kDay), old_key_groups, new_key_groups, 51);
}

// "ByKeyGroupToUnprefixed": the old task's layout, then the new tasks'.
TableJoinSpec TemporalOnK() {
  TableJoinSpec s;
  s.stream = "voyages";
  s.table = "ships";
  JoinKeySpec k;
  k.left = k.right = "k";
  k.left_path = k.right_path = FieldPath::Parse("k");
  s.on = {k};
  s.type = JoinType::kLeft;
  return s;
}

// A temporal join split over two tasks, its old task and the new ones with
// or without key groups: versions and waiting stream records move with
// their key, laid out for the new task; records after the split join them
// there, and the two tasks give what one would have.
class TemporalJoinRescaleTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(TemporalJoinRescaleTest, VersionsAndWaitingRecordsMoveWithTheirKey) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  auto make = [] { return std::make_unique<TemporalJoinOperator>(TemporalOnK(), "ships"); };
  std::vector<std::pair<std::string, int64_t>> versions, stream, later_versions, later_stream;
  for (int i = 0; i < 20; ++i) {
    versions.emplace_back(absl::StrCat(R"({"k":)", i, R"(,"v":"a)", i, R"("})"), 10);
    later_versions.emplace_back(absl::StrCat(R"({"k":)", i, R"(,"v":"b)", i, R"("})"), 30);
  }
  for (int i = 0; i < 40; ++i) {
    stream.emplace_back(absl::StrCat(R"({"k":)", i % 25, R"(,"n":)", i, "}"), 5 + i);
    later_stream.emplace_back(absl::StrCat(R"({"k":)", i % 25, R"(,"n":)", 100 + i, "}"), 20 + i);
  }
  stream.emplace_back(R"({"k":null,"n":-1})", 12);  // never matches: padded
  auto ref_op = make();
  OperatorHarness ref(ref_op.get());
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(versions, 1));
  ASSERT_OK(ref.ProcessBatch(stream, 0));
  ASSERT_OK(ref.ProcessBatch(later_versions, 1));
  ASSERT_OK(ref.ProcessBatch(later_stream, 0));
  ASSERT_OK(ref.AdvanceWatermark(kMaxTime));
  const std::vector<std::string> want = ref.TakeOutput();
  ASSERT_EQ(want.size(), stream.size() + later_stream.size());

  const std::vector<std::vector<FieldPath>> keys = {{FieldPath::Parse("k")},
                                                    {FieldPath::Parse("k")}};
  auto old_op = make();
  OperatorHarness old(old_op.get());
  KeyOwner one_task;
  one_task.keys = keys;
  if (old_key_groups) old.context().set_key_groups(std::make_shared<KeyOwner>(one_task));
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(versions, 1));
  ASSERT_OK(old.ProcessBatch(stream, 0));
  ASSERT_TRUE(old.TakeOutput().empty());
  std::unique_ptr<TemporalJoinOperator> ops[2];
  std::unique_ptr<OperatorHarness> tasks[2];
  Split<TemporalJoinOperator>(old, keys, make, ops, tasks, kMinTime, new_key_groups);
  size_t pending = 0;
  for (int i = 0; i < 2; ++i) {
    pending += ops[i]->pending_count();
    ASSERT_OK(tasks[i]->Commit());
    for (const char* table : {"versions", "pending"}) {
      for (const std::string& k : TableKeys(*tasks[i], table)) {
        const int g = RowKeyGroup(k, 0);
        EXPECT_EQ(g >= 0, new_key_groups) << table;
        if (g >= 0) {
          EXPECT_EQ(TaskOfKeyGroup(kDefaultMaxParallelism, 2, g), i) << table;
        }
      }
    }
  }
  EXPECT_EQ(pending, stream.size());  // none lost or held twice
  for (const auto& [json, t] : later_versions) {
    ASSERT_OK(tasks[TaskOf(json, "k")]->ProcessJson(json, t, 1));
  }
  for (const auto& [json, t] : later_stream) {
    ASSERT_OK(tasks[TaskOf(json, "k")]->ProcessJson(json, t, 0));
  }
  std::vector<std::string> got;
  for (auto& t : tasks) {
    ASSERT_OK(t->AdvanceWatermark(kMaxTime));
    for (std::string& line : t->TakeOutput()) got.push_back(std::move(line));
  }
  EXPECT_EQ(Sorted(got), Sorted(want));
}

// 2 -> 1: the new task holds old task 0's rows as they are (laid out by key
// group) and adopts task 1's onto them; both numbered their waiting records
// from 0 at the same times. Opened without key groups (one task), every
// record is kept under a key of its own and joins.
TEST(TemporalJoinRescaleTest, WaitingRecordsOfTwoOldTasksAtOneTimeAllStay) {
  auto make = [] { return std::make_unique<TemporalJoinOperator>(TemporalOnK(), "ships"); };
  const std::vector<std::vector<FieldPath>> keys = {{FieldPath::Parse("k")},
                                                    {FieldPath::Parse("k")}};
  std::vector<std::pair<std::string, int64_t>> stream[2];
  for (int i = 0; i < 30; ++i) {
    std::string json = absl::StrCat(R"({"k":)", i, "}");
    const int task = TaskOf(json, "k");
    stream[task].emplace_back(std::move(json), 100 + static_cast<int64_t>(stream[task].size()));
  }
  ASSERT_FALSE(stream[0].empty());
  ASSERT_FALSE(stream[1].empty());
  KeyOwner owners[2];
  for (int i = 0; i < 2; ++i) {
    owners[i].keys = keys;
    owners[i].tasks = 2;
    owners[i].index = i;
  }
  auto op = make();
  OperatorHarness task(op.get());
  task.context().set_key_groups(std::make_shared<KeyOwner>(owners[0]));
  ASSERT_OK(task.Open());
  ASSERT_OK(task.ProcessBatch(stream[0], 0));
  auto old_op = make();
  OperatorHarness old(old_op.get());
  old.context().set_key_groups(std::make_shared<KeyOwner>(owners[1]));
  ASSERT_OK(old.Open());
  ASSERT_OK(old.ProcessBatch(stream[1], 0));
  ASSERT_OK(old.Commit());
  ASSERT_OK(task.Commit());
  KeyOwner one;
  one.keys = keys;
  task.context().set_key_groups(nullptr);
  auto adopter = make();
  ASSERT_OK(adopter->AdoptState(old.context(), task.context(), one));
  ASSERT_OK(op->Open(task.context()));
  EXPECT_EQ(op->pending_count(), stream[0].size() + stream[1].size());
  ASSERT_OK(task.Commit());
  EXPECT_EQ(TableKeys(task, "pending").size(), stream[0].size() + stream[1].size());
  ASSERT_OK(task.AdvanceWatermark(kMaxTime));
  EXPECT_EQ(task.TakeOutput().size(), stream[0].size() + stream[1].size());
}

std::string LayoutsName(const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
  return absl::StrCat(std::get<0>(info.param) ? "ByKeyGroup" : "Unprefixed", "To",
                      std::get<1>(info.param) ? "ByKeyGroup" : "Unprefixed");
}

INSTANTIATE_TEST_SUITE_P(KeyGroups, TemporalJoinRescaleTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()), LayoutsName);

INSTANTIATE_TEST_SUITE_P(KeyGroups, WindowRescaleTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()), LayoutsName);

INSTANTIATE_TEST_SUITE_P(KeyGroups, JoinRescaleTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()), LayoutsName);

// An operator with state and no rescale rule (no AdoptState of its own):
// the default refuses, so the rescale fails in Open() naming the operator
// and its table instead of starting without the state.
class CounterWithoutRescaleRule : public Operator {
 public:
  explicit CounterWithoutRescaleRule(bool stateful) : stateful_(stateful) {}
  absl::Status Open(OperatorContext& ctx) override {
    if (stateful_) {
      ASSIGN_OR_RETURN(table_, ctx.OpenTable("counts"));
    }
    return absl::OkStatus();
  }
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override {
    if (table_ != nullptr) table_->Put("n", std::to_string(batch.size()));
    return absl::OkStatus();
  }

 private:
  bool stateful_;
  StateTable* table_ = nullptr;
};

TEST(RescaleTest, AStatefulOperatorWithoutARescaleRuleFailsTheRescale) {
  for (bool stateful : {true, false}) {
    CounterWithoutRescaleRule old_op(stateful);
    OperatorHarness old(&old_op, nullptr, "counter");
    ASSERT_OK(old.Open());
    ASSERT_OK(old.ProcessJson(R"({"k":1})", kDay));
    ASSERT_OK(old.Commit());
    CounterWithoutRescaleRule op(stateful);
    OperatorHarness task(&op, nullptr, "counter");
    KeyOwner owner;
    owner.tasks = 2;
    ASSERT_OK(op.AdoptState(old.context(), task.context(), owner));
    const absl::Status opened = task.Open();
    if (stateful) {
      EXPECT_EQ(opened.code(), absl::StatusCode::kFailedPrecondition) << opened;
      EXPECT_THAT(std::string(opened.message()),
                  ::testing::HasSubstr("operator counter keeps state (table counts) but has no "
                                       "rescale rule"));
    } else {
      EXPECT_OK(opened);  // an operator without state needs no rule
    }
  }
}

}  // namespace
}  // namespace caravela
