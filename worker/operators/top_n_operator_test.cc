// top_n (top_n_operator.cc): spec errors through the job parser, and the
// operator through its kind's factory in the operator harness: ranking,
// revisions (EARLY / ON_TIME / LATE / FINAL), too_late, snapshot and
// restore, rescaling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/json.h"
#include "worker/operators/operator.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/state/key_codec.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 60 * kMin;
constexpr int64_t kT0 = 1790848800000;  // 2026-10-01T10:00:00Z

std::string Job(const std::string& top_n) {
  return absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: t}
spec:
  sources:
    - name: bids
      file: {path: bids.jsonl}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: top
      top_n: )",
                      top_n, "\n");
}

std::vector<std::string> Errors(const std::string& top_n) {
  std::vector<std::string> out;
  for (const SpecError& e : ParseJobSpec(Job(top_n)).errors) out.push_back(e.ToString());
  return out;
}

// The operator of a valid top_n spec, made by its kind.
std::unique_ptr<Operator> Make(const std::string& top_n) {
  ParseResult r = ParseJobSpec(Job(top_n));
  EXPECT_TRUE(r.ok()) << r.errors[0].ToString();
  if (!r.ok()) return nullptr;
  const OperatorSpec& op = r.spec.operators[0];
  auto made = op.kind->Create(op, OperatorBuildContext{});
  EXPECT_OK(made.status());
  return made.ok() ? std::move(*made) : nullptr;
}

std::string Bid(const std::string& item, const std::string& cat, int price) {
  return absl::StrCat(R"({"item":")", item, R"(","cat":")", cat, R"(","price":)", price, "}");
}

TEST(TopNSpecTest, ParsesAndPlansAsItsKindSays) {
  ParseResult r = ParseJobSpec(
      Job("{from: bids, n: 3, by: price, group_by: [cat], tumbling: 1h, allowed_lateness: 5m, "
          "keep: [item, price]}"));
  ASSERT_TRUE(r.ok()) << r.errors[0].ToString();
  const OperatorSpec& op = r.spec.operators[0];
  EXPECT_EQ(op.kind_name(), "top_n");
  EXPECT_THAT(op.Inputs(), ElementsAre("bids"));
  EXPECT_THAT(op.SideOutputs(), ElementsAre("too_late"));
  // Keyed by group_by: behind an exchange keyed by cat.
  auto plan = PlanJob(r.spec, 2);
  ASSERT_OK(plan.status());
  ASSERT_EQ(plan->exchanges.size(), 1u);
  EXPECT_THAT(plan->exchanges[0].inputs[0].key_names, ElementsAre("cat"));
  // Without group_by: one ranking, one task.
  ParseResult global = ParseJobSpec(Job("{from: bids, n: 1, by: price}"));
  ASSERT_TRUE(global.ok()) << global.errors[0].ToString();
  auto gplan = PlanJob(global.spec, 4);
  ASSERT_OK(gplan.status());
  EXPECT_EQ(gplan->stages.back().tasks, 1);
}

TEST(TopNSpecTest, ErrorsNameTheirField) {
  EXPECT_THAT(Errors("{from: bids, by: price}"),
              ElementsAre("spec.operators[0].top_n.n: required field is missing"));
  EXPECT_THAT(Errors("{from: bids, n: 0, by: price}"),
              ElementsAre("spec.operators[0].top_n.n: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(Errors("{from: bids, n: 1001, by: price}"),
              ElementsAre("spec.operators[0].top_n.n: expected at most 1000 rows, got 1001"));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: 'price +'}"),
              ElementsAre(HasSubstr("spec.operators[0].top_n.by: unexpected end of expression")));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: price, order: up}"),
              ElementsAre("spec.operators[0].top_n.order: expected one of desc, asc, got \"up\""));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: price, allowed_lateness: 1m}"),
              ElementsAre(HasSubstr("spec.operators[0].top_n.allowed_lateness: allowed_lateness "
                                    "needs a window")));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: price, keep: [rank]}"),
              ElementsAre(HasSubstr("spec.operators[0].top_n.keep: \"rank\" is the output's")));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: price, tumbling: 1h, hopping: {size: 1h, slide: 1m}}"),
              ElementsAre("spec.operators[0].top_n: expected exactly one of tumbling, hopping, "
                          "got tumbling and hopping"));
  EXPECT_THAT(Errors("{from: bids, n: 1, by: price, grup_by: [cat]}"),
              ElementsAre("spec.operators[0].top_n.grup_by: unknown field \"grup_by\" (did you "
                          "mean \"group_by\"?)"));
  EXPECT_THAT(Errors("{from: nope, n: 1, by: price}"),
              ElementsAre("spec.operators[0].top_n.from: unknown node \"nope\" (known: bids)"));
}

