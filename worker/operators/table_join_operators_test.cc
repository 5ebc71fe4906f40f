#include "worker/operators/table_join_operators.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TableJoinSpec Spec(JoinType type, const std::string& stream_field, const std::string& table_field) {
  TableJoinSpec s;
  s.stream = "voyages";
  s.table = "navio_info";
  JoinKeySpec k;
  k.left = stream_field;
  k.right = table_field;
  k.left_path = FieldPath::Parse(stream_field);
  k.right_path = FieldPath::Parse(table_field);
  s.on = {k};
  s.type = type;
  return s;
}

TEST(LookupJoinTest, EnrichesWithLatestRowAndKeepsUnmatchedForLeftJoin) {
  LookupJoinOperator op(Spec(JoinType::kLeft, "navio", "nome"), "navio_info");
  OperatorHarness h(&op, nullptr, "normalize");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch(
      {{R"({"nome":"S. Gabriel","navio_id":1})", 0}, {R"({"nome":"Berrio","navio_id":3})", 0}},
      /*input=*/1));
  ASSERT_OK(h.ProcessBatch({{R"({"voyage":"india","navio":"S. Gabriel"})", 100},
                            {R"({"voyage":"india","navio":"Sao Rafael"})", 101},
                            {R"({"voyage":"india"})", 102}}));
  EXPECT_THAT(
      h.TakeOutput(),
      ElementsAre(
          R"({"voyage":"india","navio":"S. Gabriel","navio_info":{"nome":"S. Gabriel","navio_id":1}})",
          R"({"voyage":"india","navio":"Sao Rafael","navio_info":null})",
          R"({"voyage":"india","navio_info":null})"));
  // The table changes: later stream records see the new row.
  ASSERT_OK(h.ProcessJson(R"({"nome":"S. Gabriel","navio_id":10})", 0, 1));
  ASSERT_OK(h.ProcessJson(R"({"voyage":"brazil","navio":"S. Gabriel"})", 200));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(HasSubstr(R"("navio_info":{"nome":"S. Gabriel","navio_id":10})")));
  EXPECT_EQ(h.metrics().Value("join_unmatched_total", "op=\"normalize\""), 2);
}

TEST(LookupJoinTest, InnerJoinDropsUnmatchedAndStateSurvivesRestore) {
  std::string dir = ::testing::TempDir() + "/lookup_" + std::to_string(::getpid());
  RemoveTree(dir);
  LookupJoinOperator op(Spec(JoinType::kInner, "code", "code"), "countries");
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessJson(R"({"code":1,"name":"Portugal"})", 0, 1));
  ASSERT_OK(h.Snapshot(dir));
  LookupJoinOperator restored(Spec(JoinType::kInner, "code", "code"), "countries");
  ASSERT_OK(h.RestoreInto(&restored, dir, kMinTime));
  EXPECT_EQ(restored.table_size(), 1u);
  // 1.0 and 1 are the same key; 2 has no row.
  ASSERT_OK(h.ProcessBatch({{R"({"code":1.0})", 5}, {R"({"code":2})", 6}}));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(R"({"code":1.0,"countries":{"code":1,"name":"Portugal"}})"));
  RemoveTree(dir);
}

TEST(TemporalJoinTest, JoinsTheVersionValidAtEventTimeAfterTheWatermark) {
  TemporalJoinOperator op(Spec(JoinType::kLeft, "currency", "currency"), "rates");
  OperatorHarness h(&op, nullptr, "convert");
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessBatch(
      {{R"({"currency":"EUR","rate":1.10})", 100}, {R"({"currency":"EUR","rate":1.20})", 200}}, 1));
  ASSERT_OK(h.ProcessBatch({{R"({"order":1,"currency":"EUR"})", 150},
                            {R"({"order":2,"currency":"EUR"})", 250},
                            {R"({"order":3,"currency":"EUR"})", 50},
                            {R"({"order":4,"currency":"USD"})", 160}}));
  EXPECT_THAT(h.TakeOutput(), IsEmpty()) << "results wait for the watermark";
  // A version at 240 arrives before the watermark passes 250: order 2 sees it.
  ASSERT_OK(h.ProcessJson(R"({"currency":"EUR","rate":1.30})", 240, 1));
  ASSERT_OK(h.AdvanceWatermark(160));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(R"({"order":3,"currency":"EUR","rates":null})",
                          R"({"order":1,"currency":"EUR","rates":{"currency":"EUR","rate":1.1}})"));
  ASSERT_OK(h.AdvanceWatermark(161));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(R"({"order":4,"currency":"USD","rates":null})"));
  EXPECT_EQ(op.version_count(), 3u);
  ASSERT_OK(h.AdvanceWatermark(251));
  EXPECT_THAT(h.TakeOutput(),
              ElementsAre(R"({"order":2,"currency":"EUR","rates":{"currency":"EUR","rate":1.3}})"));
  // Superseded versions behind the watermark are compacted: only 240 remains.
  EXPECT_EQ(op.version_count(), 1u);
  ASSERT_OK(h.Commit());
  auto table = h.state().OpenTable("convert/versions");
  ASSERT_OK(table.status());
  EXPECT_EQ(*(*table)->CountKeys(), 1u);
  // Late records of either side go to too_late.
  ASSERT_OK(h.ProcessJson(R"({"order":5,"currency":"EUR"})", 250));
  ASSERT_OK(h.ProcessJson(R"({"currency":"EUR","rate":9.9})", 245, 1));
  EXPECT_THAT(h.TakeSide("too_late"),
              ElementsAre(HasSubstr(R"("side":"stream")"), HasSubstr(R"("side":"table")")));
  EXPECT_EQ(op.pending_count(), 0u);
}

TEST(TemporalJoinTest, InnerJoinDropsUnmatchedAndPendingSurvivesRestore) {
  std::string dir = ::testing::TempDir() + "/temporal_" + std::to_string(::getpid());
  RemoveTree(dir);
  TemporalJoinOperator op(Spec(JoinType::kInner, "k", "k"), "t");
  OperatorHarness h(&op);
  ASSERT_OK(h.Open());
  ASSERT_OK(h.ProcessJson(R"({"k":"a","v":1})", 10, 1));
  ASSERT_OK(h.ProcessBatch({{R"({"k":"a","n":1})", 20}, {R"({"k":"b","n":2})", 21}}));
  ASSERT_OK(h.Snapshot(dir));
  TemporalJoinOperator restored(Spec(JoinType::kInner, "k", "k"), "t");
  ASSERT_OK(h.RestoreInto(&restored, dir, kMinTime));
  EXPECT_EQ(restored.pending_count(), 2u);
  ASSERT_OK(h.AdvanceWatermark(kMaxTime));
  EXPECT_THAT(h.TakeOutput(), ElementsAre(R"({"k":"a","n":1,"t":{"k":"a","v":1}})"));
  EXPECT_EQ(restored.version_count(), 0u);
  RemoveTree(dir);
}

}  // namespace
}  // namespace caravela
