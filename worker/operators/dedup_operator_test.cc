// DedupOperator against a naive reference model of SPEC §4's dedup, on
// random streams with few ids (many retries and conflicts), out-of-order
// event times, watermark advances that expire ids, and snapshot/restore at
// random points, on both state backends. The model knows nothing of the
// operator's blobs, buckets or in-memory index.
#include "worker/operators/dedup_operator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

constexpr int64_t kRetention = 3'600'000;
constexpr int64_t kStart = 1790812800000;  // 2026-10-01T00:00:00Z

// What SPEC §4 says: remember id -> (first event time, payload) until the
// horizon W - retention passes the first event time.
class Model {
 public:
  // Returns "pass", "duplicate", "conflict" or "too_late".
  std::string Process(const std::string& id, const std::string& payload, int64_t t) {
    const int64_t horizon = watermark_ == kMinTime ? kMinTime : watermark_ - kRetention;
    if (t < horizon) return "too_late";
    auto it = ids_.find(id);
    if (it != ids_.end() && it->second.first >= horizon) {
      return it->second.second == payload ? "duplicate" : "conflict";
    }
    ids_[id] = {t, payload};
    return "pass";
  }
  void AdvanceWatermark(int64_t w) { watermark_ = std::max(watermark_, w); }

 private:
  int64_t watermark_ = kMinTime;
  std::map<std::string, std::pair<int64_t, std::string>> ids_;
};

std::string Json(const std::string& id, int amount) {
  return absl::StrCat(R"({"event_id":")", id, R"(","amount":)", amount, "}");
}

// `commit_one_in`: the state is flushed and committed after one batch in
// that many (at random), else after every batch.
void RunRandomStream(uint32_t seed, bool rocksdb, uint32_t commit_one_in = 1) {
  std::mt19937 rng(seed);
  const std::string dir = ::testing::TempDir() + "/dedup_model_" + std::to_string(seed) + "_" +
                          std::to_string(::getpid());
  RemoveTree(dir);
  auto backend = [&]() -> std::unique_ptr<StateBackend> {
    if (!rocksdb) return NewMemoryBackend();
    auto b = OpenRocksDbBackend(dir + "/state");
    EXPECT_OK(b.status());
    return std::move(*b);
  };
  std::vector<std::unique_ptr<DedupOperator>> ops;
  auto new_op = [&] {
    ops.push_back(std::make_unique<DedupOperator>(FieldPath::Parse("event_id"), kRetention,
                                                  std::vector<FieldPath>{}, ""));
    return ops.back().get();
  };
  OperatorHarness h(new_op(), backend(), "unique");
  ASSERT_OK(h.Open());
  Model model;
  std::map<std::string, int64_t> first_time;  // first event time per id, for retries
  int64_t clock = kStart;
  int64_t watermark = kMinTime;
  int snapshots = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<std::pair<std::string, int64_t>> batch;
    std::vector<std::string> expected_out, expected_conflicts;
    int expected_too_late = 0;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      clock += rng() % 20'000;
      // Out of order by up to 30 min; now and then hours late.
      int64_t t = clock - static_cast<int64_t>(rng() % 1'800'000);
      if (rng() % 50 == 0) t -= 2 * kRetention;
      // A small id pool: lots of retries (same payload) and conflicts.
      std::string id = absl::StrCat("id-", rng() % 300);
      int amount = rng() % 8 == 0 ? 2 : 1;
      // A retry carries the first copy's event time, as a real retry does.
      auto first = first_time.find(id);
      if (first != first_time.end() && rng() % 4 != 0) t = first->second;
      first_time.emplace(id, t);
      std::string json = Json(id, amount);
      std::string verdict = model.Process(id, json, t);
      if (verdict == "pass") expected_out.push_back(json);
      if (verdict == "conflict") expected_conflicts.push_back(json);
      if (verdict == "too_late") ++expected_too_late;
      batch.emplace_back(json, t);
    }
    ASSERT_OK(h.ProcessBatch(batch));
    EXPECT_EQ(h.TakeOutput(), expected_out) << "seed " << seed << " step " << step;
    std::vector<std::string> conflicts = h.TakeSide("conflicts");
    ASSERT_EQ(conflicts.size(), expected_conflicts.size()) << "seed " << seed << " step " << step;
    for (size_t i = 0; i < conflicts.size(); ++i) {
      EXPECT_THAT(conflicts[i], ::testing::HasSubstr(expected_conflicts[i]));
    }
    EXPECT_EQ(h.TakeSide("too_late").size(), static_cast<size_t>(expected_too_late));
    if (rng() % 3 == 0) {
      watermark = std::max(watermark, clock - static_cast<int64_t>(rng() % 3'600'000));
      model.AdvanceWatermark(watermark);
      ASSERT_OK(h.AdvanceWatermark(watermark));
    }
    if (commit_one_in == 1 || rng() % commit_one_in == 0) ASSERT_OK(h.Commit());
    if (rng() % 40 == 0) {
      // Snapshot, restore into a fresh operator: nothing is forgotten.
      std::string snap = absl::StrCat(dir, "/snap", snapshots++);
      ASSERT_OK(h.Snapshot(snap));
      ASSERT_OK(h.RestoreInto(new_op(), snap, watermark));
    }
  }
  // Expired ids leave the table: after the horizon passes everything, it is
  // empty once the last bucket is behind it.
  ASSERT_OK(h.AdvanceWatermark(clock + 2 * kRetention));
  ASSERT_OK(h.Commit());
  auto table = h.state().OpenTable("unique/ids");
  ASSERT_OK(table.status());
  EXPECT_EQ(*(*table)->CountKeys(), 0u);
  EXPECT_EQ(h.metrics().Value("dedup_passed_total", "op=\"unique\""),
            h.metrics().Value("dedup_expired_ids_total", "op=\"unique\""));
  RemoveTree(dir);
}