TEST(TopNTest, TumblingWindowsRankPerGroupWithRevisions) {
  auto op = Make(
      "{from: bids, n: 2, by: price, group_by: [cat], tumbling: 1h, allowed_lateness: 30m, keep: "
      "[item, price]}");
  ASSERT_NE(op, nullptr);
  OperatorHarness h(op.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{Bid("a", "x", 5), kT0 + 1 * kMin},
                            {Bid("b", "x", 9), kT0 + 2 * kMin},
                            {Bid("c", "x", 7), kT0 + 3 * kMin},
                            {Bid("d", "y", 1), kT0 + 4 * kMin},
                            {Bid("e", "x", 7), kT0 + 5 * kMin}}));  // ties c: c stays 2nd
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(kT0 + kHour));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          R"({"window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","cat":"x","top":[{"rank":1,"item":"b","price":9},{"rank":2,"item":"c","price":7}],"revision":1,"state":"ON_TIME"})",
          R"({"window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","cat":"y","top":[{"rank":1,"item":"d","price":1}],"revision":1,"state":"ON_TIME"})"));
  // Within the lateness: a row that enters is a LATE correction; one that
  // does not changes nothing.
  ASSERT_OK(h.ProcessBatch({{Bid("f", "x", 8), kT0 + 10 * kMin}}));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(HasSubstr(
          R"("top":[{"rank":1,"item":"b","price":9},{"rank":2,"item":"f","price":8}],"revision":2,"state":"LATE")")));
  ASSERT_OK(h.ProcessBatch({{Bid("g", "x", 2), kT0 + 11 * kMin}}));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(kT0 + kHour + 30 * kMin));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          HasSubstr(
              R"("cat":"x","top":[{"rank":1,"item":"b","price":9},{"rank":2,"item":"f","price":8}],"revision":3,"state":"FINAL")"),
          HasSubstr(
              R"("cat":"y","top":[{"rank":1,"item":"d","price":1}],"revision":2,"state":"FINAL")")));
  // After FINAL: too_late, nothing else.
  ASSERT_OK(h.ProcessBatch({{Bid("h", "x", 99), kT0 + 12 * kMin}}));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  EXPECT_THAT(h.TakeSide("too_late"), ElementsAre(AllOf(HasSubstr(R"("reason":"after_final")"),
                                                        HasSubstr(R"("item":"h")"))));
  EXPECT_EQ(h.metrics().Get("too_late_total", R"(op="top",reason="after_final")")->value(), 1);
}

TEST(TopNTest, AscendingOrderNullsLastAndAFirstLateWindowStartsLate) {
  auto op = Make("{from: bids, n: 3, by: price, order: asc, tumbling: 1h, allowed_lateness: 1h}");
  ASSERT_NE(op, nullptr);
  OperatorHarness h(op.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(
      h.ProcessBatch({{R"({"item":"n"})", kT0}, {Bid("a", "x", 5), kT0}, {Bid("b", "x", 3), kT0}}));
  ASSERT_OK(h.AdvanceWatermark(kT0 + kHour));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(HasSubstr(
          R"("top":[{"rank":1,"item":"b","cat":"x","price":3},{"rank":2,"item":"a","cat":"x","price":5},{"rank":3,"item":"n"}],"revision":1,"state":"ON_TIME")")));
  // [11:00, 12:00) gets its first record when the watermark has passed
  // 12:00 (within the lateness): its first revision is LATE, at once.
  ASSERT_OK(h.AdvanceWatermark(kT0 + 2 * kHour + 10 * kMin));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr(R"("state":"FINAL")")));
  ASSERT_OK(h.ProcessBatch({{Bid("c", "x", 1), kT0 + kHour + kMin}}));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(AllOf(HasSubstr(R"("window_start":"2026-10-01T11:00:00.000Z")"),
                                HasSubstr(R"("revision":1,"state":"LATE")"))));
  ASSERT_OK(h.AdvanceWatermark(kT0 + 3 * kHour));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr(R"("revision":2,"state":"FINAL")")));
}

// allowed_lateness 0: ON_TIME and FINAL at once, as for windows.
TEST(TopNTest, WithoutLatenessOnTimeIsFollowedByFinal) {
  auto op = Make("{from: bids, n: 1, by: price, tumbling: 1h}");
  ASSERT_NE(op, nullptr);
  OperatorHarness h(op.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessJson(Bid("a", "x", 5), kT0));
  ASSERT_OK(h.AdvanceWatermark(kT0 + kHour));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr(R"("revision":1,"state":"ON_TIME")"),
                                          HasSubstr(R"("revision":2,"state":"FINAL")")));
}

TEST(TopNTest, HoppingWindowsRankEachWindow) {
  auto op = Make("{from: bids, n: 1, by: price, hopping: {size: 1h, slide: 30m}}");
  ASSERT_NE(op, nullptr);
  OperatorHarness h(op.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{Bid("a", "x", 5), kT0 + 10 * kMin},     // [9:30,10:30) [10:00,11:00)
                            {Bid("b", "x", 7), kT0 + 40 * kMin}}));  // [10:00,11:00) [10:30,11:30)
  ASSERT_OK(h.AdvanceWatermark(kT0 + 2 * kHour));
  std::vector<std::string> out = h.TakeOutput();
  ASSERT_EQ(out.size(), 6u);  // three windows, ON_TIME and FINAL each
  EXPECT_THAT(
      out[0],
      HasSubstr(
          R"("window_start":"2026-10-01T09:30:00.000Z","window_end":"2026-10-01T10:30:00.000Z","top":[{"rank":1,"item":"a")"));
  EXPECT_THAT(
      out[2],
      HasSubstr(
          R"("window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","top":[{"rank":1,"item":"b")"));
  EXPECT_THAT(
      out[4],
      HasSubstr(
          R"("window_start":"2026-10-01T10:30:00.000Z","window_end":"2026-10-01T11:30:00.000Z","top":[{"rank":1,"item":"b")"));
}

TEST(TopNTest, WithoutAWindowEarlyRevisionsUntilTheInputEnds) {
  auto op = Make("{from: bids, n: 2, by: price, group_by: [cat], keep: [item]}");
  ASSERT_NE(op, nullptr);
  OperatorHarness h(op.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch({{Bid("a", "x", 5), kT0}, {Bid("b", "x", 9), kT0 + kMin}}));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.AdvanceWatermark(kT0 + kMin));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          R"({"cat":"x","top":[{"rank":1,"item":"b"},{"rank":2,"item":"a"}],"revision":1,"state":"EARLY"})"));
  // Unchanged ranking: nothing at the next watermark.
  ASSERT_OK(h.ProcessBatch({{Bid("c", "x", 1), kT0 + 2 * kMin}}));
  ASSERT_OK(h.AdvanceWatermark(kT0 + 2 * kMin));
  EXPECT_THAT(h.TakeOutput(), IsEmpty());
  ASSERT_OK(h.ProcessBatch({{Bid("d", "x", 6), kT0 + 3 * kMin}}));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          R"({"cat":"x","top":[{"rank":1,"item":"b"},{"rank":2,"item":"d"}],"revision":2,"state":"ON_TIME"})",
          R"({"cat":"x","top":[{"rank":1,"item":"b"},{"rank":2,"item":"d"}],"revision":3,"state":"FINAL"})"));
}

// A snapshot mid-window restores into a fresh operator that then ends with
// exactly the revisions the uninterrupted one publishes.
TEST(TopNTest, SnapshotAndRestoreKeepRankingsAndRevisions) {
  const std::string spec =
      "{from: bids, n: 2, by: price, group_by: [cat], tumbling: 1h, "
      "allowed_lateness: 30m, keep: [item]}";
  const std::vector<std::pair<std::string, int64_t>> before = {
      {Bid("a", "x", 5), kT0}, {Bid("b", "x", 9), kT0 + kMin}, {Bid("c", "y", 2), kT0 + 2 * kMin}};
  const std::vector<std::pair<std::string, int64_t>> after = {{Bid("d", "x", 7), kT0 + 3 * kMin},
                                                              {Bid("e", "y", 4), kT0 + 4 * kMin}};
  auto whole = Make(spec);
  OperatorHarness ref(whole.get(), nullptr, "top");
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(before));
  ASSERT_OK(ref.AdvanceWatermark(kT0 + kHour));  // ON_TIME
  ASSERT_OK(ref.ProcessBatch(after));            // LATE
  ASSERT_OK(ref.AdvanceWatermark(kMaxTime));     // FINAL
  const std::vector<std::string> want = ref.TakeOutput();
  ASSERT_EQ(want.size(), 6u);

  const std::string dir = ::testing::TempDir() + "/top_n_snapshot";
  RemoveTree(dir);
  auto first = Make(spec);
  OperatorHarness h(first.get(), nullptr, "top");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch(before));
  ASSERT_OK(h.AdvanceWatermark(kT0 + kHour));
  std::vector<std::string> got = h.TakeOutput();
  ASSERT_OK(h.Snapshot(dir));
  auto second = Make(spec);
  ASSERT_OK(h.RestoreInto(second.get(), dir, kT0 + kHour));
  ASSERT_OK(h.ProcessBatch(after));
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  for (std::string& line : h.TakeOutput()) got.push_back(line);
  EXPECT_EQ(got, want);
  RemoveTree(dir);
}