TEST(DedupOperatorModelTest, MatchesReferenceInMemory) {
  for (uint32_t seed = 1; seed <= 8; ++seed) RunRandomStream(seed, /*rocksdb=*/false);
}

TEST(DedupOperatorModelTest, MatchesReferenceOnRocksDbWithRestores) {
  for (uint32_t seed = 101; seed <= 102; ++seed) RunRandomStream(seed, /*rocksdb=*/true);
}

// Blobs are written at Flush: between two, duplicates and conflicts are
// found in the blobs of earlier batches still in memory, and expiry drops
// them before they reach the table.
TEST(DedupOperatorModelTest, MatchesReferenceWithBlobsHeldBetweenFlushes) {
  for (uint32_t seed = 201; seed <= 203; ++seed) {
    RunRandomStream(seed, /*rocksdb=*/true, /*commit_one_in=*/8);
  }
  RunRandomStream(204, /*rocksdb=*/false, /*commit_one_in=*/8);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Batch mode (reconciliation): decisions over the whole stream, first copy
// in arrival order wins (a later copy with another payload too is dropped,
// without comparing payloads), nothing expires and nothing is stored.
TEST(DedupOperatorBatchTest, FirstCopyWinsOverTheWholeStreamAndNothingIsStored) {
  DedupOperator op(FieldPath::Parse("event_id"), kRetention, {}, "");
  op.set_batch(true);
  OperatorHarness h(&op, NewMemoryBackend(), "unique");
  ASSERT_OK(h.Open());
  std::mt19937 rng(11);
  std::map<std::string, std::string> first;  // id -> first payload
  int64_t repeats = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<std::pair<std::string, int64_t>> batch;
    std::vector<std::string> want_out;
    for (int i = 0; i < 30; ++i) {
      const std::string id = absl::StrCat("id-", rng() % 500);
      const std::string json = Json(id, rng() % 6 == 0 ? 2 : 1);
      // Event times spread over days: no horizon applies in batch mode.
      batch.emplace_back(json, kStart + static_cast<int64_t>(rng() % 5) * 24 * kRetention);
      auto [it, inserted] = first.emplace(id, json);
      if (inserted) {
        want_out.push_back(json);
      } else {
        ++repeats;
      }
    }
    ASSERT_OK(h.ProcessBatch(batch));
    EXPECT_EQ(h.TakeOutput(), want_out) << "step " << step;
    EXPECT_THAT(h.TakeSide("conflicts"), ::testing::IsEmpty());
    EXPECT_THAT(h.TakeSide("too_late"), ::testing::IsEmpty());
    ASSERT_OK(h.Commit());
  }
  auto table = h.state().OpenTable("unique/ids");
  ASSERT_OK(table.status());
  EXPECT_EQ(*(*table)->CountKeys(), 0u) << "batch mode stores no ids";
  EXPECT_EQ(h.metrics().Value("dedup_duplicates_total", "op=\"unique\""), repeats);
  EXPECT_EQ(h.metrics().Value("dedup_passed_total", "op=\"unique\""),
            static_cast<int64_t>(first.size()));
}

// Output::Forward moves a record out of the batch only when the runtime
// handed that batch over, and copies it otherwise.
TEST(OutputTest, ForwardMovesOnlyOutOfAHandedOverBatch) {
  JsonDecoder dec;
  RecordBatch in;
  ASSERT_OK(dec.Decode(R"({"id":"a","v":1})", &in.Append()));
  ASSERT_OK(dec.Decode(R"({"id":"b","v":2})", &in.Append()));
  Output out;
  out.Forward(in[0]);  // not handed over: a copy
  EXPECT_EQ(in[0].ToJson(), R"({"id":"a","v":1})");
  out.set_movable_input(&in);
  out.Forward(in[1]);  // handed over: moved, the batch's slot is left empty
  EXPECT_TRUE(in[1].nodes().empty());
  RecordBatch other;
  ASSERT_OK(dec.Decode(R"({"id":"c"})", &other.Append()));
  out.Forward(other[0]);  // a record of another batch: a copy
  EXPECT_EQ(other[0].ToJson(), R"({"id":"c"})");
  ASSERT_EQ(out.main().size(), 3u);
  EXPECT_EQ(out.main()[0].ToJson(), R"({"id":"a","v":1})");
  EXPECT_EQ(out.main()[1].ToJson(), R"({"id":"b","v":2})");
  EXPECT_EQ(out.main()[2].ToJson(), R"({"id":"c"})");
}

}  // namespace
}  // namespace caravela