// Rescaling 1 -> 2 tasks, the old task and the new ones with or without key
// groups (entries keyed by key group or not): each group's rankings go to
// the task its records are routed to, and records after the split update
// them there; together the two tasks publish what the one would have.
class TopNRescaleTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(TopNRescaleTest, RescaleMovesEachGroupToItsTask) {
  const auto [old_key_groups, new_key_groups] = GetParam();
  const std::string spec =
      "{from: bids, n: 1, by: price, group_by: [cat], tumbling: 1h, keep: [item]}";
  std::vector<std::pair<std::string, int64_t>> records, after;
  for (int i = 0; i < 20; ++i) {
    records.push_back({Bid(absl::StrCat("i", i), absl::StrCat("c", i % 7), i), kT0 + i * kMin});
    // Better bids for the same windows, after the split.
    after.push_back({Bid(absl::StrCat("j", i), absl::StrCat("c", i % 7), 100 + i), kT0 + i * kMin});
  }
  auto whole = Make(spec);
  OperatorHarness ref(whole.get(), nullptr, "top");
  ASSERT_OK(ref.Open());
  ASSERT_OK(ref.ProcessBatch(records));
  ASSERT_OK(ref.ProcessBatch(after));
  ASSERT_OK(ref.AdvanceWatermark(kMaxTime));
  std::vector<std::string> want = ref.TakeOutput();

  KeyOwner one_task;
  one_task.keys = {{FieldPath::Parse("cat")}};
  auto old = Make(spec);
  OperatorHarness h(old.get(), nullptr, "top");
  if (old_key_groups) h.context().set_key_groups(std::make_shared<KeyOwner>(one_task));
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch(records));
  ASSERT_OK(h.Commit());
  std::vector<std::string> got;
  for (int i = 0; i < 2; ++i) {
    auto op = Make(spec);
    OperatorHarness part(op.get(), nullptr, "top");
    KeyOwner owner = one_task;
    owner.tasks = 2;
    owner.index = i;
    if (new_key_groups) part.context().set_key_groups(std::make_shared<KeyOwner>(owner));
    ASSERT_OK(op->AdoptState(h.context(), part.context(), owner));
    ASSERT_OK(part.Open());
    ASSERT_OK(part.Commit());
    // Laid out for this task: with key groups, only its own.
    auto table = part.context().OpenTable("tops");
    ASSERT_OK(table.status());
    size_t entries = 0;
    ASSERT_OK((*table)->Scan("", "", [&](std::string_view k, std::string_view) {
      ++entries;
      const int g = ReadKeyGroupPrefix(&k);
      EXPECT_EQ(g >= 0, new_key_groups);
      if (g >= 0) {
        EXPECT_EQ(TaskOfKeyGroup(kDefaultMaxParallelism, 2, g), i);
      }
      return true;
    }));
    EXPECT_GT(entries, 0u) << "task " << i << " got no group";
    std::string scratch;
    for (const auto& r : after) {
      Record rec;
      JsonDecoder decoder;
      ASSERT_OK(decoder.Decode(r.first, &rec));
      if (owner.Owns(rec, 0, &scratch)) ASSERT_OK(part.ProcessJson(r.first, r.second));
    }
    ASSERT_OK(part.AdvanceWatermark(kMaxTime));
    for (std::string& line : part.TakeOutput()) got.push_back(line);
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(KeyGroups, TopNRescaleTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) ? "ByKeyGroup" : "Unprefixed", "To",
                               std::get<1>(info.param) ? "ByKeyGroup" : "Unprefixed");
                         });

}  // namespace
}  // namespace caravela
